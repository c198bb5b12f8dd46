#include "ops/dead_letter_replay.h"

#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "relay/topic_template.h"

namespace outboxd::ops {
namespace {

// The oldest letter of each aggregate not stopped yet.
std::vector<outbox::DeadLetter> NextRound(std::vector<outbox::DeadLetter> letters,
                                          const std::set<std::string>& stopped) {
  std::vector<outbox::DeadLetter> round;
  std::set<std::string> taken;
  for (outbox::DeadLetter& l : letters) {
    if (stopped.count(l.aggregate_id) || !taken.insert(l.aggregate_id).second) continue;
    round.push_back(std::move(l));
  }
  return round;
}

}  // namespace

absl::StatusOr<ReplayReport> ReplayDeadLetters(pg::Connection& conn,
                                               const outbox::DeadLetterStore& store,
                                               const ReplayOptions& options) {
  std::optional<relay::TopicTemplate> topic;
  if (!options.topic_template.empty()) {
    OUTBOXD_ASSIGN_OR_RETURN(topic, relay::TopicTemplate::Parse(options.topic_template));
  }
  std::map<uint64_t, absl::Status> results;
  OUTBOXD_ASSIGN_OR_RETURN(
      std::unique_ptr<sink::Sink> publisher,
      options.make_sink({.on_delivery = [&results](const sink::DeliveryReport& r) {
        results[r.tag] = r.status;
      }}));
  ReplayReport report;
  std::set<std::string> stopped;
  outbox::MessageEncoder encoder(options.format);
  while (true) {
    OUTBOXD_ASSIGN_OR_RETURN(std::vector<outbox::DeadLetter> letters,
                             store.List(conn, options.aggregate));
    std::vector<outbox::DeadLetter> round = NextRound(std::move(letters), stopped);
    if (round.empty()) return report;
    results.clear();
    std::string topic_buffer;
    for (size_t i = 0; i < round.size(); ++i) {
      const outbox::DeadLetter& l = round[i];
      // Encoded as the relay would have: the letter holds the payload, not the value.
      absl::Status produced = encoder.Encode({.id = l.id,
                                              .aggregate_id = l.aggregate_id,
                                              .type = l.type,
                                              .payload = l.payload,
                                              .created_at = l.created_at},
                                             l.lsn);
      // A payload that still fails the check (not a JSON object or array) goes as it is
      // in the json format, the operator's call; the other formats, and a key taken
      // from the payload, need it valid: that letter fails its replay again.
      if (!produced.ok() && options.format.format == outbox::ValueFormat::kJson &&
          options.format.key_pointer.empty()) {
        produced = absl::OkStatus();
      }
      const outbox::EncodedMessage& m = encoder.message();
      std::string_view name =
          topic ? topic->Render(l.type, options.table_name, topic_buffer) : l.topic;
      if (produced.ok()) {
        produced = publisher->Produce(
            {.topic = name, .key = m.key, .value = m.value, .headers = m.headers, .tag = i});
      }
      if (!produced.ok()) results[i] = produced;
    }
    absl::Status flushed = publisher->Flush(options.ack_timeout);
    for (size_t i = 0; i < round.size(); ++i) {
      const outbox::DeadLetter& l = round[i];
      auto it = results.find(i);
      absl::Status status = it != results.end()
                                ? it->second
                                : absl::DeadlineExceededError(absl::StrCat(
                                      "not acknowledged within ", absl::FormatDuration(
                                                                      options.ack_timeout)));
      if (!status.ok()) {
        stopped.insert(l.aggregate_id);
        report.failures.push_back(absl::StrCat(l.aggregate_id, ": ", status.message()));
        continue;
      }
      OUTBOXD_RETURN_IF_ERROR(store.Remove(conn, l.seq));
      ++report.replayed;
      spdlog::info("replayed {} of aggregate {} to {}", l.id, l.aggregate_id, l.topic);
    }
    if (!flushed.ok() && results.size() < round.size()) return report;
  }
}

}  // namespace outboxd::ops
