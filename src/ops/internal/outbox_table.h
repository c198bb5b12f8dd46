// Setup's view of the outbox table itself: the CREATE TABLE for a new one, with the
// mapped column names (--id-column ...), and, for one that already exists, whether
// it can serve the relays. An existing table is never altered but for the
// --headers-column asked for (a nullable column: no rewrite): a column it lacks is
// either an error naming the flag that maps it, or a feature that goes without it,
// said once in the report's notes.
//
//   OUTBOXD_ASSIGN_OR_RETURN(OutboxTable table, InspectOutboxTable(conn, outbox, options));
//   if (!table.exists) conn.Exec(*CreateOutboxSql(conn, outbox, options.columns));
//   if (table.polling_columns) ... create the pending-rows index ...
#ifndef OUTBOXD_OPS_INTERNAL_OUTBOX_TABLE_H_
#define OUTBOXD_OPS_INTERNAL_OUTBOX_TABLE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ops/setup.h"
#include "outbox/event.h"
#include "pg/connection.h"
#include "pg/table_name.h"

namespace outboxd::ops::internal {

struct OutboxTable {
  bool exists = false;
  // seq, publicado_em, tentativas, ultimo_erro, proxima_tentativa_em: the polling
  // relay's columns (true for a table setup creates), which its index needs too.
  bool polling_columns = true;
  // An existing table without the --headers-column asked for: setup adds it.
  bool add_headers_column = false;
  // An existing --headers-column without a default: setup gives it HeadersColumnDefault
  // (a column with a default of its own keeps it).
  bool set_headers_default = false;
  // What an existing table lacks and which feature goes without it, one line each.
  std::vector<std::string> notes;
};

// FailedPrecondition when an existing table lacks the id, aggregate, type or payload
// column (naming the flag that maps it), or, with poll_only, a polling column (with
// the ALTER TABLE a person may run).
absl::StatusOr<OutboxTable> InspectOutboxTable(pg::Connection& conn, const pg::TableName& outbox,
                                               const SetupOptions& options);

// The default of a --headers-column: the transaction's trace context, from
// `SET LOCAL outboxd.traceparent = '00-...'` (and outboxd.tracestate), as
// {"traceparent": .., "tracestate": ..} without the unset ones; NULL when neither is set.
std::string HeadersColumnDefault();

// The type, default (HeadersColumnDefault) and checks of a --headers-column, for CREATE TABLE or
// ADD COLUMN: NULL or a JSON object of string values whose keys are none of outbox::OwnHeaderNames
// (case-insensitive). The two constraints are named <column>_must_be_object_of_strings
// and <column>_must_not_override_outboxd_headers.
std::string HeadersColumnDefinition(const std::string& name);

enum class Layout { kPlain, kPartitioned };

// The default outbox table with the mapped names for the event columns (an empty
// created-at or headers name leaves that column out). kPartitioned: by range of the
// created-at column, which joins the primary key (seq) and the id's unique
// constraint, as PostgreSQL requires of a partitioned table's unique indexes.
absl::StatusOr<std::string> CreateOutboxSql(pg::Connection& conn, const pg::TableName& outbox,
                                            const outbox::ColumnMapping& columns,
                                            Layout layout = Layout::kPlain);

}  // namespace outboxd::ops::internal

#endif  // OUTBOXD_OPS_INTERNAL_OUTBOX_TABLE_H_
