// ResumeDedupe: the --dedupe rule, whole. A session streams everything after the
// slot's confirmed position again, and a previous process (or producer) may already
// have delivered part of it: a kill -9, a lost connection, a fatal producer error all
// leave such a window. Events committed after the position the server had when the
// session connected cannot have been sent before: they are published without a
// question (one comparison per event, so live latency and CPU do not change). Inside
// the window an event is skipped only when the broker holds that very message (its
// id, lsn and key: sink::HeldQuery), among this relay's own messages (the
// outboxd_slot header), one copy per event: never because a later
// event is there, since a dead letter or a message too large for the broker leaves a
// gap. The sink reads the broker back (sink::Sink::Held; Kafka: kafka/read_back.h,
// per topic, bounded). What it could not read back whole is logged once per topic
// with the reason and counted (outboxd_dedupe_fallbacks_total{reason}); there events
// are sent as before, at least once.
//
//   ResumeDedupe dedupe(Dedupe::kAuto, &stats->metrics);
//   dedupe.Begin({.since = confirmed, .until = server_position, .mark = "app/outboxd"});
//   OUTBOXD_ASSIGN_OR_RETURN(
//       const bool held,
//       dedupe.AlreadyPublished(sink, tx.lsn, {.topic = t, .id = id, .lsn = lsn, .key = key}));
//   if (held) ... // acknowledged, not produced
#ifndef OUTBOXD_RELAY_RESUME_DEDUPE_H_
#define OUTBOXD_RELAY_RESUME_DEDUPE_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "observe/metrics.h"
#include "pg/lsn.h"
#include "relay/relay_options.h"
#include "sink/sink.h"

namespace outboxd::relay {

// The read-back's limit per partition (own and others' messages) for a relay with this
// --max-in-flight: twice it, room for the events in flight at a kill plus as many again
// acknowledged but not yet confirmed. A larger window (confirmations far behind, or
// another producer writing much more to the partition) falls back to at least once
// there (window_too_large), counted.
int64_t ReadBackLimit(uint64_t max_in_flight);

// "auto" | "on" | "off"; InvalidArgument naming the choices otherwise.
absl::StatusOr<Dedupe> ParseDedupe(std::string_view name);

class ResumeDedupe {
 public:
  struct Window {
    pg::Lsn since = 0;  // the position the session resumes from (the slot's confirmed)
    pg::Lsn until = 0;  // the server's WAL position when the session connected
    std::string mark;   // this relay's outboxd_slot header value; empty: unmarked, no window
    // Messages read back per partition at most (ReadBackLimit); past it, at least once.
    int64_t max_messages = 0;
    // A backfill's window (a re-created slot): its rows were streamed before with
    // their commit LSNs, which it does not know, so a message matches by id and key
    // with any lsn, and the read-back has no start to stop at (since 0: back to the
    // limit or the partition's start).
    bool any_lsn = false;
  };

  ResumeDedupe(Dedupe mode, observe::Metrics* metrics) : mode_(mode), metrics_(metrics) {}

  // A session starts streaming: events committed up to window.until may be repeats.
  void Begin(Window window);
  // The session ended: no window until the next Begin.
  void End();

  // Whether the event (its transaction's commit position and time, and its message's
  // topic, id, lsn and key in `message`; the window fills in the rest) is already at the
  // broker, sent by this relay: then it must not be sent again. Past the window, false
  // at once. An error only when the sink's read-back fails for good.
  [[nodiscard]] absl::StatusOr<bool> AlreadyPublished(sink::Sink& sink, pg::Lsn commit_lsn,
                                                      int64_t commit_us, sink::HeldQuery message);

 private:
  // The sink's first answer about a topic: its fallbacks, each logged and counted once.
  void ReportFallbacks(std::string_view topic, const sink::HeldAnswer& answer);
  // Once per window, when it is behind: how many of its events were skipped.
  void Summarize();

  const Dedupe mode_;
  observe::Metrics* metrics_;
  Window window_;
  uint64_t window_number_ = 0;  // sink::HeldQuery::window, one per Begin
  uint64_t asked_ = 0;          // this window's events asked about, and found held
  uint64_t skipped_ = 0;
  absl::flat_hash_set<std::string> reported_topics_;  // this window's, ReportFallbacks
  // A sink that cannot be read back: said once.
  bool told_unreadable_ = false;
};

}  // namespace outboxd::relay

#endif  // OUTBOXD_RELAY_RESUME_DEDUPE_H_
