// SlotWatch: the slot's wal_status and safe_wal_size read every few seconds while the
// relay streams (issue 3 point 6), on the relay's regular control connection and
// without ever blocking the loop: the query is sent on one loop turn and its answer
// collected on a later one, so a slow server delays the answer, never the stream.
// An answer collected by Settle (the connection was needed for something else) is
// kept and returned by the next Poll: the relay's loop settles often (the position
// recorder every second), and dropping those answers meant that no check ever
// reached the relay (issue 20 point 1).
//
//   SlotWatch watch("outboxd", absl::Seconds(5));
//   // every loop turn:
//   OUTBOXD_ASSIGN_OR_RETURN(std::optional<pg::SlotInfo> slot, watch.Poll(control));
//   if (slot && slot->wal_status == "lost") ...
//   // before using `control` for anything else:
//   OUTBOXD_RETURN_IF_ERROR(watch.Settle(control));
#ifndef OUTBOXD_RELAY_SLOT_WATCH_H_
#define OUTBOXD_RELAY_SLOT_WATCH_H_

#include <optional>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "pg/connection.h"
#include "pg/slot.h"

namespace outboxd::relay {

class SlotWatch {
 public:
  SlotWatch(std::string slot, absl::Duration interval)
      : slot_(std::move(slot)), interval_(interval) {}

  // A new control connection: nothing is in flight on it; the first check is one
  // interval away (the caller has just checked the slot itself).
  void Restart();

  // Sends the query when it is due, collects its answer once it has arrived. Returns
  // the slot (exists, wal_status, safe_wal_size, confirmed_flush_lsn, lag_bytes) when
  // an answer was collected on this call or by Settle since, nullopt otherwise. Never
  // waits for the server.
  absl::StatusOr<std::optional<pg::SlotInfo>> Poll(pg::Connection& conn);

  // Waits for a query still in flight, so `conn` can run other statements (libpq
  // allows one at a time); its answer is returned by the next Poll.
  absl::Status Settle(pg::Connection& conn);

 private:
  absl::Status Send(pg::Connection& conn);
  absl::StatusOr<pg::SlotInfo> Collect(pg::Connection& conn);

  std::string slot_;
  absl::Duration interval_;
  absl::Time next_ = absl::InfiniteFuture();
  bool pending_ = false;
  std::optional<pg::SlotInfo> settled_;  // collected by Settle, not yet returned
};

}  // namespace outboxd::relay

#endif  // OUTBOXD_RELAY_SLOT_WATCH_H_
