// The --dedupe rule (relay/resume_dedupe.h): the window check, the question to the
// sink, the fallbacks said once.
#include "relay/resume_dedupe.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/log_escape.h"
#include "outbox/message_format.h"

namespace outboxd::relay {

namespace {

// A message is made after its event's commit, but the commit time is the server's
// clock and the message's the producing relay's: this much apart is allowed. More only
// costs duplicates (the read-back stops early), and kafka/read_back.cc notices it.
constexpr int64_t kClockMarginMs = 5000;

}  // namespace

int64_t ReadBackLimit(uint64_t max_in_flight) {
  return static_cast<int64_t>(std::min<uint64_t>(max_in_flight, uint64_t{1} << 40)) * 2;
}

absl::StatusOr<Dedupe> ParseDedupe(std::string_view name) {
  if (name == "auto") return Dedupe::kAuto;
  if (name == "on") return Dedupe::kOn;
  if (name == "off") return Dedupe::kOff;
  return absl::InvalidArgumentError(absl::StrCat(
      "--dedupe \"", absl::string_view(name.data(), name.size()), "\": expected auto, on or off"));
}

void ResumeDedupe::Begin(Window window) {
  Summarize();
  reported_topics_.clear();
  ++window_number_;
  // Unmarked messages cannot be told from other producers': no window, at least once.
  if (mode_ == Dedupe::kOff || window.mark.empty() || window.until <= window.since) {
    window_ = {};
    return;
  }
  window_ = std::move(window);
}

absl::StatusOr<bool> ResumeDedupe::AlreadyPublished(sink::Sink& sink, pg::Lsn commit_lsn,
                                                    int64_t commit_us, sink::HeldQuery message) {
  // Committed after the server's position at connect: never sent before. The one
  // comparison every live event pays.
  if (commit_lsn > window_.until) {
    Summarize();
    return false;
  }
  message.mark = {.name = outbox::kSlotHeader, .value = window_.mark};
  message.since = window_.since;
  message.window = window_number_;
  message.max_messages = window_.max_messages;
  message.any_lsn = window_.any_lsn;
  // A backfilled row's commit time is unknown (its row was streamed before, at any time).
  if (!window_.any_lsn && commit_us > 0) message.not_before_ms = commit_us / 1000 - kClockMarginMs;
  absl::StatusOr<sink::HeldAnswer> answer = sink.Held(message);
  if (absl::IsUnimplemented(answer.status())) {
    if (!told_unreadable_) {
      spdlog::info("--dedupe {}: {}; events sent before a restart may be sent again",
                   mode_ == Dedupe::kOn ? "on" : "auto", std::string(answer.status().message()));
      told_unreadable_ = true;
    }
    window_ = {};
    return false;
  }
  if (!answer.ok()) return answer.status();
  ReportFallbacks(message.topic, *answer);
  ++asked_;
  if (answer->held) {
    ++skipped_;
    metrics_->DedupeSkipped();
  }
  return answer->held;
}

void ResumeDedupe::End() {
  Summarize();
  window_ = {};
}

void ResumeDedupe::Summarize() {
  if (asked_ == 0) return;
  if (window_.any_lsn) {
    spdlog::info(
        "--dedupe: {} of the {} backfilled events were already at the broker, not sent "
        "again",
        skipped_, asked_);
  } else {
    spdlog::info(
        "--dedupe: {} of the {} events resumed since {} were already at the broker, "
        "not sent again",
        skipped_, asked_, pg::FormatLsn(window_.since));
  }
  asked_ = skipped_ = 0;
}

void ResumeDedupe::ReportFallbacks(std::string_view topic, const sink::HeldAnswer& answer) {
  if (answer.fallbacks.empty()) return;
  if (!reported_topics_.emplace(topic).second) return;
  for (const auto& [reason, detail] : answer.fallbacks) {
    metrics_->DedupeFellBack(reason);
    const std::string line = absl::StrCat(
        "--dedupe: topic ", EscapeForLog(topic), " could not be read back whole (", reason, ": ",
        EscapeForLog(detail), "); events of the window since ", pg::FormatLsn(window_.since),
        " that the broker already holds there may be sent again");
    if (mode_ == Dedupe::kOn) {
      spdlog::warn("{}", line);
    } else {
      spdlog::info("{}", line);
    }
  }
}

}  // namespace outboxd::relay
