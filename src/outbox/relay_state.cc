#include "outbox/relay_state.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace outboxd::outbox {

RelayStateStore::RelayStateStore(const std::string& outbox_table)
    : name_(pg::TableName::SiblingOf(outbox_table, "_relay_state")) {}

std::string RelayStateStore::CreateSql(pg::Connection& conn) const {
  return absl::StrCat("CREATE TABLE IF NOT EXISTS ", Quoted(conn), R"sql( (
  slot_name          text PRIMARY KEY,
  acked_xid          xid8,
  acked_lsn          pg_lsn,
  acked_at           timestamptz,
  backfill           boolean NOT NULL DEFAULT false,
  backfill_after_xid xid8
))sql");
}

absl::StatusOr<XidHorizon> RelayStateStore::TakeHorizon(pg::Connection& conn) const {
  // The target list is evaluated left to right: the insert position is read after
  // the snapshot, so it lies past the commit record of every transaction the
  // snapshot saw as ended. Insert, not write or flush: with synchronous_commit off
  // a commit record can be inserted and not yet written.
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::Result r,
      conn.Exec("SELECT pg_snapshot_xmin(pg_current_snapshot())::text, "
                "pg_current_wal_insert_lsn()::text"));
  XidHorizon horizon{.xid = std::string(r.Get(0, 0))};
  OUTBOXD_ASSIGN_OR_RETURN(horizon.lsn, pg::ParseLsn(r.Get(0, 1)));
  return horizon;
}

absl::StatusOr<std::optional<XidHorizon>> RelayStateStore::SlotHorizon(
    pg::Connection& conn, const std::string& slot) const {
  // catalog_xmin is a 32-bit xid: widened to the xid8 it stands for, which lies
  // within 2^31 below the next xid (wraparound protection keeps it there).
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::Result r,
      conn.ExecParams("SELECT (n.next - ((n.next % 4294967296) - "
                      "s.catalog_xmin::text::bigint + 4294967296) % 4294967296)::text, "
                      "s.confirmed_flush_lsn::text FROM pg_replication_slots s, "
                      "(SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS next) n "
                      "WHERE s.slot_name = $1 AND s.catalog_xmin IS NOT NULL "
                      "AND s.confirmed_flush_lsn IS NOT NULL",
                      {slot}));
  if (r.rows() == 0) return std::nullopt;
  XidHorizon horizon{.xid = std::string(r.Get(0, 0))};
  OUTBOXD_ASSIGN_OR_RETURN(horizon.lsn, pg::ParseLsn(r.Get(0, 1)));
  return horizon;
}

absl::StatusOr<std::optional<uint64_t>> RelayStateStore::RecordAcked(
    pg::Connection& conn, const std::string& slot, const XidHorizon& horizon) const {
  const std::string table = Quoted(conn);
  // Committed without waiting for the WAL flush (synchronous_commit off for this
  // transaction only, set inside the statement: one round trip): the relay's loop
  // runs this every position interval, and a flush (1.6 ms on average here with
  // fsync on, against 0.5 ms without) held whatever arrived on the stream meanwhile
  // (issue 17 point 2). Safe to lose in a crash: the horizon recorded before it is
  // older, so cleanup keeps more rows and a re-created slot sends more again, never
  // fewer; a later transaction that relied on this one (cleanup's DELETE) commits
  // after it in the WAL, so it cannot survive a crash this one did not.
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::Result r,
      conn.ExecParams(
          absl::StrCat("INSERT INTO ", table,
                       " AS s (slot_name, acked_xid, acked_lsn, acked_at)"
                       " SELECT $1, $2::xid8, $3::pg_lsn, now()"
                       " FROM (SELECT set_config('synchronous_commit', 'off', true)) AS async"
                       " ON CONFLICT (slot_name) DO UPDATE SET"
                       " acked_xid = EXCLUDED.acked_xid,"
                       " acked_lsn = greatest(s.acked_lsn, EXCLUDED.acked_lsn),"
                       " acked_at = EXCLUDED.acked_at"
                       " WHERE s.acked_xid IS NULL OR s.acked_xid <= EXCLUDED.acked_xid"
                       " RETURNING pg_current_xact_id()::text"),
          {slot, horizon.xid, pg::FormatLsn(horizon.lsn)}));
  uint64_t own = 0;
  if (r.rows() != 1 || !absl::SimpleAtoi(std::string(r.Get(0, 0)), &own)) return std::nullopt;
  return own;
}

absl::StatusOr<std::vector<SlotPosition>> RelayStateStore::Positions(pg::Connection& conn) const {
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::Result r,
      conn.Exec(absl::StrCat("SELECT slot_name, coalesce(acked_lsn::text, ''), "
                             "coalesce(extract(epoch FROM now() - acked_at), 0)::float8, backfill "
                             "FROM ",
                             Quoted(conn), " ORDER BY slot_name")));
  std::vector<SlotPosition> positions(r.rows());
  for (int i = 0; i < r.rows(); ++i) {
    positions[i].slot = r.Get(i, 0);
    positions[i].acked_lsn = r.Get(i, 1);
    (void)absl::SimpleAtod(std::string(r.Get(i, 2)), &positions[i].acked_age_s);
    positions[i].backfill = r.Get(i, 3) == "t";
  }
  return positions;
}

absl::StatusOr<bool> RelayStateStore::HasRecordedPosition(pg::Connection& conn,
                                                          const std::string& slot) const {
  absl::StatusOr<pg::Result> r =
      conn.ExecParams(absl::StrCat("SELECT 1 FROM ", Quoted(conn),
                                   " WHERE slot_name = $1 AND acked_xid IS NOT NULL"),
                      {slot});
  if (!r.ok() && r.status().code() == absl::StatusCode::kNotFound) return false;
  if (!r.ok()) return r.status();
  return r->rows() > 0;
}

absl::StatusOr<int64_t> RelayStateStore::CountBackfill(pg::Connection& conn,
                                                       const std::string& outbox_table,
                                                       const std::string& published_at_column,
                                                       const BackfillRequest& request) const {
  OUTBOXD_ASSIGN_OR_RETURN(pg::TableName table, pg::TableName::Parse(outbox_table));
  OUTBOXD_ASSIGN_OR_RETURN(bool polled, table.HasColumn(conn, published_at_column));
  OUTBOXD_ASSIGN_OR_RETURN(
      std::string condition,
      BackfillCondition(conn, "o", polled ? published_at_column : "", request));
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::Result r,
      conn.Exec(absl::StrCat("SELECT count(*) FROM ", table.quoted, " o WHERE ", condition)));
  int64_t count = 0;
  (void)absl::SimpleAtoi(std::string(r.Get(0, 0)), &count);
  return count;
}

absl::Status RelayStateStore::RequestBackfill(pg::Connection& conn, const std::string& slot,
                                              bool after_acked) const {
  return conn
      .ExecParams(absl::StrCat("INSERT INTO ", Quoted(conn),
                               " AS s (slot_name, backfill) VALUES ($1, true)"
                               " ON CONFLICT (slot_name) DO UPDATE SET backfill = true,"
                               " backfill_after_xid = ",
                               after_acked ? "s.acked_xid" : "NULL"),
                  {slot})
      .status();
}

absl::StatusOr<std::optional<BackfillRequest>> RelayStateStore::PendingBackfill(
    pg::Connection& conn, const std::string& slot) const {
  absl::StatusOr<pg::Result> r =
      conn.ExecParams(absl::StrCat("SELECT backfill_after_xid::text FROM ", Quoted(conn),
                                   " WHERE slot_name = $1 AND backfill"),
                      {slot});
  if (!r.ok() && r.status().code() == absl::StatusCode::kNotFound) return std::nullopt;
  if (!r.ok()) return r.status();
  if (r->rows() == 0) return std::nullopt;
  BackfillRequest request;
  if (!r->IsNull(0, 0)) request.after_xid = std::string(r->Get(0, 0));
  return request;
}

absl::Status RelayStateStore::FinishBackfill(pg::Connection& conn, const std::string& slot) const {
  return conn
      .ExecParams(absl::StrCat("UPDATE ", Quoted(conn),
                               " SET backfill = false, backfill_after_xid = NULL"
                               " WHERE slot_name = $1"),
                  {slot})
      .status();
}

namespace {

// age() of a stored xid8 horizon: how many transactions ago it was. NULL when it
// is 2^31 transactions old, past what 32-bit xids can compare.
std::string HorizonAge(const std::string& xid8_sql) {
  return absl::StrCat("(SELECT age(h.xid::xid) FROM (SELECT ", xid8_sql,
                      " AS xid) h WHERE h.xid::text::numeric > "
                      "pg_snapshot_xmax(pg_current_snapshot())::text::numeric - 2000000000)");
}

}  // namespace

absl::StatusOr<std::string> RelayStateStore::BackfillCondition(
    pg::Connection& conn, const std::string& alias, const std::string& published_at_column,
    const BackfillRequest& request) const {
  std::string condition = "true";
  if (!published_at_column.empty()) {
    OUTBOXD_ASSIGN_OR_RETURN(std::string column, conn.QuoteIdentifier(published_at_column));
    condition = absl::StrCat(alias, ".", column, " IS NULL");
  }
  if (request.after_xid) {
    // Not older than the horizon; a horizon too old to compare covers nothing.
    OUTBOXD_ASSIGN_OR_RETURN(std::string after_xid, conn.QuoteLiteral(*request.after_xid));
    absl::StrAppend(&condition, " AND (age(", alias, ".xmin) > ",
                    HorizonAge(absl::StrCat(after_xid, "::xid8")), ") IS NOT TRUE");
  }
  return condition;
}

absl::StatusOr<std::string> RelayStateStore::AckedCondition(
    pg::Connection& conn, const std::string& alias, const std::string& published_at_column) const {
  // age(xid) counts transactions back from the current one, so "older than the
  // horizon" is age(xmin) > age(horizon). The oldest slot's horizon counts (each slot
  // may publish to its own broker). A horizon 2^31 transactions old no longer
  // compares on 32-bit xids: then nothing counts as acknowledged by it. A frozen row
  // that old compares as young and is kept: safe, if pessimistic.
  std::string by_horizon =
      absl::StrCat("age(", alias, ".xmin) > ",
                   HorizonAge(absl::StrCat("(SELECT min(acked_xid) FROM ", Quoted(conn), ")")));
  if (published_at_column.empty()) return absl::StrCat("(", by_horizon, ")");
  OUTBOXD_ASSIGN_OR_RETURN(std::string column, conn.QuoteIdentifier(published_at_column));
  return absl::StrCat("(", alias, ".", column, " IS NOT NULL OR ", by_horizon, ")");
}

}  // namespace outboxd::outbox
