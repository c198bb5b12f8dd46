// ReplicationSession: the seam between Relay's state machine and PostgreSQL. The Relay
// asks one connection's lifetime for these things and nothing else: open it (and learn
// the server's history), read the slot, backfill or check it, learn the server's WAL
// position, start the stream (walsender or bulk), run the chores while streaming,
// close. Session (relay/session.h) is the production one, over libpq; tests script
// their own (tests/relay/fake_session.h) so reconnect, standing by, failover detection
// and the bulk switch each get an in-process test (tests/relay/relay_test.cc).
//
//   std::unique_ptr<ReplicationSession> s = std::make_unique<Session>(options, &stats);
//   OUTBOXD_RETURN_IF_ERROR(s->Open());
//   OUTBOXD_ASSIGN_OR_RETURN(SlotState state, s->InspectSlot());
#ifndef OUTBOXD_RELAY_REPLICATION_SESSION_H_
#define OUTBOXD_RELAY_REPLICATION_SESSION_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/stop_signal.h"
#include "outbox/emit_key.h"
#include "outbox/relay_state.h"
#include "pg/connection.h"
#include "pg/lsn.h"
#include "pg/slot.h"
#include "relay/change_stream.h"
#include "relay/dead_letter_gate.h"
#include "relay/standby_hold.h"

namespace outboxd::relay {

class Pipeline;

// The slot as a session found it.
struct SlotState {
  pg::SlotInfo slot;
  // The database the slot is in, or will be once a backfill creates it (the
  // connection's): with the slot's name, the outboxd_slot header of its messages.
  std::string database;
  std::optional<outbox::BackfillRequest> backfill;  // left by `outboxd setup`
  absl::Duration feedback_interval;
};

class ReplicationSession {
 public:
  virtual ~ReplicationSession() = default;

  // A regular connection already open: the next Open() uses it as its control
  // connection instead of opening another.
  virtual void Adopt(pg::Connection conn) = 0;
  // Opens the session's connections and reads the server's history.
  [[nodiscard]] virtual absl::Status Open() = 0;
  // "<system id>/<timeline>" as of Open(): it changes with a promotion (a failover).
  virtual const std::string& history() const = 0;
  // "host:port" of the server the session reached.
  virtual std::string endpoint() const = 0;
  // --source messages|both: the key outboxd_emit signs with.
  [[nodiscard]] virtual absl::StatusOr<outbox::EmitKey> ReadEmitKey() = 0;
  // The slot, a pending backfill, the feedback interval.
  [[nodiscard]] virtual absl::StatusOr<SlotState> InspectSlot() = 0;
  // Publishes the rows before a fresh slot through `pipeline` (relay/backfill_coordinator.h);
  // returns where the stream starts.
  [[nodiscard]] virtual absl::StatusOr<pg::Lsn> RunBackfill(Pipeline& pipeline,
                                                            const pg::SlotInfo& slot,
                                                            const outbox::BackfillRequest& request,
                                                            StopSignal& stop) = 0;
  // The slot must exist and must not have lost WAL.
  [[nodiscard]] virtual absl::Status CheckSlotForStreaming(const pg::SlotInfo& slot) = 0;
  // The server's WAL position now (best effort: an error means unknown).
  [[nodiscard]] virtual absl::StatusOr<pg::Lsn> ServerPosition() = 0;
  // Why the role may not read the slot through SQL ("" when it may): CatchUpPlan's.
  [[nodiscard]] virtual absl::StatusOr<std::string> BulkRefusal() = 0;
  [[nodiscard]] virtual absl::StatusOr<std::unique_ptr<ChangeStream>> StartStream(
      pg::Lsn start) = 0;
  [[nodiscard]] virtual absl::StatusOr<std::unique_ptr<ChangeStream>> StartBulkStream(
      pg::Lsn start, pg::Lsn target) = 0;
  // While streaming, each loop turn: the chores on the control connection.
  [[nodiscard]] virtual absl::Status Upkeep(pg::Lsn watermark) = 0;
  // --standby-slot: how far each named standby has flushed, as last read.
  virtual const StandbyFlushes& standby_flushes() const = 0;
  // After a change of history: what was queued on the old timeline is dropped.
  virtual void ForgetPositions() = 0;
  virtual void Close() = 0;
  // The dead-letter table, on the session's control connection.
  virtual DeadLetterTable* dead_letter_table() = 0;
};

}  // namespace outboxd::relay

#endif  // OUTBOXD_RELAY_REPLICATION_SESSION_H_
