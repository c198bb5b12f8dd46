#include "relay/backfill.h"

#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "pg/table_name.h"

namespace outboxd::relay {

absl::StatusOr<BackfillReader> BackfillReader::Open(const std::string& conninfo,
                                                    const BackfillSource& source,
                                                    const outbox::BackfillRequest& request,
                                                    const std::string& snapshot) {
  OUTBOXD_ASSIGN_OR_RETURN(pg::Connection conn, pg::Connection::Open(conninfo));
  OUTBOXD_ASSIGN_OR_RETURN(const pg::TableName table, pg::TableName::Parse(source.table));
  OUTBOXD_ASSIGN_OR_RETURN(bool polled, table.HasColumn(conn, source.published_at_column));
  OUTBOXD_ASSIGN_OR_RETURN(bool has_seq, table.HasColumn(conn, source.seq_column));
  const outbox::RelayStateStore state(source.table);
  const outbox::ColumnMapping& c = source.columns;
  // Each column once, quoted; the names were checked at start-up (outbox/names.h).
  // A table without a created-at column (a Debezium outbox table) gives no
  // created_at (the header is left out) and is read in transaction order instead:
  // older xmin first, then the order the rows were written within a transaction.
  std::vector<std::string> q;
  for (const std::string* name : {&c.id, &c.aggregate_id, &c.type, &c.payload}) {
    OUTBOXD_ASSIGN_OR_RETURN(std::string quoted, conn.QuoteIdentifier(*name));
    q.push_back(std::move(quoted));
  }
  std::string created_at = "NULL";
  if (!c.created_at.empty()) {
    OUTBOXD_ASSIGN_OR_RETURN(std::string quoted, conn.QuoteIdentifier(c.created_at));
    created_at = absl::StrCat("o.", quoted);
  }
  std::string order = c.created_at.empty() ? std::string("age(o.xmin) DESC, o.ctid") : created_at;
  if (has_seq) {
    OUTBOXD_ASSIGN_OR_RETURN(std::string seq, conn.QuoteIdentifier(source.seq_column));
    order = absl::StrCat("o.", seq);
  }
  OUTBOXD_ASSIGN_OR_RETURN(
      std::string condition,
      state.BackfillCondition(conn, "o", polled ? source.published_at_column : "", request));
  OUTBOXD_ASSIGN_OR_RETURN(std::string snapshot_literal, conn.QuoteLiteral(snapshot));
  OUTBOXD_RETURN_IF_ERROR(
      conn.Exec(absl::StrCat("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; "
                             "SET TRANSACTION SNAPSHOT ",
                             snapshot_literal,
                             "; SET LOCAL TimeZone = 'UTC'; SET LOCAL DateStyle = 'ISO'"))
          .status());
  // One more scan of the rows, for a total a person can watch against: a backfill
  // is rare, and its cursor reads them all anyway.
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::Result count,
      conn.Exec(absl::StrCat("SELECT count(*) FROM ", table.quoted, " o WHERE ", condition)));
  int64_t rows = 0;
  if (!absl::SimpleAtoi(std::string(count.Get(0, 0)), &rows))
    return absl::InternalError("count(*) unreadable");
  OUTBOXD_RETURN_IF_ERROR(
      conn.Exec(absl::StrCat("DECLARE backfill NO SCROLL CURSOR FOR SELECT o.", q[0], "::text, o.",
                             q[1], "::text, o.", q[2], "::text, o.", q[3], "::text, ", created_at,
                             "::text FROM ", table.quoted, " o WHERE ", condition, " ORDER BY ",
                             order))
          .status());
  return BackfillReader(std::move(conn), rows);
}

absl::StatusOr<pg::Result> BackfillReader::Next(int rows) {
  return conn_.Exec(absl::StrCat("FETCH ", rows, " FROM backfill"));
}

absl::Status BackfillReader::Close() { return conn_.Exec("COMMIT").status(); }

}  // namespace outboxd::relay
