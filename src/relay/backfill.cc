#include "relay/backfill.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "pg/table_name.h"

namespace outboxd::relay {

absl::StatusOr<BackfillReader> BackfillReader::Open(const std::string& conninfo,
                                                    const BackfillSource& source,
                                                    const outbox::BackfillRequest& request,
                                                    const std::string& snapshot) {
  OUTBOXD_ASSIGN_OR_RETURN(pg::Connection conn, pg::Connection::Open(conninfo));
  const pg::TableName table = pg::TableName::Split(conn, source.table);
  OUTBOXD_ASSIGN_OR_RETURN(bool polled, table.HasColumn(conn, source.published_at_column));
  OUTBOXD_ASSIGN_OR_RETURN(bool has_seq, table.HasColumn(conn, source.seq_column));
  const outbox::RelayStateStore state(source.table);
  auto q = [&conn](const std::string& name) { return conn.QuoteIdentifier(name); };
  const outbox::ColumnMapping& c = source.columns;
  // A table without a created-at column (a Debezium outbox table) gives no
  // created_at (the header is left out) and is read in transaction order instead:
  // older xmin first, then the order the rows were written within a transaction.
  const std::string created_at =
      c.created_at.empty() ? std::string("NULL") : absl::StrCat("o.", q(c.created_at));
  const std::string order = has_seq                ? absl::StrCat("o.", q(source.seq_column))
                            : c.created_at.empty() ? std::string("age(o.xmin) DESC, o.ctid")
                                                   : created_at;
  OUTBOXD_RETURN_IF_ERROR(
      conn.Exec(absl::StrCat("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; "
                             "SET TRANSACTION SNAPSHOT ",
                             conn.QuoteLiteral(snapshot),
                             "; SET LOCAL TimeZone = 'UTC'; SET LOCAL DateStyle = 'ISO'"))
          .status());
  OUTBOXD_RETURN_IF_ERROR(
      conn
          .Exec(absl::StrCat(
              "DECLARE backfill NO SCROLL CURSOR FOR SELECT o.", q(c.id), "::text, o.",
              q(c.aggregate_id), "::text, o.", q(c.type), "::text, o.", q(c.payload), "::text, ",
              created_at, "::text FROM ", table.quoted, " o WHERE ",
              state.BackfillCondition(conn, "o", polled ? source.published_at_column : "", request),
              " ORDER BY ", order))
          .status());
  return BackfillReader(std::move(conn));
}

absl::StatusOr<pg::Result> BackfillReader::Next(int rows) {
  return conn_.Exec(absl::StrCat("FETCH ", rows, " FROM backfill"));
}

absl::Status BackfillReader::Close() { return conn_.Exec("COMMIT").status(); }

}  // namespace outboxd::relay
