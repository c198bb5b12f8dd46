// Replication slot state from pg_replication_slots, for setup, tests and
// `outboxd status`. Works on regular and replication connections.
//
//   OUTBOXD_ASSIGN_OR_RETURN(SlotInfo slot, QuerySlot(conn, "outboxd"));
//   if (!slot.exists) return absl::NotFoundError("run outboxd setup");
//   LOG(INFO) << "slot lag: " << slot.lag_bytes << " bytes";
#ifndef OUTBOXD_PG_SLOT_H_
#define OUTBOXD_PG_SLOT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "pg/connection.h"
#include "pg/lsn.h"

namespace outboxd::pg {

struct SlotInfo {
  bool exists = false;    // the other fields are meaningful only when true
  bool active = false;    // a walsender is streaming from it
  int active_pid = 0;     // that walsender's PID, 0 when inactive
  std::string database;   // "" for a physical slot
  std::string plugin;     // "pgoutput" for outboxd's slots
  std::string slot_type;  // "logical" or "physical"
  Lsn confirmed_flush_lsn = kInvalidLsn;
  Lsn restart_lsn = kInvalidLsn;
  std::string wal_status;  // reserved, extended, unreserved, lost
  // Bytes of WAL that can still be written before the slot loses WAL it needs;
  // <= 0 once it is `unreserved`. nullopt when max_slot_wal_keep_size is -1
  // (unlimited) or the slot is lost.
  std::optional<int64_t> safe_wal_size;
  // WAL the slot keeps unconfirmed: pg_current_wal_lsn() - confirmed_flush_lsn.
  int64_t lag_bytes = 0;
};

absl::StatusOr<SlotInfo> QuerySlot(Connection& conn, std::string_view slot);
// QuerySlot in two halves, for a caller that sends the query itself
// (relay/slot_watch.cc, over libpq's asynchronous API so the stream never waits):
// the SQL for a slot name already quoted as a literal, and its answer.
std::string SlotQuery(std::string_view slot_literal);
absl::StatusOr<SlotInfo> ParseSlotRow(const Result& result);

// Why an existing slot cannot serve outboxd on this connection's database ("is a
// physical slot", "uses plugin X, not pgoutput", "belongs to database D"), or "" when
// it can.
absl::StatusOr<std::string> SlotMismatch(Connection& conn, const SlotInfo& slot);

// A logical slot created on a replication connection together with an exported
// snapshot: a regular connection that runs SET TRANSACTION SNAPSHOT 'snapshot' sees
// exactly the transactions committed before `consistent_point`, from which the slot
// streams. The snapshot lives until the next command on `conn`.
struct CreatedSlot {
  Lsn consistent_point = kInvalidLsn;
  std::string snapshot;
};
absl::StatusOr<CreatedSlot> CreateSlotWithSnapshot(Connection& conn, std::string_view slot);

// pg_drop_replication_slot on a regular connection; Unavailable (SQLSTATE 55006)
// while a walsender uses the slot.
absl::Status DropSlot(Connection& conn, std::string_view slot);

}  // namespace outboxd::pg

#endif  // OUTBOXD_PG_SLOT_H_
