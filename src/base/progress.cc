#include "base/progress.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/log.h"

namespace outboxd {
namespace {

std::atomic<bool> g_enabled{false};
std::mutex g_line_mu;
bool g_line_shown = false;  // guarded by g_line_mu

// A redraw shorter than the previous line must not leave its tail: "\x1b[K" erases
// to the end of the line (every terminal outboxd's users run speaks ANSI).
void DrawOnStderr(std::string_view line) {
  if (!g_enabled.load(std::memory_order_relaxed)) return;
  std::string out = "\r";
  out.append(line).append("\x1b[K");
  std::lock_guard<std::mutex> lock(g_line_mu);
  std::fwrite(out.data(), 1, out.size(), stderr);
  std::fflush(stderr);
  g_line_shown = !line.empty();
}

const char* UnitName(Progress::Unit unit) {
  switch (unit) {
    case Progress::Unit::kRows:
      return "rows";
    case Progress::Unit::kEvents:
      return "events";
    case Progress::Unit::kLetters:
      return "letters";
    case Progress::Unit::kBytes:
      return "MiB";
  }
  return "";
}

std::string Amount(Progress::Unit unit, double value) {
  if (unit == Progress::Unit::kBytes) return absl::StrFormat("%.1f", value / (1024.0 * 1024.0));
  return absl::StrFormat("%.0f", value);
}

// absl prints a zero duration as "0"; the line says "0s left".
std::string Seconds(absl::Duration d) {
  return d == absl::ZeroDuration() ? "0s" : absl::FormatDuration(d);
}

std::string PerSecond(Progress::Unit unit, double rate) {
  return absl::StrCat(Amount(unit, rate), " ", UnitName(unit), "/s");
}

}  // namespace

void SetProgressLineEnabled(bool enabled) { g_enabled = enabled; }

bool ProgressLineEnabled() { return g_enabled; }

bool TakeProgressLine() {
  std::lock_guard<std::mutex> lock(g_line_mu);
  return std::exchange(g_line_shown, false);
}

Progress::Progress(Options options) : options_(std::move(options)) {
  if (!options_.draw) options_.draw = DrawOnStderr;
  started_ = options_.clock();
  samples_.push_back({started_, 0, 0});
}

Progress::~Progress() { Finish(); }

void Progress::Update(int64_t done, int64_t items) {
  if (finished_) return;
  done_ = done;
  items_ = options_.rate_unit ? items : done;
  const absl::Time now = options_.clock();
  Record(now);
  if (now - last_draw_ >= kRedraw) {
    last_draw_ = now;
    Draw(Line());
  }
}

// Samples at least 100 ms apart keep the window's queue short (~100 entries) however
// often Update is called; the newest one is always the latest figure.
void Progress::Record(absl::Time now) {
  const size_t n = samples_.size();
  if (n >= 2 && samples_.back().at - samples_[n - 2].at < absl::Milliseconds(100)) {
    samples_.back() = {now, done_, items_};
  } else {
    samples_.push_back({now, done_, items_});
  }
  // Keep one sample at or before the window's start: the rate spans the whole window.
  while (samples_.size() > 2 && samples_[1].at <= now - kWindow) samples_.pop_front();
}

std::optional<double> Progress::RateOf(int64_t Sample::*count) const {
  const Sample& first = samples_.front();
  const Sample& last = samples_.back();
  const double seconds = absl::ToDoubleSeconds(last.at - first.at);
  if (seconds <= 0) return std::nullopt;
  return static_cast<double>(last.*count - first.*count) / seconds;
}

std::optional<double> Progress::Rate() const { return RateOf(&Sample::done); }

std::optional<double> Progress::ItemRate() const { return RateOf(&Sample::items); }

std::optional<absl::Duration> Progress::TimeLeft() const {
  if (!options_.total) return std::nullopt;
  const int64_t left = *options_.total - done_;
  if (left <= 0) return absl::ZeroDuration();
  const std::optional<double> rate = Rate();
  if (!rate || *rate <= 0) return std::nullopt;
  return absl::Seconds(std::ceil(static_cast<double>(left) / *rate));
}

std::string Progress::Line() const {
  const Unit unit = options_.unit;
  std::string line = absl::StrCat(options_.what, ": ", Amount(unit, done_));
  if (options_.total) {
    absl::StrAppend(&line, "/", Amount(unit, *options_.total), " ", UnitName(unit));
    if (*options_.total > 0) {
      absl::StrAppend(&line, " (", 100 * std::min(done_, *options_.total) / *options_.total, "%)");
    }
  } else {
    absl::StrAppend(&line, " ", UnitName(unit));
  }
  if (const std::optional<double> rate = ItemRate()) {
    absl::StrAppend(&line, ", ", PerSecond(options_.rate_unit.value_or(unit), *rate));
  }
  if (const std::optional<absl::Duration> left = TimeLeft()) {
    absl::StrAppend(&line, ", ", Seconds(*left), " left");
  }
  return line;
}

std::string Progress::Summary() const {
  const Unit unit = options_.unit;
  const absl::Duration elapsed = samples_.back().at - started_;
  // Short of its total (stopped, a session lost, letters still blocked): says so.
  std::string line = absl::StrCat(options_.what, " done: ", Amount(unit, done_));
  if (options_.total && done_ < *options_.total) {
    line = absl::StrCat(options_.what, " stopped at ", Amount(unit, done_), "/",
                        Amount(unit, *options_.total));
  }
  absl::StrAppend(&line, " ", UnitName(unit));
  if (options_.rate_unit) {
    absl::StrAppend(&line, ", ", Amount(*options_.rate_unit, items_), " ",
                    UnitName(*options_.rate_unit));
  }
  // A tenth of a second, or a millisecond below one second: "in 0s (777727 rows/s)"
  // read as a contradiction.
  const absl::Duration shown = absl::Trunc(
      elapsed, elapsed < absl::Seconds(1) ? absl::Milliseconds(1) : absl::Milliseconds(100));
  absl::StrAppend(&line, " in ", Seconds(shown));
  if (shown > absl::ZeroDuration()) {
    absl::StrAppend(&line, " (",
                    PerSecond(options_.rate_unit.value_or(unit),
                              static_cast<double>(items_) / absl::ToDoubleSeconds(elapsed)),
                    ")");
  }
  return line;
}

void Progress::Finish() {
  if (finished_) return;
  Record(options_.clock());
  finished_ = true;
  if (drawn_) options_.draw("");
  spdlog::info("{}", Summary());
}

void Progress::Draw(std::string_view line) {
  drawn_ = true;
  options_.draw(line);
}

}  // namespace outboxd
