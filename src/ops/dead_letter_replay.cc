// One round per pass: the oldest letter of each aggregate not stopped yet, encoded and
// checked as the relay would, produced, flushed, and the acknowledged ones deleted in
// a transaction committed only after the broker's acknowledgements. A replay that
// dies before its COMMIT leaves every letter in place: it publishes them again next
// time (at least once, like the relay), never drops one it did not publish.
#include "ops/dead_letter_replay.h"

#include <algorithm>
#include <memory>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/log.h"
#include "base/log_escape.h"
#include "base/progress.h"
#include "base/status_macros.h"
#include "outbox/broker_message.h"
#include "outbox/topic_template.h"

namespace outboxd::ops {
namespace {

// One letter of a round and what became of it.
struct Attempt {
  outbox::DeadLetter letter;
  std::string topic;                    // where it goes: its own topic or --topic's
  std::optional<absl::Status> outcome;  // unset: no delivery report yet
};

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

// A letter holding an outboxd message that could not be read has no event in it: its
// escaped bytes published with an empty key and type would reach consumers as if they
// were one. It stays, blocking only itself (its aggregate is its own id), until a
// person has read it and deleted it.
absl::Status UnreadableMessage(const outbox::DeadLetter& l, const outbox::DeadLetterStore& store) {
  return absl::FailedPreconditionError(
      absl::StrCat("an outboxd message whose content cannot be read, not an event: nothing to "
                   "republish; read it with outboxd dead-letter list, then delete it: ",
                   store.DeleteSql(l.id)));
}

// A letter replay must not publish as it stands: its content is no event, a NULL key
// is not set yet, or a field's original bytes were not kept (OkStatus: publish it).
absl::Status Unpublishable(const outbox::DeadLetter& l, const outbox::DeadLetterStore& store) {
  if (outbox::IsUnreadableMessage(l)) return UnreadableMessage(l, store);
  if (outbox::HasNullKey(l)) {
    return absl::FailedPreconditionError(
        absl::StrCat("the row's id or aggregate_id was NULL: set the real value in ", store.table(),
                     " (UPDATE ... WHERE seq = ", l.seq, "), then replay"));
  }
  if (l.original_lost) {
    return absl::FailedPreconditionError(absl::StrCat(
        "a field holds a stand-in (~sha256:) whose original bytes the table did not keep "
        "(made by an older outboxd setup): set the value in ",
        store.table(), " (UPDATE ... WHERE seq = ", l.seq, "), then replay"));
  }
  return absl::OkStatus();
}

// Encodes each letter as the relay does and hands it to the producer. A letter that
// fails the relay's checks (a payload that is not a JSON object or array, a missing
// --key-pointer field, a topic name Kafka refuses) gets its outcome at once and is
// not sent: it stays a dead letter, with its error, and blocks its aggregate.
void ProduceRound(std::vector<Attempt>& round, outbox::MessageEncoder& encoder,
                  sink::Sink& publisher, const outbox::DeadLetterStore& store) {
  for (size_t i = 0; i < round.size(); ++i) {
    Attempt& a = round[i];
    const outbox::DeadLetter& l = a.letter;
    if (absl::Status refused = Unpublishable(l, store); !refused.ok()) {
      a.outcome = refused;
      continue;
    }
    // The letter holds the payload, not the value: encoded again in --format.
    const outbox::BrokerMessage built = outbox::BuildBrokerMessage(encoder,
                                                                   {.id = l.id,
                                                                    .aggregate_id = l.aggregate_id,
                                                                    .type = l.type,
                                                                    .payload = l.payload,
                                                                    .created_at = l.created_at,
                                                                    .headers = l.headers},
                                                                   l.lsn, a.topic, i);
    absl::Status status = built.encoded;
    if (status.ok()) status = publisher.Produce(built.message);
    if (!status.ok()) a.outcome = status;
  }
}

// Deletes the acknowledged letters (inside the caller's transaction) and records the
// others as failures that stop their aggregate.
absl::Status Settle(pg::Connection& conn, const outbox::DeadLetterStore& store,
                    const std::vector<Attempt>& round, absl::Duration ack_timeout,
                    std::set<std::string>& stopped, ReplayReport& report) {
  for (const Attempt& a : round) {
    const outbox::DeadLetter& l = a.letter;
    absl::Status status = a.outcome.value_or(absl::DeadlineExceededError(
        absl::StrCat("not acknowledged within ", absl::FormatDuration(ack_timeout))));
    if (!status.ok()) {
      stopped.insert(l.aggregate_id);
      report.failures.push_back(absl::StrCat(l.aggregate_id, ": ", status.message()));
      continue;
    }
    OUTBOXD_RETURN_IF_ERROR(store.Remove(conn, l.seq));
    ++report.replayed;
    ++report.replayed_to[a.topic];
    // Debug: a replay of thousands would flood the terminal under its progress line.
    spdlog::debug("replayed {} of aggregate {} to {}", LogExcerpt(l.id), LogExcerpt(l.aggregate_id),
                  LogSafe(a.topic));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ReplayReport> ReplayDeadLetters(pg::Connection& conn,
                                               const outbox::DeadLetterStore& store,
                                               const ReplayOptions& options) {
  // Before anything is published: a letter republished and then not deleted would be
  // published again by the next replay.
  OUTBOXD_RETURN_IF_ERROR(store.CheckReplayPrivileges(conn));
  std::optional<outbox::TopicTemplate> topic;
  if (!options.topic_template.empty()) {
    OUTBOXD_ASSIGN_OR_RETURN(topic, outbox::TopicTemplate::Parse(options.topic_template));
  }
  std::vector<Attempt>* round_in_flight = nullptr;
  OUTBOXD_ASSIGN_OR_RETURN(
      std::unique_ptr<sink::Sink> publisher,
      options.make_sink({.on_delivery = [&round_in_flight](const sink::DeliveryReport& r) {
        if (round_in_flight != nullptr && r.tag < round_in_flight->size()) {
          (*round_in_flight)[r.tag].outcome = r.status;
        }
      }}));
  ReplayReport report;
  std::unique_ptr<Progress> progress;  // its total: the letters the first round found
  std::set<std::string> stopped;
  outbox::MessageEncoder encoder(options.format);
  std::string topic_buffer;
  while (true) {
    OUTBOXD_ASSIGN_OR_RETURN(std::vector<outbox::DeadLetter> letters,
                             store.List(conn, options.aggregate));
    if (progress == nullptr) {
      progress = std::make_unique<Progress>(
          Progress::Options{.what = "dead-letter replay",
                            .unit = Progress::Unit::kLetters,
                            .total = static_cast<int64_t>(letters.size())});
    }
    std::vector<Attempt> round;
    for (outbox::DeadLetter& l : NextRound(std::move(letters), stopped)) {
      std::string name(topic ? topic->Render(l.type, options.table_name, topic_buffer) : l.topic);
      round.push_back({.letter = std::move(l), .topic = std::move(name)});
    }
    if (round.empty()) return report;
    round_in_flight = &round;
    ProduceRound(round, encoder, *publisher, store);
    absl::Status flushed = publisher->Flush(options.ack_timeout);
    round_in_flight = nullptr;  // a report after the timeout must not count
    OUTBOXD_RETURN_IF_ERROR(conn.Exec("BEGIN").status());
    absl::Status settled = Settle(conn, store, round, options.ack_timeout, stopped, report);
    if (settled.ok()) settled = conn.Exec("COMMIT").status();
    if (!settled.ok()) {
      (void)conn.Exec("ROLLBACK");  // best effort: the letters stay, to be replayed again
      return settled;
    }
    progress->Update(report.replayed);
    // The broker is not answering: the next round would only wait as long again.
    if (!flushed.ok() &&
        std::any_of(round.begin(), round.end(), [](const Attempt& a) { return !a.outcome; })) {
      return report;
    }
  }
}

}  // namespace outboxd::ops
