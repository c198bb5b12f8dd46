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
// Each record is a transaction of its own, whose xid alone moves the next horizon: on
// an idle database that was one record, one transaction id and some WAL a second
// (issue 28 point 6). A horizon that has moved past nothing but the recorder's own
// last transaction is not recorded: an idle relay writes nothing.
//
//   PositionRecorder recorder("outbox", "outboxd", absl::Seconds(1));
//   // on every loop turn; queries only when due:
//   if (recorder.Due()) OUTBOXD_RETURN_IF_ERROR(recorder.Tick(control, tracker.watermark()));
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

namespace outboxd::relay {

class PositionRecorder {
 public:
  PositionRecorder(const std::string& table, std::string slot, absl::Duration interval);

  // A table that is missing or not writable is warned about once and then left
  // alone (the relay works without it; cleanup then keeps every CDC row). Other
  // errors mean the connection is gone and are returned.
  absl::Status Tick(pg::Connection& conn, pg::Lsn watermark);
  // Whether Tick would query now (so the caller can free the connection first).
  bool Due() const { return !disabled_ && absl::Now() >= next_; }
  // The server's history changed (a failover): horizons taken on the old timeline
  // name xids and LSNs the new one may not have reached, so recording one when the
  // new timeline's watermark passes its LSN could mark unpublished rows acknowledged.
  void Forget() {
    candidates_.clear();
    recorded_xid_ = 0;
    own_xid_ = 0;
  }

 private:
  absl::Status Disable(const absl::Status& error);
  // Records `horizon` unless one as new is recorded already, or it moved past nothing
  // but the last record's own transaction.
  absl::Status Record(pg::Connection& conn, const outbox::XidHorizon& horizon);

  outbox::RelayStateStore store_;
  std::string slot_;
  absl::Duration interval_;
  // A day at one per second would be 86,400 of them (~50 bytes each); above this many
  // every other one is dropped.
  static constexpr size_t kMaxCandidates = 4096;
  std::deque<outbox::XidHorizon> candidates_;  // oldest first
  uint64_t recorded_xid_ = 0;  // the newest horizon recorded by this process
  uint64_t own_xid_ = 0;       // the transaction that recorded it (0: unknown)
  absl::Time next_ = absl::InfinitePast();
  bool disabled_ = false;
};

}  // namespace outboxd::relay

#endif  // OUTBOXD_RELAY_POSITION_RECORDER_H_
