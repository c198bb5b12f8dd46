// The polling relay's SQL, built once from the table and column names (quoted by the
// server's rules), and the start-up check that the table has every column it needs.
#ifndef OUTBOXD_POLL_INTERNAL_OUTBOX_QUERIES_H_
#define OUTBOXD_POLL_INTERNAL_OUTBOX_QUERIES_H_

#include <string>

#include "absl/status/status.h"
#include "outbox/event.h"
#include "pg/connection.h"
#include "pg/table_name.h"
#include "poll/columns.h"

namespace outboxd::poll::internal {

using pg::TableName;

// Column order of the reserve query's result. kInterrupted is NULL, except for a row
// that a batch locked and never committed (a relay killed, its connection or its server
// lost), so its message may be at the broker already: that batch left its xid in the
// row version's xmax, which the row's reservation returns as it was before locking.
// A batch that committed updated every row it locked, and the new version's xmax is
// that batch's own lock, equal to its xmin. Anything else in xmax (an aborted DELETE, a
// foreign key's share lock) only costs a question to the broker. For such a row it
// holds the row's created-at in milliseconds since the epoch (0 when NULL): its message
// cannot have been made before.
enum ReservedColumn {
  kSeq = 0,
  kId,
  kAggregateId,
  kType,
  kPayload,
  kCreatedAt,
  kInterrupted,
  kHeaders,  // the --headers-column's jsonb text; NULL when the row has none or no flag
};

struct OutboxQueries {
  // $1 = batch size. Due pending rows, only the oldest pending one of each aggregate,
  // in seq order, locked (rows another relay holds are skipped).
  std::string reserve;
  // $1 = bigint[] literal of seqs ("{1,2,3}").
  std::string mark_published;
  // $1 = seq, $2 = error text.
  std::string mark_failed;
};

// InvalidArgument when a column name cannot be quoted (then nothing is built).
absl::StatusOr<OutboxQueries> BuildQueries(pg::Connection& conn, const TableName& table,
                                           const outbox::ColumnMapping& columns,
                                           const PollColumns& poll_columns);

// NotFound naming the table or the missing column and the fix (flag or schema), so a
// misconfiguration ends in one line instead of a failed SELECT in the loop.
absl::Status CheckTable(pg::Connection& conn, const TableName& table,
                        const outbox::ColumnMapping& columns, const PollColumns& poll_columns);

}  // namespace outboxd::poll::internal

#endif  // OUTBOXD_POLL_INTERNAL_OUTBOX_QUERIES_H_
