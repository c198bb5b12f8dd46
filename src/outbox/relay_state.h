// The relay-state table, "<table>_relay_state", one row per slot: how far the broker
// has acknowledged that slot's events, in a form that applies to outbox rows. Cleanup
// deletes only acknowledged rows, status reports the oldest unacknowledged one, and a
// re-created slot republishes the rows after the last acknowledged position.
//
// The position is an xid horizon, not an LSN: an outbox row does not know its commit
// LSN, but it knows the transaction that wrote it (xmin). The relay takes a horizon
// from the server, H = the oldest transaction still running and L = the WAL insert
// position read just after it. Every transaction older than H had ended, so its
// commit record lies before L. Once the broker has acknowledged everything up to L
// (the relay's watermark passed it), every outbox row written by a transaction older
// than H is acknowledged, and the relay records H. Exact, and one tiny query per
// interval instead of an UPDATE per event.
//
//   RelayStateStore state("outbox");                        // outbox_relay_state
//   OUTBOXD_ASSIGN_OR_RETURN(XidHorizon h, state.TakeHorizon(conn));
//   ... once the acknowledged watermark >= h.lsn:
//   OUTBOXD_RETURN_IF_ERROR(state.RecordAcked(conn, "outboxd", h));
//   OUTBOXD_ASSIGN_OR_RETURN(std::string acked, state.AckedCondition(conn, "o", "publicado_em"));
#ifndef OUTBOXD_OUTBOX_RELAY_STATE_H_
#define OUTBOXD_OUTBOX_RELAY_STATE_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pg/connection.h"
#include "pg/table_name.h"
#include "pg/lsn.h"

namespace outboxd::outbox {

// "Every transaction older than `xid` (a full 64-bit xid8, as text) ended before
// WAL position `lsn`."
struct XidHorizon {
  std::string xid;
  pg::Lsn lsn = 0;
};

// One slot's row, for status.
struct SlotPosition {
  std::string slot;
  std::string acked_lsn;     // "X/Y", empty before the first record
  double acked_age_s = 0;    // seconds since the relay last recorded a position
  bool backfill = false;     // run publishes the pending rows before streaming
};

// A request, left by `outboxd setup`, to publish outbox rows before streaming: the
// rows a polling relay left pending (migration), or, after --recreate-slot, the rows
// written after the last acknowledged position.
struct BackfillRequest {
  std::optional<std::string> after_xid;  // xid8 text; nullopt: every pending row
};

class RelayStateStore {
 public:
  // `outbox_table` as given to --table; the state lives beside it.
  explicit RelayStateStore(const std::string& outbox_table);

  // CREATE TABLE IF NOT EXISTS ... (for outboxd setup).
  std::string CreateSql(pg::Connection& conn) const;
  const std::string& table() const { return name_.name; }

  absl::StatusOr<XidHorizon> TakeHorizon(pg::Connection& conn) const;
  // The horizon the slot itself proves, nullopt before it has one: its catalog_xmin
  // (as an xid8) and confirmed_flush_lsn. PostgreSQL sets catalog_xmin to the oldest
  // transaction running at a running-transactions record (written every 15 s while
  // the server is busy, and at each checkpoint) once the client has confirmed past
  // that record. So every transaction older than it ended before confirmed_flush_lsn,
  // which the relay confirms only once acknowledged. Unlike TakeHorizon's, this one
  // is taken where the relay reads, not at the head of the WAL: it moves while the
  // relay catches up far behind the head.
  absl::StatusOr<std::optional<XidHorizon>> SlotHorizon(pg::Connection& conn,
                                                        const std::string& slot) const;
  // Stores `horizon` as `slot`'s acknowledged position (never moving it back, nor
  // its LSN). Returns the xid of the transaction that stored it (nullopt: nothing
  // stored, a newer position was there already).
  absl::StatusOr<std::optional<uint64_t>> RecordAcked(pg::Connection& conn, const std::string& slot,
                                                      const XidHorizon& horizon) const;
  absl::StatusOr<std::vector<SlotPosition>> Positions(pg::Connection& conn) const;
  // Whether a relay ever recorded an acknowledged position for `slot`: the slot
  // existed, so its absence now is a failover's (or a drop's), not a fresh install's.
  // False when the table does not exist.
  absl::StatusOr<bool> HasRecordedPosition(pg::Connection& conn, const std::string& slot) const;
  // How many outbox rows (table `outbox_table`) `request` covers: the size of a
  // backfill, for its warning. `published_at_column` counts only if the table has it.
  absl::StatusOr<int64_t> CountBackfill(pg::Connection& conn, const std::string& outbox_table,
                                        const std::string& published_at_column,
                                        const BackfillRequest& request) const;

  // Asks `outboxd run` to create `slot` itself and backfill first. With
  // `after_acked`, only rows written after the slot's last acknowledged position.
  absl::Status RequestBackfill(pg::Connection& conn, const std::string& slot,
                               bool after_acked) const;
  // nullopt when none is pending (or the table does not exist).
  absl::StatusOr<std::optional<BackfillRequest>> PendingBackfill(pg::Connection& conn,
                                                                 const std::string& slot) const;
  absl::Status FinishBackfill(pg::Connection& conn, const std::string& slot) const;
  // A SQL condition, true for the outbox rows (alias) `request` covers: not marked
  // published (if the table has `published_at_column`) and not written by a
  // transaction older than its horizon.
  absl::StatusOr<std::string> BackfillCondition(pg::Connection& conn, const std::string& alias,
                                                const std::string& published_at_column,
                                                const BackfillRequest& request) const;

  // A SQL condition, true when the outbox row `alias` is known to be acknowledged:
  // marked by the polling relay (`published_at_column`, empty if the table has none)
  // or written by a transaction older than every slot's recorded horizon. NULL (not
  // true) when unknown: test it with `IS TRUE` / `IS NOT TRUE`.
  absl::StatusOr<std::string> AckedCondition(pg::Connection& conn, const std::string& alias,
                                             const std::string& published_at_column) const;

 private:
  std::string Quoted(pg::Connection&) const { return name_.quoted; }
  pg::TableName name_;
};

}  // namespace outboxd::outbox

#endif  // OUTBOXD_OUTBOX_RELAY_STATE_H_
