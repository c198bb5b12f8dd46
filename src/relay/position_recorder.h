// Records how far the broker has acknowledged in "<table>_relay_state" (see
// outbox/relay_state.h), so cleanup, status and a re-created slot know which outbox
// rows are published. Two steps per round, each a tiny query on the relay's regular
// connection: take a horizon (H, L) from the server; once the acknowledged watermark
// passes L, record H. Then take the next one.
//
//   PositionRecorder recorder("outbox", "outboxd", absl::Seconds(1));
//   // on every loop turn; queries only when due:
//   if (recorder.Due()) OUTBOXD_RETURN_IF_ERROR(recorder.Tick(control, tracker.watermark()));
#ifndef OUTBOXD_RELAY_POSITION_RECORDER_H_
#define OUTBOXD_RELAY_POSITION_RECORDER_H_

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

 private:
  absl::Status Disable(const absl::Status& error);

  outbox::RelayStateStore store_;
  std::string slot_;
  absl::Duration interval_;
  std::optional<outbox::XidHorizon> candidate_;
  absl::Time next_ = absl::InfinitePast();
  bool disabled_ = false;
};

}  // namespace outboxd::relay

#endif  // OUTBOXD_RELAY_POSITION_RECORDER_H_
