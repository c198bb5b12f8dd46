// Setup checks before it creates: wal_level first, then tables, index and
// publication in one transaction (so a failure leaves nothing half-made), then the
// slot, which cannot be created in a transaction that wrote. The publication must
// exist before the slot: pgoutput looks it up as of each decoded change.
#include "ops/setup.h"

#include <optional>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "outbox/dead_letter.h"
#include "pg/slot.h"
#include "relay/preflight.h"

namespace outboxd::ops {
namespace {

// A possibly schema-qualified table name, split and quoted.
struct TableName {
  std::string schema;  // "" for the search_path default
  std::string name;
  std::string quoted;  // "schema"."name" or "name"
};

TableName SplitTableName(pg::Connection& conn, const std::string& qualified) {
  TableName table;
  const size_t dot = qualified.rfind('.');
  table.name = dot == std::string::npos ? qualified : qualified.substr(dot + 1);
  table.schema = dot == std::string::npos ? "" : qualified.substr(0, dot);
  table.quoted = conn.QuoteIdentifier(table.name);
  if (!table.schema.empty()) {
    table.quoted = absl::StrCat(conn.QuoteIdentifier(table.schema), ".", table.quoted);
  }
  return table;
}

// The table's name for messages: schema.name, each part quoted only if needed.
std::string DisplayName(const TableName& table) {
  std::string name = pg::SqlIdentifier(table.name);
  return table.schema.empty() ? name : absl::StrCat(pg::SqlIdentifier(table.schema), ".", name);
}

// A sibling relation (index, inbox) in the same schema as `table`.
TableName Sibling(pg::Connection& conn, const TableName& table, const std::string& name) {
  return SplitTableName(conn, table.schema.empty() ? name : absl::StrCat(table.schema, ".", name));
}

// Keeps the code and the SQLSTATE payload, prefixes the message with context.
absl::Status Annotate(const absl::Status& status, const std::string& context) {
  absl::Status out(status.code(), absl::StrCat(context, ": ", status.message()));
  status.ForEachPayload(
      [&out](absl::string_view url, const absl::Cord& payload) { out.SetPayload(url, payload); });
  return out;
}

absl::StatusOr<bool> RelationExists(pg::Connection& conn, const TableName& relation) {
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::Result result, conn.ExecParams("SELECT to_regclass($1) IS NOT NULL", {relation.quoted}));
  return result.Get(0, 0) == "t";
}

// Runs `sql` if `relation` is missing and records it in `report` as `what`.
absl::Status CreateIfMissing(pg::Connection& conn, const TableName& relation,
                             const std::string& what, const std::string& sql, SetupReport& report) {
  OUTBOXD_ASSIGN_OR_RETURN(bool exists, RelationExists(conn, relation));
  if (exists) return absl::OkStatus();
  absl::StatusOr<pg::Result> created = conn.Exec(sql);
  if (!created.ok()) return Annotate(created.status(), absl::StrCat("cannot create ", what));
  report.created.push_back(what);
  return absl::OkStatus();
}

absl::Status EnsureTables(pg::Connection& conn, const SetupOptions& options, SetupReport& report) {
  const TableName outbox = SplitTableName(conn, options.table);
  const TableName index = Sibling(conn, outbox, outbox.name + "_pendentes");
  const TableName inbox = Sibling(conn, outbox, options.inbox_table);
  OUTBOXD_RETURN_IF_ERROR(CreateIfMissing(conn, outbox, "table " + options.table,
                                          absl::StrCat("CREATE TABLE ", outbox.quoted, R"sql( (
  seq                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  id                   uuid        NOT NULL DEFAULT gen_random_uuid() UNIQUE,
  aggregate_id         text        NOT NULL,
  tipo                 text        NOT NULL,
  payload              jsonb       NOT NULL,
  criado_em            timestamptz NOT NULL DEFAULT now(),
  publicado_em         timestamptz,
  tentativas           int         NOT NULL DEFAULT 0,
  ultimo_erro          text,
  proxima_tentativa_em timestamptz NOT NULL DEFAULT now()
))sql"),
                                          report));
  OUTBOXD_RETURN_IF_ERROR(
      CreateIfMissing(conn, index, "index " + index.name,
                      absl::StrCat("CREATE INDEX ", conn.QuoteIdentifier(index.name), " ON ",
                                   outbox.quoted, " (seq) WHERE publicado_em IS NULL"),
                      report));
  const outbox::DeadLetterStore dead_letters(options.table);
  const TableName dead_letter_table = Sibling(conn, outbox, dead_letters.table());
  OUTBOXD_RETURN_IF_ERROR(CreateIfMissing(conn, dead_letter_table, "table " + dead_letters.table(),
                                          dead_letters.CreateSql(conn), report));
  return CreateIfMissing(conn, inbox, "table " + options.inbox_table,
                         absl::StrCat("CREATE TABLE ", inbox.quoted, R"sql( (
  message_id    uuid PRIMARY KEY,
  processado_em timestamptz NOT NULL DEFAULT now()
))sql"),
                         report);
}

// An existing publication must publish the outbox table's inserts.
absl::Status CheckPublication(pg::Connection& conn, const SetupOptions& options,
                              const TableName& outbox, bool publishes_inserts) {
  if (!publishes_inserts) {
    return absl::FailedPreconditionError(absl::StrCat(
        "publication ", options.publication, " does not publish inserts: ALTER PUBLICATION ",
        pg::SqlIdentifier(options.publication), " SET (publish = 'insert')"));
  }
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::Result covered,
      conn.ExecParams("SELECT 1 FROM pg_publication_tables WHERE pubname = $1 "
                      "AND format('%I.%I', schemaname, tablename)::regclass = $2::regclass",
                      {options.publication, outbox.quoted}));
  if (covered.rows() > 0) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("publication ", options.publication, " exists but does not publish table ",
                   options.table, ": ALTER PUBLICATION ", pg::SqlIdentifier(options.publication),
                   " ADD TABLE ", DisplayName(outbox), ", or choose another --publication"));
}

absl::Status EnsurePublication(pg::Connection& conn, const SetupOptions& options,
                               SetupReport& report) {
  const TableName outbox = SplitTableName(conn, options.table);
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::Result existing,
      conn.ExecParams("SELECT pubinsert FROM pg_publication WHERE pubname = $1",
                      {options.publication}));
  if (existing.rows() > 0) {
    return CheckPublication(conn, options, outbox, existing.Get(0, 0) == "t");
  }
  absl::StatusOr<pg::Result> created =
      conn.Exec(absl::StrCat("CREATE PUBLICATION ", conn.QuoteIdentifier(options.publication),
                             " FOR TABLE ", outbox.quoted, " WITH (publish = 'insert')"));
  if (!created.ok()) {
    return Annotate(created.status(), "cannot create publication " + options.publication);
  }
  report.created.push_back("publication " + options.publication);
  return absl::OkStatus();
}

// Tables, index and publication commit together; the advisory lock serialises two
// setups racing on the same database.
absl::Status EnsureSchema(pg::Connection& conn, const SetupOptions& options, SetupReport& report) {
  OUTBOXD_RETURN_IF_ERROR(
      conn.Exec("BEGIN; SELECT pg_advisory_xact_lock(hashtext('outboxd setup'))").status());
  absl::Status status = EnsureTables(conn, options, report);
  if (status.ok()) status = EnsurePublication(conn, options, report);
  if (!status.ok()) {
    (void)conn.Exec("ROLLBACK");
    report.created.clear();
    return status;
  }
  return conn.Exec("COMMIT").status();
}

// An existing slot must be a pgoutput slot of this database.
absl::Status CheckSlot(pg::Connection& conn, const SetupOptions& options,
                       const pg::SlotInfo& slot) {
  OUTBOXD_ASSIGN_OR_RETURN(std::string what, pg::SlotMismatch(conn, slot));
  if (what.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("replication slot ", options.slot, " ", what,
                   ": drop it with SELECT pg_drop_replication_slot(",
                   conn.QuoteLiteral(options.slot), ") or choose another --slot"));
}

absl::Status EnsureSlot(pg::Connection& conn, const SetupOptions& options, SetupReport& report) {
  OUTBOXD_ASSIGN_OR_RETURN(pg::SlotInfo slot, pg::QuerySlot(conn, options.slot));
  if (slot.exists) return CheckSlot(conn, options, slot);
  absl::StatusOr<pg::Result> created =
      conn.ExecParams("SELECT pg_create_logical_replication_slot($1, 'pgoutput')", {options.slot});
  if (created.ok()) {
    report.created.push_back("replication slot " + options.slot);
    return absl::OkStatus();
  }
  const std::string state = conn.last_sqlstate();
  if (state == "42710") {  // created meanwhile by a concurrent setup
    OUTBOXD_ASSIGN_OR_RETURN(slot, pg::QuerySlot(conn, options.slot));
    return CheckSlot(conn, options, slot);
  }
  if (state == "42501") {
    return absl::PermissionDeniedError(
        absl::StrCat("role ", conn.user(), " lacks REPLICATION: ALTER ROLE ",
                     pg::SqlIdentifier(conn.user()), " REPLICATION"));
  }
  return Annotate(created.status(), "cannot create replication slot " + options.slot);
}

}  // namespace

absl::Status Setup(pg::Connection& conn, const SetupOptions& options, SetupReport* report) {
  if (options.table.empty() || options.publication.empty() || options.slot.empty() ||
      options.inbox_table.empty()) {
    return absl::InvalidArgumentError(
        "setup needs non-empty --table, --publication and --slot names");
  }
  SetupReport local;
  SetupReport& out = report ? *report : local;
  out.created.clear();
  OUTBOXD_RETURN_IF_ERROR(relay::CheckWalLevel(conn));
  OUTBOXD_RETURN_IF_ERROR(EnsureSchema(conn, options, out));
  return EnsureSlot(conn, options, out);
}

}  // namespace outboxd::ops
