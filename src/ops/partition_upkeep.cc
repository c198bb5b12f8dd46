// Bounds are computed on the server in UTC (date_trunc ... AT TIME ZONE 'UTC'), so
// every outboxd, whatever its session's time zone, names and cuts the same periods.
#include "ops/partition_upkeep.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "ops/internal/detach_ledger.h"
#include "pg/identifier.h"
#include "pg/partitions.h"

namespace outboxd::ops {
namespace {

// SQLSTATEs a round meets when upkeep fell behind or a writer holds a lock.
constexpr char kLockNotAvailable[] = "55P03";
constexpr char kDefaultHoldsRows[] = "23514";  // new range's rows already in DEFAULT
constexpr char kOverlap[] = "42P17";           // a user's partition covers part of it
constexpr char kUndefinedTable[] = "42P01";    // another cleanup dropped it meanwhile

const char* TruncUnit(PartitionInterval interval) {
  switch (interval) {
    case PartitionInterval::kDay:
      return "day";
    case PartitionInterval::kWeek:
      return "week";
    case PartitionInterval::kMonth:
      return "month";
    case PartitionInterval::kNone:
      break;
  }
  return "";
}

// `sql` as its own transaction that waits at most `lock_timeout` for a lock, or,
// when `lock_timeout` is empty (setup), inside the caller's transaction under a
// savepoint, so that a period CreateRanges skips does not abort the rest. `sqlstate`:
// the failure's, read before the rollback clears it.
absl::Status ExecDdl(pg::Connection& conn, const std::string& sql, const std::string& lock_timeout,
                     std::string* sqlstate = nullptr) {
  const bool own = !lock_timeout.empty();
  absl::Status status;
  if (own) {
    OUTBOXD_ASSIGN_OR_RETURN(std::string timeout, conn.QuoteLiteral(lock_timeout));
    status = conn.Exec(absl::StrCat("BEGIN; SET LOCAL lock_timeout = ", timeout)).status();
  } else {
    status = conn.Exec("SAVEPOINT outboxd_partition").status();
  }
  if (status.ok()) status = conn.Exec(sql).status();
  if (status.ok())
    return conn.Exec(own ? "COMMIT" : "RELEASE SAVEPOINT outboxd_partition").status();
  if (sqlstate != nullptr) *sqlstate = conn.last_sqlstate();
  (void)conn.Exec(own ? "ROLLBACK" : "ROLLBACK TO SAVEPOINT outboxd_partition");
  return status;
}

// The newest range partition's width, when it is a day, a week or a month.
absl::StatusOr<PartitionInterval> InferInterval(pg::Connection& conn,
                                                const std::vector<pg::Partition>& leaves) {
  const pg::Partition* newest = nullptr;
  for (const pg::Partition& p : leaves) {
    if (!p.from || !p.to) continue;
    if (newest == nullptr || *p.to > *newest->to) newest = &p;  // same format: text order
  }
  if (newest == nullptr) return PartitionInterval::kNone;
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::Result r,
      conn.ExecParams(
          "SELECT CASE WHEN f = date_trunc('day', f) AND t = f + interval '1 day' THEN 'day' "
          "WHEN f = date_trunc('week', f) AND t = f + interval '7 days' THEN 'week' "
          "WHEN f = date_trunc('month', f) AND t = f + interval '1 month' THEN 'month' "
          "ELSE '' END FROM (SELECT $1::timestamptz AT TIME ZONE 'UTC' AS f, "
          "$2::timestamptz AT TIME ZONE 'UTC' AS t) b",
          {*newest->from, *newest->to}));
  return ParsePartitionInterval(r.Get(0, 0));
}

// The latest upper bound of the range partitions, "-infinity" when there is none.
absl::StatusOr<std::string> LastBound(pg::Connection& conn,
                                      const std::vector<pg::Partition>& leaves) {
  std::string last = "-infinity";
  for (const pg::Partition& p : leaves) {
    if (!p.to) continue;
    OUTBOXD_ASSIGN_OR_RETURN(
        pg::Result r,
        conn.ExecParams("SELECT greatest($1::timestamptz, $2::timestamptz)::text", {last, *p.to}));
    last = r.Get(0, 0);
  }
  return last;
}

absl::StatusOr<std::vector<std::string>> CreateRanges(pg::Connection& conn,
                                                      const pg::TableName& outbox,
                                                      PartitionInterval interval,
                                                      const std::string& after,
                                                      const CreateOptions& options) {
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::Result periods,
      conn.ExecParams(
          // One period is '1 day', '1 week' or '1 month': the unit date_trunc cuts by.
          "SELECT to_char(s, 'YYYYMMDD'), (s AT TIME ZONE 'UTC')::text, "
          "((s + ('1 ' || $1)::interval) AT TIME ZONE 'UTC')::text FROM (SELECT date_trunc($1, "
          "now() AT TIME ZONE 'UTC') + k * ('1 ' || $1)::interval AS s FROM "
          "generate_series(0, $2::int) k) p WHERE s AT TIME ZONE 'UTC' >= $3::timestamptz "
          "ORDER BY s",
          {TruncUnit(interval), absl::StrCat(options.ahead), after}));
  std::vector<std::string> created;
  for (int i = 0; i < periods.rows(); ++i) {
    const pg::TableName name =
        outbox.Sibling(absl::StrCat(outbox.name, "_p", std::string(periods.Get(i, 0))));
    OUTBOXD_ASSIGN_OR_RETURN(std::string from, conn.QuoteLiteral(std::string(periods.Get(i, 1))));
    OUTBOXD_ASSIGN_OR_RETURN(std::string to, conn.QuoteLiteral(std::string(periods.Get(i, 2))));
    std::string state;
    absl::Status made =
        ExecDdl(conn,
                absl::StrCat("CREATE TABLE ", name.quoted, " PARTITION OF ", outbox.quoted,
                             " FOR VALUES FROM (", from, ") TO (", to, ")"),
                options.lock_timeout, &state);
    if (!made.ok() &&
        (state == kDefaultHoldsRows || state == kOverlap || state == kLockNotAvailable)) {
      continue;  // this period stays in DEFAULT (or a user's partition); the next round retries
    }
    OUTBOXD_RETURN_IF_ERROR(made);
    created.push_back(name.name);
  }
  return created;
}

// The comment an older outboxd put on a partition before detaching it. It proves
// nothing (any role can put it on a table of its own): a pending detach of the parent
// that carries it is adopted into the ledger, since the catalog still shows whose
// partition it is; a detached table that carries it is only reported.
std::string LegacyDropMarker(const pg::TableName& parent) {
  return absl::StrCat("outboxd: detached from ", parent.Display(), " to be dropped");
}

absl::StatusOr<bool> AllAcknowledged(pg::Connection& conn, const pg::TableName& table,
                                     const std::string& acked_sql) {
  OUTBOXD_ASSIGN_OR_RETURN(pg::Result r,
                           conn.Exec(absl::StrCat("SELECT NOT EXISTS (SELECT 1 FROM ", table.quoted,
                                                  " o WHERE (", acked_sql, ") IS NOT TRUE)")));
  return r.Get(0, 0) == "t";
}

// Whether leaf `leaf` of `parent` is a plain table of a trusted owner: the only
// partitions upkeep reads or drops. Only the parent's owner can attach one, but it
// can give one away afterwards.
absl::StatusOr<bool> IsOwnLeaf(pg::Connection& conn, const pg::TableName& parent,
                               const pg::TableName& leaf) {
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::Result r,
      conn.ExecParams(
          absl::StrCat("SELECT c.relkind = 'r' AND ", internal::TrustedOwnerSql("c", "p"),
                       " FROM pg_catalog.pg_class c, pg_catalog.pg_class p WHERE c.oid = "
                       "to_regclass($1) AND p.oid = to_regclass($2)"),
          {leaf.quoted, parent.quoted}));
  if (r.rows() == 0) {
    return pg::WithSqlState(absl::NotFoundError(absl::StrCat(leaf.Display(), " no longer exists")),
                            kUndefinedTable);
  }
  return r.Get(0, 0) == "t";
}

enum class DropOutcome {
  kDropped,
  kUnacknowledged,
  kBusy,    // a writer's lock outlasted lock_timeout
  kNotOwn,  // not a plain table of the parent's owner (or a superuser): upkeep never reads it
  kGone,    // dropped by another cleanup (the relay's job, a second `outboxd cleanup`) meanwhile
};

// With a DEFAULT partition: detach, check, drop, one transaction.
absl::StatusOr<DropOutcome> DropInOneTransaction(pg::Connection& conn, const pg::TableName& outbox,
                                                 const pg::TableName& leaf,
                                                 const std::string& acked_sql) {
  absl::Status status = conn.Exec("BEGIN; SET LOCAL lock_timeout = '2s'").status();
  if (status.ok()) {
    status =
        conn.Exec(absl::StrCat("ALTER TABLE ", outbox.quoted, " DETACH PARTITION ", leaf.quoted))
            .status();
  }
  const bool busy = !status.ok() && conn.last_sqlstate() == kLockNotAvailable;
  absl::StatusOr<bool> acked = status.ok() ? AllAcknowledged(conn, leaf, acked_sql) : status;
  if (acked.ok() && *acked) {
    status = conn.Exec(absl::StrCat("DROP TABLE ", leaf.quoted, "; COMMIT")).status();
    if (status.ok()) return DropOutcome::kDropped;
  }
  (void)conn.Exec("ROLLBACK");
  if (busy) return DropOutcome::kBusy;
  if (!acked.ok()) return acked.status();
  if (!status.ok()) return status;
  return DropOutcome::kUnacknowledged;
}

// Drops a detached partition the ledger recorded (`oid`) if every row in it is
// acknowledged: the check, the DROP and the record's removal in one transaction.
absl::StatusOr<DropOutcome> DropRecorded(pg::Connection& conn, const internal::DetachLedger& ledger,
                                         const std::string& oid, const pg::TableName& table,
                                         const std::string& acked_sql) {
  OUTBOXD_RETURN_IF_ERROR(conn.Exec("BEGIN").status());
  absl::StatusOr<bool> acked = AllAcknowledged(conn, table, acked_sql);
  absl::Status status = acked.status();
  if (acked.ok() && *acked) {
    status = conn.Exec(absl::StrCat("DROP TABLE ", table.quoted)).status();
    if (status.ok()) status = ledger.Forget(conn, oid);
    if (status.ok()) status = conn.Exec("COMMIT").status();
    if (status.ok()) return DropOutcome::kDropped;
  }
  (void)conn.Exec("ROLLBACK");
  OUTBOXD_RETURN_IF_ERROR(status);
  return DropOutcome::kUnacknowledged;
}

// Without a DEFAULT partition: recorded in the ledger, detached concurrently, then
// dropped. A round killed after the record is finished by the next.
absl::StatusOr<DropOutcome> DropConcurrently(pg::Connection& conn,
                                             const internal::DetachLedger& ledger,
                                             const pg::TableName& outbox, const pg::TableName& leaf,
                                             const std::string& acked_sql) {
  OUTBOXD_RETURN_IF_ERROR(ledger.Ensure(conn, outbox));
  OUTBOXD_ASSIGN_OR_RETURN(std::string oid, ledger.Record(conn, outbox, leaf));
  OUTBOXD_RETURN_IF_ERROR(
      conn.Exec(absl::StrCat("ALTER TABLE ", outbox.quoted, " DETACH PARTITION ", leaf.quoted,
                             " CONCURRENTLY"))
          .status());
  return DropRecorded(conn, ledger, oid, leaf, acked_sql);
}

// A detach an older outboxd began (it marked the partition first) and a kill left
// pending: still a partition of `parent` in the catalog, so recorded as if this
// version had begun it, and its comment removed.
absl::Status AdoptLegacyPending(pg::Connection& conn, const internal::DetachLedger& ledger,
                                const pg::TableName& parent) {
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::Result pending,
      conn.ExecParams(
          absl::StrCat("SELECT format('%I.%I', n.nspname, c.relname) FROM pg_catalog.pg_inherits "
                       "i JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid JOIN "
                       "pg_catalog.pg_class p ON p.oid = i.inhparent JOIN pg_catalog.pg_namespace "
                       "n ON n.oid = c.relnamespace WHERE p.oid = to_regclass($1) AND "
                       "i.inhdetachpending AND pg_catalog.obj_description(c.oid, 'pg_class') = $2 "
                       "AND ",
                       internal::TrustedOwnerSql("c", "p")),
          {parent.quoted, LegacyDropMarker(parent)}));
  for (int i = 0; i < pending.rows(); ++i) {
    OUTBOXD_ASSIGN_OR_RETURN(const pg::TableName leaf, pg::TableName::Parse(pending.Get(i, 0)));
    OUTBOXD_RETURN_IF_ERROR(ledger.Ensure(conn, parent));
    OUTBOXD_RETURN_IF_ERROR(ledger.Record(conn, parent, leaf).status());
    OUTBOXD_RETURN_IF_ERROR(
        conn.Exec(absl::StrCat("COMMENT ON TABLE ", leaf.quoted, " IS NULL")).status());
  }
  return absl::OkStatus();
}

// A table an older outboxd detached and a kill left undropped: nothing proves now
// whose partition it was, so it is reported with the statement to drop it by hand
// (only one of the parent's owner: a table another role marked is not even named).
absl::Status ReportLegacyDetached(pg::Connection& conn, const pg::TableName& parent,
                                  DropReport& report) {
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::Result detached,
      conn.ExecParams(
          absl::StrCat("SELECT format('%I.%I', n.nspname, c.relname) FROM pg_catalog.pg_class c "
                       "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace, "
                       "pg_catalog.pg_class p WHERE p.oid = to_regclass($1) AND c.relkind = 'r' "
                       "AND NOT c.relispartition AND pg_catalog.obj_description(c.oid, "
                       "'pg_class') = $2 AND ",
                       internal::TrustedOwnerSql("c", "p"), " ORDER BY 1"),
          {parent.quoted, LegacyDropMarker(parent)}));
  for (int i = 0; i < detached.rows(); ++i) {
    const std::string name(detached.Get(i, 0));
    report.kept.push_back(absl::StrCat(
        name,
        " was detached by an older outboxd and is no longer dropped automatically (its "
        "comment is no proof); once its rows are not needed: DROP TABLE ",
        name));
  }
  return absl::OkStatus();
}

// What a killed round left, as the ledger recorded it: a detach still pending
// (finished with FINALIZE), or a detached partition not dropped yet.
absl::Status FinishRecordedDrops(pg::Connection& conn, const internal::DetachLedger& ledger,
                                 const pg::TableName& parent, const std::string& acked_sql,
                                 DropReport& report) {
  using State = internal::LedgerEntry::State;
  OUTBOXD_ASSIGN_OR_RETURN(std::vector<internal::LedgerEntry> entries,
                           ledger.Entries(conn, parent));
  for (const internal::LedgerEntry& e : entries) {
    if (e.state == State::kPending) {
      OUTBOXD_RETURN_IF_ERROR(
          conn.Exec(absl::StrCat("ALTER TABLE ", parent.quoted, " DETACH PARTITION ", e.name.quoted,
                                 " FINALIZE"))
              .status());
    }
    if (e.state == State::kPending || e.state == State::kDetached) {
      OUTBOXD_ASSIGN_OR_RETURN(DropOutcome outcome,
                               DropRecorded(conn, ledger, e.oid, e.name, acked_sql));
      if (outcome == DropOutcome::kDropped) report.dropped.push_back(e.name.name);
      continue;
    }
    OUTBOXD_RETURN_IF_ERROR(ledger.Forget(conn, e.oid));  // stale: nothing of ours to drop
    if (e.state == State::kChanged) {
      report.kept.push_back(absl::StrCat(e.name.Display(),
                                         " changed since outboxd detached it (owner, name or "
                                         "schema): not dropped"));
    }
  }
  return absl::OkStatus();
}

absl::Status FinishInterruptedDrops(pg::Connection& conn, const internal::DetachLedger& ledger,
                                    const pg::TableName& parent, const std::string& acked_sql,
                                    DropReport& report) {
  OUTBOXD_RETURN_IF_ERROR(AdoptLegacyPending(conn, ledger, parent));
  OUTBOXD_ASSIGN_OR_RETURN(bool recorded, ledger.Check(conn, parent));
  if (recorded)
    OUTBOXD_RETURN_IF_ERROR(FinishRecordedDrops(conn, ledger, parent, acked_sql, report));
  return ReportLegacyDetached(conn, parent, report);
}

// PostgreSQL refuses DETACH ... CONCURRENTLY while the table has a DEFAULT partition.
enum class DetachMode { kInOneTransaction, kConcurrently };

// One leaf whose range ended: dropped when it is the parent's own and every row in it
// is acknowledged.
absl::StatusOr<DropOutcome> TryDrop(pg::Connection& conn, const internal::DetachLedger& ledger,
                                    const pg::TableName& parent, const pg::TableName& leaf,
                                    const std::string& acked_sql, DetachMode mode) {
  OUTBOXD_ASSIGN_OR_RETURN(bool own, IsOwnLeaf(conn, parent, leaf));
  if (!own) return DropOutcome::kNotOwn;
  OUTBOXD_ASSIGN_OR_RETURN(bool acked, AllAcknowledged(conn, leaf, acked_sql));
  if (!acked) return DropOutcome::kUnacknowledged;
  return mode == DetachMode::kInOneTransaction
             ? DropInOneTransaction(conn, parent, leaf, acked_sql)
             : DropConcurrently(conn, ledger, parent, leaf, acked_sql);
}

// TryDrop, where a leaf listed and then dropped by another cleaner (the relay's
// cleanup job, a second `outboxd cleanup`) before this one got to it is done, not an
// upkeep failure.
absl::StatusOr<DropOutcome> DropIfAcknowledged(pg::Connection& conn,
                                               const internal::DetachLedger& ledger,
                                               const pg::TableName& parent,
                                               const pg::TableName& leaf,
                                               const std::string& acked_sql, DetachMode mode) {
  absl::StatusOr<DropOutcome> outcome = TryDrop(conn, ledger, parent, leaf, acked_sql, mode);
  if (!outcome.ok() && pg::SqlStateOf(outcome.status()) == kUndefinedTable) {
    return DropOutcome::kGone;
  }
  return outcome;
}

void Note(DropReport& report, const pg::TableName& parent, const pg::TableName& leaf,
          DropOutcome outcome) {
  switch (outcome) {
    case DropOutcome::kDropped:
      report.dropped.push_back(leaf.name);
      break;
    case DropOutcome::kUnacknowledged:
      report.kept.push_back(absl::StrCat(leaf.name, " holds unacknowledged rows"));
      break;
    case DropOutcome::kBusy:
      report.kept.push_back(
          absl::StrCat(leaf.name, " is locked by a transaction (lock_timeout 2s)"));
      break;
    case DropOutcome::kNotOwn:
      report.kept.push_back(absl::StrCat(leaf.name, " is not a plain table of the owner of ",
                                         parent.Display(), ": outboxd drops only those"));
      break;
    case DropOutcome::kGone:
      break;
  }
}

absl::StatusOr<bool> EndsBy(pg::Connection& conn, const std::string& to,
                            const std::string& cutoff) {
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::Result r, conn.ExecParams("SELECT $1::timestamptz <= $2::timestamptz", {to, cutoff}));
  return r.Get(0, 0) == "t";
}

}  // namespace

absl::StatusOr<PartitionInterval> ParsePartitionInterval(std::string_view text) {
  if (text.empty() || text == "none") return PartitionInterval::kNone;
  if (text == "day") return PartitionInterval::kDay;
  if (text == "week") return PartitionInterval::kWeek;
  if (text == "month") return PartitionInterval::kMonth;
  return absl::InvalidArgumentError(
      absl::StrCat("--partition-by ", std::string(text), " is not one of day, week, month"));
}

std::string_view PartitionIntervalName(PartitionInterval interval) {
  return interval == PartitionInterval::kNone ? "none" : TruncUnit(interval);
}

absl::StatusOr<std::vector<std::string>> CreatePartitionsAhead(pg::Connection& conn,
                                                               const pg::TableName& outbox,
                                                               PartitionInterval interval,
                                                               const CreateOptions& options) {
  OUTBOXD_ASSIGN_OR_RETURN(bool partitioned, pg::IsPartitioned(conn, outbox));
  if (!partitioned) return std::vector<std::string>{};
  OUTBOXD_ASSIGN_OR_RETURN(std::vector<pg::Partition> leaves, pg::Leaves(conn, outbox));
  if (interval == PartitionInterval::kNone) {
    OUTBOXD_ASSIGN_OR_RETURN(interval, InferInterval(conn, leaves));
  }
  std::vector<std::string> created;
  if (interval != PartitionInterval::kNone) {
    OUTBOXD_ASSIGN_OR_RETURN(std::string after, LastBound(conn, leaves));
    OUTBOXD_ASSIGN_OR_RETURN(created, CreateRanges(conn, outbox, interval, after, options));
  }
  bool has_default = false;
  for (const pg::Partition& p : leaves) has_default = has_default || p.is_default;
  if (options.with_default && !has_default) {
    const pg::TableName name = outbox.Sibling(outbox.name + "_default");
    OUTBOXD_RETURN_IF_ERROR(ExecDdl(
        conn,
        absl::StrCat("CREATE TABLE ", name.quoted, " PARTITION OF ", outbox.quoted, " DEFAULT"),
        options.lock_timeout));
    created.push_back(name.name);
  }
  return created;
}

absl::StatusOr<DropReport> DropAcknowledgedPartitions(pg::Connection& conn,
                                                      const pg::TableName& table,
                                                      const pg::TableName& outbox,
                                                      const std::string& acked_sql,
                                                      const std::string& cutoff) {
  DropReport report;
  OUTBOXD_ASSIGN_OR_RETURN(bool partitioned, pg::IsPartitioned(conn, table));
  if (!partitioned) return report;
  const internal::DetachLedger ledger(outbox);
  OUTBOXD_RETURN_IF_ERROR(FinishInterruptedDrops(conn, ledger, table, acked_sql, report));
  OUTBOXD_ASSIGN_OR_RETURN(std::vector<pg::Partition> leaves, pg::Leaves(conn, table));
  DetachMode mode = DetachMode::kConcurrently;
  for (const pg::Partition& p : leaves) {
    if (p.is_default) mode = DetachMode::kInOneTransaction;
  }
  for (const pg::Partition& p : leaves) {
    if (!p.to) continue;
    OUTBOXD_ASSIGN_OR_RETURN(bool old, EndsBy(conn, *p.to, cutoff));
    if (!old) continue;
    OUTBOXD_ASSIGN_OR_RETURN(DropOutcome outcome,
                             DropIfAcknowledged(conn, ledger, table, p.name, acked_sql, mode));
    Note(report, table, p.name, outcome);
  }
  return report;
}

}  // namespace outboxd::ops
