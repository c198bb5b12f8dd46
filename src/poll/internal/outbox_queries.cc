#include "poll/internal/outbox_queries.h"

#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace outboxd::poll::internal {

absl::StatusOr<OutboxQueries> BuildQueries(pg::Connection& conn, const TableName& table,
                                           const outbox::ColumnMapping& columns,
                                           const PollColumns& poll_columns) {
  // The first quoting error wins and the queries built meanwhile are dropped.
  absl::Status error;
  auto q = [&conn, &error](const std::string& name) {
    absl::StatusOr<std::string> quoted = conn.QuoteIdentifier(name);
    if (quoted.ok()) return *std::move(quoted);
    if (error.ok()) error = quoted.status();
    return std::string();
  };
  const std::string seq = q(poll_columns.seq);
  const std::string aggregate = q(columns.aggregate_id);
  const std::string published = q(poll_columns.published_at);
  const std::string attempts = q(poll_columns.attempts);
  OutboxQueries queries;
  // The seed article's SQL_RESERVAR. NOT EXISTS keeps per-aggregate order with any
  // number of relays: an aggregate's next event is only eligible once every earlier
  // one is marked published (a failed one in backoff holds its own aggregate back,
  // nobody else's). seq order is commit order within an aggregate as long as writers
  // of one aggregate serialise on it (the seed's writer updates the aggregate's row
  // before inserting the event). Text casts: values reach Kafka as PostgreSQL renders
  // them. kInterrupted tells a row an interrupted batch held; kHeaders is NULL without
  // --headers-column.
  const std::string headers =
      columns.headers.empty() ? "NULL" : absl::StrCat("o.", q(columns.headers), "::text");
  queries.reserve = absl::StrCat(
      "SELECT o.", seq, "::text, o.", q(columns.id), "::text, o.", aggregate, "::text, o.",
      q(columns.type), "::text, o.", q(columns.payload), "::text, o.", q(columns.created_at),
      "::text, CASE WHEN o.xmax = '0'::xid OR o.xmax = o.xmin THEN NULL ELSE coalesce((extract("
      "epoch FROM o.",
      q(columns.created_at), ") * 1000)::bigint, 0) END, ", headers, " FROM ", table.quoted,
      " o WHERE o.", published, " IS NULL AND o.", q(poll_columns.next_attempt_at),
      " <= now() AND NOT EXISTS (SELECT 1 FROM ", table.quoted, " anterior WHERE anterior.",
      aggregate, " = o.", aggregate, " AND anterior.", published, " IS NULL AND anterior.", seq,
      " < o.", seq, ") ORDER BY o.", seq, " LIMIT $1 FOR UPDATE OF o SKIP LOCKED");
  // clock_timestamp(), not now(): now() is the batch's start, up to publish_timeout
  // before the outcome, and a backoff counted from it would already have elapsed.
  queries.mark_published = absl::StrCat("UPDATE ", table.quoted, " SET ", published,
                                        " = clock_timestamp() WHERE ", seq, " = ANY($1::bigint[])");
  // 2^tentativas seconds (the value before this attempt: 1 s, 2 s, 4 s ...) capped at
  // 300; the exponent is clamped first so a large count cannot overflow the shift.
  queries.mark_failed = absl::StrCat(
      "UPDATE ", table.quoted, " SET ", attempts, " = ", attempts, " + 1, ",
      q(poll_columns.last_error), " = left($2, 500), ", q(poll_columns.next_attempt_at),
      " = clock_timestamp() + make_interval(secs => least(1 << least(greatest(", attempts,
      ", 0), 9), 300)) WHERE ", seq, " = $1");
  if (!error.ok()) return error;
  return queries;
}

namespace {

struct NeededColumn {
  const std::string& name;
  std::string fix;
};


// The five event columns are renamed by flags; the polling columns must exist as in
// the default schema (src/ops/setup.cc), so their fix is the column to add.
std::vector<NeededColumn> NeededColumns(const TableName& table,
                                        const outbox::ColumnMapping& columns,
                                        const PollColumns& poll_columns) {
  auto add = [&table](const std::string& name, const char* definition) {
    return absl::StrCat("the polling relay needs it: ALTER TABLE ", table.Display(),
                        " ADD COLUMN ", pg::SqlIdentifier(name), " ", definition);
  };
  return {
      {columns.id, "name the event id column with --id-column"},
      {columns.aggregate_id, "name the aggregate id column with --aggregate-column"},
      {columns.type, "name the event type column with --type-column"},
      {columns.payload, "name the payload column with --payload-column"},
      {columns.created_at, "name the creation time column with --created-at-column"},
      {columns.headers, "add it with outboxd setup --headers-column, or fix --headers-column"},
      {poll_columns.seq, add(poll_columns.seq, "bigint GENERATED ALWAYS AS IDENTITY")},
      {poll_columns.published_at, add(poll_columns.published_at, "timestamptz")},
      {poll_columns.attempts, add(poll_columns.attempts, "int NOT NULL DEFAULT 0")},
      {poll_columns.last_error, add(poll_columns.last_error, "text")},
      {poll_columns.next_attempt_at,
       add(poll_columns.next_attempt_at, "timestamptz NOT NULL DEFAULT now()")},
  };
}

}  // namespace

absl::Status CheckTable(pg::Connection& conn, const TableName& table,
                        const outbox::ColumnMapping& columns, const PollColumns& poll_columns) {
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::Result result,
      conn.ExecParams("SELECT attname FROM pg_attribute WHERE attrelid = to_regclass($1) "
                      "AND attnum > 0 AND NOT attisdropped",
                      {table.quoted}));
  if (result.rows() == 0) {
    return absl::NotFoundError(absl::StrCat("outbox table ", table.Display(),
                                            " does not exist: run outboxd setup or fix --table"));
  }
  absl::flat_hash_set<std::string> present;
  for (int r = 0; r < result.rows(); ++r) present.insert(std::string(result.Get(r, 0)));
  for (const NeededColumn& column : NeededColumns(table, columns, poll_columns)) {
    if (column.name.empty() || present.contains(column.name)) continue;  // no --headers-column
    return absl::NotFoundError(absl::StrCat("outbox table ", table.Display(), " has no column ",
                                            pg::SqlIdentifier(column.name), ": ", column.fix));
  }
  return absl::OkStatus();
}

}  // namespace outboxd::poll::internal
