// The polling columns keep the default schema's names (poll/columns.h): only the five event
// columns have flags.
#include "ops/internal/outbox_table.h"

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "outbox/message_format.h"
#include "poll/columns.h"

namespace outboxd::ops::internal {
namespace {

struct Column {
  const std::string& name;
  std::string definition;  // for CREATE TABLE, or the ALTER TABLE a person may run
};

std::vector<Column> PollingColumns(const poll::PollColumns& p) {
  return {{p.seq, "bigint GENERATED ALWAYS AS IDENTITY"},
          {p.published_at, "timestamptz"},
          {p.attempts, "int NOT NULL DEFAULT 0"},
          {p.last_error, "text"},
          {p.next_attempt_at, "timestamptz NOT NULL DEFAULT now()"}};
}

absl::StatusOr<absl::flat_hash_set<std::string>> ColumnsOf(pg::Connection& conn,
                                                           const pg::TableName& table) {
  OUTBOXD_ASSIGN_OR_RETURN(pg::Result r,
                           conn.ExecParams("SELECT attname FROM pg_attribute WHERE attrelid = "
                                           "to_regclass($1) AND attnum > 0 AND NOT attisdropped",
                                           {table.quoted}));
  absl::flat_hash_set<std::string> names;
  for (int i = 0; i < r.rows(); ++i) names.insert(std::string(r.Get(i, 0)));
  return names;
}

absl::StatusOr<bool> LacksDefault(pg::Connection& conn, const pg::TableName& table,
                                  const std::string& column) {
  OUTBOXD_ASSIGN_OR_RETURN(pg::Result r,
                           conn.ExecParams("SELECT NOT atthasdef FROM pg_attribute WHERE attrelid "
                                           "= to_regclass($1) AND attname = $2",
                                           {table.quoted, column}));
  return r.rows() == 1 && r.Get(0, 0) == "t";
}

// The id, aggregate, type and payload columns every relay reads.
absl::Status CheckEventColumns(const absl::flat_hash_set<std::string>& present,
                               const pg::TableName& outbox, const outbox::ColumnMapping& c) {
  struct Needed {
    const std::string& name;
    const char* flag;
  };
  for (const Needed& n : {Needed{c.id, "--id-column"}, Needed{c.aggregate_id, "--aggregate-column"},
                          Needed{c.type, "--type-column"}, Needed{c.payload, "--payload-column"}}) {
    if (present.contains(n.name)) continue;
    return absl::FailedPreconditionError(absl::StrCat(
        "table ", outbox.Display(), " has no column \"", n.name, "\"; name the right column with ",
        n.flag, " (setup never alters an existing table)"));
  }
  return absl::OkStatus();
}

// Without every polling column the table serves `outboxd run` only: a note, or, when
// the set-up is for polling, the error with the first column to add.
absl::Status CheckPollingColumns(const absl::flat_hash_set<std::string>& present,
                                 const pg::TableName& outbox, const SetupOptions& options,
                                 OutboxTable& table) {
  const poll::PollColumns names;
  std::vector<std::string> missing;
  const Column* first = nullptr;
  const std::vector<Column> columns = PollingColumns(names);
  for (const Column& column : columns) {
    if (present.contains(column.name)) continue;
    if (first == nullptr) first = &column;
    missing.push_back(column.name);
  }
  if (missing.empty()) return absl::OkStatus();
  table.polling_columns = false;
  if (options.poll_only) {
    return absl::FailedPreconditionError(absl::StrCat(
        "table ", outbox.Display(), " lacks the polling relay's column \"", first->name,
        "\": ALTER TABLE ", outbox.Display(), " ADD COLUMN ", pg::SqlIdentifier(first->name), " ",
        first->definition, " (and ", absl::StrJoin(missing, ", "),
        " likewise; setup never alters an existing table)"));
  }
  table.notes.push_back(absl::StrCat("table ", outbox.Display(), " has no polling columns (",
                                     absl::StrJoin(missing, ", "),
                                     "): outboxd poll cannot serve it, outboxd run can; setup "
                                     "never alters an existing table"));
  return absl::OkStatus();
}

// Mapped columns that allow NULL: the relay dead-letters a row with a NULL in one (an
// aggregate's NULL keeps no order), so a note, or with --require-not-null the error.
absl::Status CheckNotNull(pg::Connection& conn, const pg::TableName& outbox,
                          const SetupOptions& options, OutboxTable& table) {
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::Result r, conn.ExecParams("SELECT attname FROM pg_attribute WHERE attrelid = "
                                    "to_regclass($1) AND attnum > 0 AND NOT attisdropped AND "
                                    "NOT attnotnull ORDER BY attnum",
                                    {outbox.quoted}));
  const outbox::ColumnMapping& c = options.columns;
  std::vector<std::string> nullable;
  for (int i = 0; i < r.rows(); ++i) {
    const std::string name(r.Get(i, 0));
    if (name == c.id || name == c.aggregate_id || name == c.type || name == c.payload ||
        (!c.created_at.empty() && name == c.created_at)) {
      nullable.push_back(name);
    }
  }
  if (nullable.empty()) return absl::OkStatus();
  std::string alter = absl::StrCat("ALTER TABLE ", outbox.Display());
  for (size_t i = 0; i < nullable.size(); ++i) {
    absl::StrAppend(&alter, i ? "," : "", " ALTER COLUMN ", pg::SqlIdentifier(nullable[i]),
                    " SET NOT NULL");
  }
  const std::string what =
      absl::StrCat("table ", outbox.Display(), " allows NULL in mapped column(s) ",
                   absl::StrJoin(nullable, ", "), ": outboxd run dead-letters such a row");
  if (options.require_not_null) {
    return absl::FailedPreconditionError(absl::StrCat(what, " (--require-not-null); fix: ", alter));
  }
  table.notes.push_back(absl::StrCat(what, "; to forbid them: ", alter));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<OutboxTable> InspectOutboxTable(pg::Connection& conn, const pg::TableName& outbox,
                                               const SetupOptions& options) {
  OutboxTable table;
  OUTBOXD_ASSIGN_OR_RETURN(table.exists, outbox.Exists(conn));
  if (!table.exists) return table;
  OUTBOXD_ASSIGN_OR_RETURN(absl::flat_hash_set<std::string> present, ColumnsOf(conn, outbox));
  OUTBOXD_RETURN_IF_ERROR(CheckEventColumns(present, outbox, options.columns));
  const std::string& created_at = options.columns.created_at;
  if (!created_at.empty() && !present.contains(created_at)) {
    table.notes.push_back(outbox::MissingCreatedAtNote(outbox.Display(), created_at));
  }
  const std::string& headers = options.columns.headers;
  table.add_headers_column = !headers.empty() && !present.contains(headers);
  if (!headers.empty() && present.contains(headers)) {
    OUTBOXD_ASSIGN_OR_RETURN(table.set_headers_default, LacksDefault(conn, outbox, headers));
  }
  OUTBOXD_RETURN_IF_ERROR(CheckNotNull(conn, outbox, options, table));
  OUTBOXD_RETURN_IF_ERROR(CheckPollingColumns(present, outbox, options, table));
  return table;
}

std::string HeadersColumnDefault() {
  // current_setting(.., true) is NULL in a session that never set it and '' once a
  // SET LOCAL of an earlier transaction ended: both mean "not set". A STABLE default,
  // so ADD COLUMN stores NULL for the existing rows without rewriting the table.
  constexpr char kSetting[] = "NULLIF(current_setting('outboxd.%s', true), '')";
  return absl::StrCat("NULLIF(jsonb_strip_nulls(jsonb_build_object('traceparent', ",
                      absl::StrFormat(kSetting, "traceparent"), ", 'tracestate', ",
                      absl::StrFormat(kSetting, "tracestate"), ")), '{}')");
}

std::string HeadersColumnDefinition(const std::string& name) {
  const std::string column = pg::SqlIdentifier(name);
  // Both checks in jsonpath: a CHECK may not hold a subquery over jsonb_each. The
  // constraints' names are what an INSERT's error shows: they say what to fix. Silent
  // (the last argument): a non-object fails the first check, not with a jsonpath error.
  return absl::StrCat(
      "jsonb DEFAULT ", HeadersColumnDefault(), "\n    CONSTRAINT ",
      pg::SqlIdentifier(name + "_must_be_object_of_strings"), " CHECK (", column,
      " IS NULL OR (jsonb_typeof(", column, ") = 'object' AND NOT jsonb_path_exists(", column,
      ", '$.* ? (@.type() != \"string\")')))\n    CONSTRAINT ",
      pg::SqlIdentifier(name + "_must_not_override_outboxd_headers"),
      " CHECK (NOT jsonb_path_exists(", column, ", '$.keyvalue() ? (@.key like_regex \"",
      outbox::OwnHeaderRegex(), "\" flag \"i\")', '{}', true))");
}

absl::StatusOr<std::string> CreateOutboxSql(pg::Connection& conn, const pg::TableName& outbox,
                                            const outbox::ColumnMapping& c, Layout layout) {
  const poll::PollColumns p;
  const std::vector<Column> polling = PollingColumns(p);
  const bool partitioned = layout == Layout::kPartitioned;
  std::vector<Column> columns = {
      {p.seq, partitioned ? "bigint GENERATED ALWAYS AS IDENTITY"
                          : "bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY"},
      {c.id, partitioned ? "uuid NOT NULL DEFAULT gen_random_uuid()"
                         : "uuid NOT NULL DEFAULT gen_random_uuid() UNIQUE"},
      {c.aggregate_id, "text NOT NULL"},
      {c.type, "text NOT NULL"},
      {c.payload, "jsonb NOT NULL"}};
  if (!c.created_at.empty())
    columns.push_back({c.created_at, "timestamptz NOT NULL DEFAULT now()"});
  if (!c.headers.empty()) columns.push_back({c.headers, HeadersColumnDefinition(c.headers)});
  for (size_t i = 1; i < polling.size(); ++i) columns.push_back(polling[i]);  // seq is first
  std::string sql = absl::StrCat("CREATE TABLE ", outbox.quoted, " (");
  for (size_t i = 0; i < columns.size(); ++i) {
    OUTBOXD_ASSIGN_OR_RETURN(std::string name, conn.QuoteIdentifier(columns[i].name));
    absl::StrAppend(&sql, i ? ",\n  " : "\n  ", name, " ", columns[i].definition);
  }
  if (!partitioned) return sql + "\n)";
  OUTBOXD_ASSIGN_OR_RETURN(std::string seq, conn.QuoteIdentifier(p.seq));
  OUTBOXD_ASSIGN_OR_RETURN(std::string id, conn.QuoteIdentifier(c.id));
  OUTBOXD_ASSIGN_OR_RETURN(std::string created_at, conn.QuoteIdentifier(c.created_at));
  return absl::StrCat(sql, ",\n  PRIMARY KEY (", seq, ", ", created_at, "),\n  UNIQUE (", id, ", ",
                      created_at, ")\n) PARTITION BY RANGE (", created_at, ")");
}

}  // namespace outboxd::ops::internal
