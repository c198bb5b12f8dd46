// The user's query is wrapped as a subquery `(expect) AS expected(aggregate_id)`, so
// only its first column matters and it must be a single statement (the extended
// protocol refuses more). $1 is the window start, $2 the event type; a read-only
// transaction keeps an --expect with side effects from having any.
#include "ops/reconcile.h"

#include <libpq-fe.h>

#include <cctype>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/annotate.h"
#include "base/status_macros.h"
#include "outbox/names.h"
#include "pg/table_name.h"

namespace outboxd::ops {
namespace {

// A trailing ";" (as people type SQL) would be a syntax error inside the subquery.
std::string Trimmed(std::string sql) {
  while (!sql.empty() &&
         (sql.back() == ';' || std::isspace(static_cast<unsigned char>(sql.back())))) {
    sql.pop_back();
  }
  return sql;
}

std::string ExpectedCte(const ReconcileOptions& options) {
  return absl::StrCat(
      "WITH expected AS (SELECT DISTINCT e.aggregate_id::text AS aggregate_id FROM (",
      Trimmed(options.expect_sql), "\n) AS e(aggregate_id) WHERE $1::timestamptz IS NOT NULL) ");
}

absl::StatusOr<std::string> MissingSql(pg::Connection& conn, const ReconcileOptions& options) {
  const outbox::ColumnMapping& c = options.columns;
  OUTBOXD_ASSIGN_OR_RETURN(const pg::TableName table, pg::TableName::Parse(options.table));
  OUTBOXD_ASSIGN_OR_RETURN(std::string aggregate_id, conn.QuoteIdentifier(c.aggregate_id));
  OUTBOXD_ASSIGN_OR_RETURN(std::string type, conn.QuoteIdentifier(c.type));
  OUTBOXD_ASSIGN_OR_RETURN(std::string created_at, conn.QuoteIdentifier(c.created_at));
  return absl::StrCat(ExpectedCte(options),
                      "SELECT x.aggregate_id FROM expected x WHERE NOT EXISTS (SELECT 1 FROM ",
                      table.quoted, " o WHERE o.", aggregate_id, "::text = x.aggregate_id AND o.",
                      type, " = $2 AND o.", created_at,
                      " >= $1::timestamptz) ORDER BY x.aggregate_id");
}

// Keeps the SQLSTATE; says which part of the work failed. SQL the server does not
// support there (0A000, e.g. a data-modifying WITH inside the subquery) is bad input.
absl::Status Annotated(const absl::Status& status, std::string_view what) {
  const absl::StatusCode code = status.code() == absl::StatusCode::kUnimplemented
                                    ? absl::StatusCode::kInvalidArgument
                                    : status.code();
  return Annotate(status, absl::StrCat(std::string(what), ": "), "", code);
}

absl::Status CheckOptions(const ReconcileOptions& options) {
  if (Trimmed(options.expect_sql).empty() || options.type.empty() || options.table.empty()) {
    return absl::InvalidArgumentError("reconcile needs --expect SQL, --type and --table");
  }
  if (options.since < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("reconcile: --since must not be negative");
  }
  return outbox::CheckNames(options.table, options.columns);
}

absl::StatusOr<ReconcileReport> ReconcileInTransaction(pg::Connection& conn,
                                                       const ReconcileOptions& options) {
  ReconcileReport report;
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::Result start,
      conn.ExecParams("SELECT now() - make_interval(secs => $1::double precision)",
                      {absl::StrCat(absl::ToDoubleSeconds(options.since))}));
  report.window_start = start.Get(0, 0);
  absl::StatusOr<pg::Result> count = conn.ExecParams(
      ExpectedCte(options) + "SELECT count(*) FROM expected", {report.window_start});
  if (!count.ok()) return Annotated(count.status(), "--expect query failed");
  if (!absl::SimpleAtoi(std::string(count->Get(0, 0)), &report.expected)) {
    return absl::InternalError("reconcile: bad count");
  }
  OUTBOXD_ASSIGN_OR_RETURN(std::string missing_sql, MissingSql(conn, options));
  absl::StatusOr<pg::Result> missing =
      conn.ExecParams(missing_sql, {report.window_start, options.type});
  if (!missing.ok()) return Annotated(missing.status(), "cannot look up outbox events");
  for (int r = 0; r < missing->rows(); ++r) report.missing.emplace_back(missing->Get(r, 0));
  return report;
}

}  // namespace

absl::StatusOr<ReconcileReport> Reconcile(pg::Connection& conn, const ReconcileOptions& options) {
  OUTBOXD_RETURN_IF_ERROR(CheckOptions(options));
  OUTBOXD_RETURN_IF_ERROR(
      conn.Exec("BEGIN TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY").status());
  absl::StatusOr<ReconcileReport> report = ReconcileInTransaction(conn, options);
  // Read only: ending it either way changes nothing.
  if (PQtransactionStatus(conn.get()) != PQTRANS_IDLE) (void)conn.Exec("ROLLBACK");
  return report;
}

}  // namespace outboxd::ops
