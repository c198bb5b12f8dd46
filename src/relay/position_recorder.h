// Records how far the broker has acknowledged in "<table>_relay_state" (see
// outbox/relay_state.h), so cleanup, status and a re-created slot know which outbox
// rows are published. Every interval, a tiny query on the relay's regular connection
// takes a horizon (H, L) from the server and queues it; once the acknowledged
// watermark passes a queued L, its H is recorded. A queue, not one horizon at a
// time: L is the head of the WAL when taken, and a relay behind the head (a broker
// outage, a slow broker, a burst of other tables' WAL) used to wait for the head of
// that moment before taking the next one, recording nothing while it caught up
// (issue 20 point 8). Queued every interval, the horizons follow the relay through
// its backlog, one interval apart.
//
// A relay that starts far behind the head (after a restart) has no queued horizon
// in its backlog: until it passes the first, it records the slot's own horizon
// (RelayStateStore::SlotHorizon), which follows what it confirms wherever it reads,
// at the resolution of the server's running-transactions records (every 15 s while
// it is busy, and at checkpoints).
//
// It writes only when there is something new to say: once after it starts, and after
// the broker acknowledges events, until it has recorded a horizon taken at least one
// interval after the last of them. An idle relay writes nothing: each record is a
// transaction of its own, whose xid alone would move the next horizon (and so the
// next record: one transaction id and some WAL a second, issue 28 point 6).
//
//   PositionRecorder recorder("outbox", "outboxd", absl::Seconds(1));
//   // on every loop turn; queries only when due:
//   if (recorder.Due()) OUTBOXD_RETURN_IF_ERROR(recorder.Tick(control, tracker.acknowledged()));
#ifndef OUTBOXD_RELAY_POSITION_RECORDER_H_
#define OUTBOXD_RELAY_POSITION_RECORDER_H_

#include <cstdint>
#include <deque>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "outbox/relay_state.h"
#include "pg/connection.h"
#include "pg/lsn.h"
#include "relay/ack_tracker.h"

namespace outboxd::relay {

class PositionRecorder {
 public:
  PositionRecorder(const std::string& table, std::string slot, absl::Duration interval);

  // A table that is missing or not writable is warned about once and then left
  // alone (the relay works without it; cleanup then keeps every CDC row). Other
  // errors mean the connection is gone and are returned.
  absl::Status Tick(pg::Connection& conn, const AckTracker::Acknowledged& acked);
  // Whether Tick would query now (so the caller can free the connection first).
  bool Due() const { return !disabled_ && absl::Now() >= next_; }
  // The server's history changed (a failover): horizons taken on the old timeline
  // name xids and LSNs the new one may not have reached, so recording one when the
  // new timeline's watermark passes its LSN could mark unpublished rows acknowledged.
  void Forget() {
    candidates_.clear();
    recorded_xid_ = 0;
    stale_until_ = next_seq_;
  }

 private:
  absl::Status Disable(const absl::Status& error);
  struct Candidate {
    outbox::XidHorizon horizon;
    uint64_t seq = 0;  // in the order taken
  };
  // Records `horizon` unless one as new is recorded already or nothing new was
  // acknowledged; `seq` is the candidate's (none for the slot's own horizon).
  absl::Status Record(pg::Connection& conn, const outbox::XidHorizon& horizon,
                      std::optional<uint64_t> seq);

  outbox::RelayStateStore store_;
  std::string slot_;
  absl::Duration interval_;
  // A day at one per second would be 86,400 of them (~50 bytes each); above this many
  // every other one is dropped.
  static constexpr size_t kMaxCandidates = 4096;
  std::deque<Candidate> candidates_;  // oldest first
  uint64_t recorded_xid_ = 0;  // the newest horizon recorded by this process
  uint64_t next_seq_ = 0;      // of the next candidate taken
  // Something acknowledged is not recorded yet until a candidate of this seq or later
  // is; none: the record is up to date. At start: the first candidate recorded.
  std::optional<uint64_t> stale_until_ = 0;
  uint64_t events_seen_ = 0;  // Acknowledged::events at the last Tick
  absl::Time next_ = absl::InfinitePast();
  bool disabled_ = false;
};

}  // namespace outboxd::relay

#endif  // OUTBOXD_RELAY_POSITION_RECORDER_H_
