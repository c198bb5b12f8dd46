// Setup checks before it creates: every name, wal_level, the REPLICATION privilege
// and an existing slot first, then tables, index and publication in one transaction
// (so a failure leaves nothing half-made), then the slot, which cannot be created in
// a transaction that wrote (if that still fails, the error lists what stays). The
// publication must exist before the slot: pgoutput looks it up as of each decoded
// change. poll_only skips the wal_level, privilege and slot checks and stops after
// the tables: polling decodes nothing.
#include "ops/setup.h"

#include <optional>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "base/annotate.h"
#include "base/status_macros.h"
#include "ops/internal/detach_ledger.h"
#include "ops/internal/outbox_table.h"
#include "outbox/dead_letter.h"
#include "outbox/emit_key.h"
#include "outbox/emitted_event.h"
#include "outbox/names.h"
#include "outbox/relay_state.h"
#include "pg/identifier.h"
#include "pg/partitions.h"
#include "pg/server_checks.h"
#include "pg/slot.h"
#include "pg/table_name.h"

namespace outboxd::ops {
namespace {

using pg::TableName;

// Runs `sql` if `relation` is missing and records it in `report` as `what`.
absl::Status CreateIfMissing(pg::Connection& conn, const TableName& relation,
                             const std::string& what, const std::string& sql, SetupReport& report) {
  OUTBOXD_ASSIGN_OR_RETURN(bool exists, relation.Exists(conn));
  if (exists) return absl::OkStatus();
  absl::StatusOr<pg::Result> created = conn.Exec(sql);
  if (!created.ok()) return Annotate(created.status(), absl::StrCat("cannot create ", what, ": "));
  report.created.push_back(what);
  return absl::OkStatus();
}

// --partition-by and --inbox-partition-by: the partitions of a new (or partitioned)
// table; a plain one that exists is not converted behind the writers' backs.
absl::Status EnsurePartitions(pg::Connection& conn, const SetupOptions& options,
                              const TableName& table, PartitionInterval interval,
                              const std::string& flag, const std::string& how_to_move,
                              SetupReport& report) {
  if (interval == PartitionInterval::kNone) return absl::OkStatus();
  OUTBOXD_ASSIGN_OR_RETURN(bool partitioned, pg::IsPartitioned(conn, table));
  if (!partitioned) {
    return absl::FailedPreconditionError(
        absl::StrCat("table ", table.Display(), " exists and is not partitioned: setup ", flag,
                     " creates a new one only; docs/operations.md, \"", how_to_move,
                     "\" says how to move a running one"));
  }
  OUTBOXD_ASSIGN_OR_RETURN(std::vector<std::string> created,
                           CreatePartitionsAhead(conn, table, interval,
                                                 CreateOptions{.ahead = options.partitions_ahead,
                                                               .with_default = true,
                                                               .lock_timeout = ""}));
  for (const std::string& name : created) report.created.push_back("partition " + name);
  return absl::OkStatus();
}

// The inbox (inbox/inbox.h); partitioned, keyed by the id and the event's created-at.
std::string CreateInboxSql(const TableName& inbox, PartitionInterval interval) {
  if (interval == PartitionInterval::kNone) {
    return absl::StrCat("CREATE TABLE ", inbox.quoted, R"sql( (
  message_id    uuid PRIMARY KEY,
  processado_em timestamptz NOT NULL DEFAULT now()
))sql");
  }
  return absl::StrCat("CREATE TABLE ", inbox.quoted, R"sql( (
  message_id       uuid NOT NULL,
  evento_criado_em timestamptz NOT NULL,
  processado_em    timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (message_id, evento_criado_em)
) PARTITION BY RANGE (evento_criado_em))sql");
}

// The dead-letter table: created, or one an older setup made migrated (the one table
// setup alters: outbox/dead_letter.h, DeadLetterStore::Migrate).
absl::Status EnsureDeadLetterTable(pg::Connection& conn, const TableName& outbox,
                                   const SetupOptions& options, SetupReport& report) {
  const outbox::DeadLetterStore dead_letters(options.table);
  const TableName table = outbox.Sibling(dead_letters.table());
  OUTBOXD_ASSIGN_OR_RETURN(const bool exists, table.Exists(conn));
  if (!exists) {
    return CreateIfMissing(conn, table, "table " + dead_letters.table(),
                           dead_letters.CreateSql(conn), report);
  }
  absl::StatusOr<std::string> migrated = dead_letters.Migrate(conn);
  if (!migrated.ok()) {
    return Annotate(migrated.status(), absl::StrCat("cannot migrate table ", dead_letters.table(),
                                                    " (run setup as its owner): "));
  }
  if (!migrated->empty()) report.created.push_back(*migrated);
  return absl::OkStatus();
}

absl::Status EnsureTables(pg::Connection& conn, const SetupOptions& options, SetupReport& report) {
  OUTBOXD_ASSIGN_OR_RETURN(const TableName outbox, outbox::ParseOutboxTable(options.table));
  const TableName index = outbox.Sibling(outbox.name + "_pendentes");
  const TableName inbox = outbox.Sibling(options.inbox_table);
  OUTBOXD_ASSIGN_OR_RETURN(std::string index_name, conn.QuoteIdentifier(index.name));
  OUTBOXD_ASSIGN_OR_RETURN(internal::OutboxTable table,
                           internal::InspectOutboxTable(conn, outbox, options));
  report.notes.insert(report.notes.end(), table.notes.begin(), table.notes.end());
  OUTBOXD_ASSIGN_OR_RETURN(
      std::string create_outbox,
      internal::CreateOutboxSql(conn, outbox, options.columns,
                                options.partition_by == PartitionInterval::kNone
                                    ? internal::Layout::kPlain
                                    : internal::Layout::kPartitioned));
  OUTBOXD_RETURN_IF_ERROR(
      CreateIfMissing(conn, outbox, "table " + options.table, create_outbox, report));
  if (table.add_headers_column) {
    const std::string& headers = options.columns.headers;
    OUTBOXD_RETURN_IF_ERROR(conn.Exec(absl::StrCat("ALTER TABLE ", outbox.quoted, " ADD COLUMN ",
                                                   pg::SqlIdentifier(headers), " ",
                                                   internal::HeadersColumnDefinition(headers)))
                                .status());
    report.created.push_back(absl::StrCat("column ", options.table, ".", headers));
  }
  if (table.set_headers_default) {  // a column an older setup (or a person) added
    const std::string& headers = options.columns.headers;
    OUTBOXD_RETURN_IF_ERROR(conn.Exec(absl::StrCat("ALTER TABLE ", outbox.quoted, " ALTER COLUMN ",
                                                   pg::SqlIdentifier(headers), " SET DEFAULT ",
                                                   internal::HeadersColumnDefault()))
                                .status());
    report.created.push_back(
        absl::StrCat("default of column ", options.table, ".", headers, " (SET LOCAL outboxd.*)"));
  }
  OUTBOXD_RETURN_IF_ERROR(EnsurePartitions(conn, options, outbox, options.partition_by,
                                           "--partition-by", "Moving to a partitioned outbox",
                                           report));
  if (table.polling_columns) {  // the index is on seq, for publicado_em IS NULL
    OUTBOXD_RETURN_IF_ERROR(
        CreateIfMissing(conn, index, "index " + index.name,
                        absl::StrCat("CREATE INDEX ", index_name, " ON ", outbox.quoted,
                                     " (seq) WHERE publicado_em IS NULL"),
                        report));
  }
  OUTBOXD_RETURN_IF_ERROR(EnsureDeadLetterTable(conn, outbox, options, report));
  const outbox::RelayStateStore state(options.table);
  OUTBOXD_RETURN_IF_ERROR(CreateIfMissing(conn, outbox.Sibling(state.table()),
                                          "table " + state.table(), state.CreateSql(conn), report));
  OUTBOXD_RETURN_IF_ERROR(CreateIfMissing(conn, inbox, "table " + options.inbox_table,
                                          CreateInboxSql(inbox, options.inbox_partition_by),
                                          report));
  OUTBOXD_RETURN_IF_ERROR(EnsurePartitions(conn, options, inbox, options.inbox_partition_by,
                                           "--inbox-partition-by", "Moving to a partitioned inbox",
                                           report));
  if (options.partition_by == PartitionInterval::kNone &&
      options.inbox_partition_by == PartitionInterval::kNone) {
    return absl::OkStatus();
  }
  // Where cleanup records the partitions it detaches (the upkeep creates it too).
  const internal::DetachLedger ledger(outbox);
  return CreateIfMissing(conn, ledger.table(), "table " + ledger.table().name, ledger.CreateSql(),
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
  // By schema and name: a ::regclass cast on pg_publication_tables' rows runs over
  // pg_class rows of schemas the role may not use (pg_toast: permission denied).
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::Result covered,
      conn.ExecParams("SELECT 1 FROM pg_publication_tables p JOIN pg_namespace n "
                      "ON n.nspname = p.schemaname JOIN pg_class c ON c.relnamespace = n.oid "
                      "AND c.relname = p.tablename WHERE p.pubname = $1 AND c.oid = $2::regclass",
                      {options.publication, outbox.quoted}));
  if (covered.rows() > 0) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("publication ", options.publication, " exists but does not publish table ",
                   options.table, ": ALTER PUBLICATION ", pg::SqlIdentifier(options.publication),
                   " ADD TABLE ", outbox.Display(), ", or choose another --publication"));
}

// A partitioned outbox is published as its root: without publish_via_partition_root
// pgoutput names each leaf partition, pg_publication_tables lists the leaves, and
// `outboxd run` finds neither the outbox's name. An existing publication is switched
// (it changes how the publication names every partitioned table it holds, which
// is what any subscriber of an outbox wants).
absl::Status EnsureViaRoot(pg::Connection& conn, const SetupOptions& options,
                           const TableName& outbox, SetupReport& report) {
  OUTBOXD_ASSIGN_OR_RETURN(bool partitioned, pg::IsPartitioned(conn, outbox));
  if (!partitioned) return absl::OkStatus();
  OUTBOXD_ASSIGN_OR_RETURN(std::optional<bool> via_root,
                           pg::PublishesViaRoot(conn, options.publication));
  if (!via_root.has_value() || *via_root) return absl::OkStatus();
  const std::string alter =
      absl::StrCat("ALTER PUBLICATION ", pg::SqlIdentifier(options.publication),
                   " SET (publish_via_partition_root = true)");
  absl::StatusOr<pg::Result> altered = conn.Exec(alter);
  if (!altered.ok()) {
    return Annotate(
        altered.status(),
        absl::StrCat("publication ", options.publication, " publishes the partitions of ",
                     outbox.Display(), " as themselves and cannot be changed (", alter,
                     " as its owner): "));
  }
  report.created.push_back(
      absl::StrCat("publication ", options.publication, " now publishes via the partition root"));
  return absl::OkStatus();
}

absl::Status EnsurePublication(pg::Connection& conn, const SetupOptions& options,
                               SetupReport& report) {
  OUTBOXD_ASSIGN_OR_RETURN(const TableName outbox, outbox::ParseOutboxTable(options.table));
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::Result existing,
      conn.ExecParams("SELECT pubinsert FROM pg_publication WHERE pubname = $1",
                      {options.publication}));
  if (existing.rows() > 0) {
    OUTBOXD_RETURN_IF_ERROR(EnsureViaRoot(conn, options, outbox, report));
    return CheckPublication(conn, options, outbox, existing.Get(0, 0) == "t");
  }
  OUTBOXD_ASSIGN_OR_RETURN(std::string publication, conn.QuoteIdentifier(options.publication));
  OUTBOXD_ASSIGN_OR_RETURN(bool partitioned, pg::IsPartitioned(conn, outbox));
  absl::StatusOr<pg::Result> created = conn.Exec(
      absl::StrCat("CREATE PUBLICATION ", publication, " FOR TABLE ", outbox.quoted,
                   partitioned ? " WITH (publish = 'insert', publish_via_partition_root = true)"
                               : " WITH (publish = 'insert')"));
  if (!created.ok()) {
    return Annotate(created.status(),
                    absl::StrCat("cannot create publication ", options.publication, ": "));
  }
  report.created.push_back("publication " + options.publication);
  return absl::OkStatus();
}

// The outbox table with the schema it lives in, named: the SECURITY DEFINER
// function runs with search_path pg_catalog, so what it reads must be qualified.
absl::StatusOr<TableName> ResolveSchema(pg::Connection& conn, TableName outbox) {
  if (!outbox.schema.empty()) return outbox;
  OUTBOXD_ASSIGN_OR_RETURN(pg::Result r,
                           conn.ExecParams("SELECT n.nspname FROM pg_catalog.pg_class c JOIN "
                                           "pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
                                           "WHERE c.oid = pg_catalog.to_regclass($1)",
                                           {outbox.quoted}));
  if (r.rows() != 1) {
    return absl::NotFoundError(absl::StrCat("table ", outbox.Display(), " not found"));
  }
  outbox.schema = std::string(r.Get(0, 0));
  return outbox.Sibling(outbox.name);
}

// The overload with headers is new in an upgrade: the roles that may call the
// three-argument outboxd_emit may call it too (the same power, headers checked), so
// "; GRANT EXECUTE ..." to each of them when it does not exist yet, else nothing.
absl::StatusOr<std::string> HeadersOverloadGrants(pg::Connection& conn, const TableName& function) {
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::Result r,
      conn.ExecParams(
          "SELECT a.grantee::pg_catalog.regrole::text FROM pg_catalog.pg_proc p, "
          "pg_catalog.aclexplode(p.proacl) a WHERE p.oid = pg_catalog.to_regprocedure($1 || $2) "
          "AND pg_catalog.to_regprocedure($1 || $3) IS NULL AND a.privilege_type = 'EXECUTE' "
          "AND a.grantee <> 0 AND a.grantee <> p.proowner",
          {function.quoted, std::string(outbox::kEmitArgs),
           std::string(outbox::kEmitArgsWithHeaders)}));
  std::string grants;
  for (int i = 0; i < r.rows(); ++i) {
    absl::StrAppend(&grants, "; GRANT EXECUTE ON FUNCTION ", function.quoted,
                    outbox::kEmitArgsWithHeaders, " TO ", std::string(r.Get(i, 0)));
  }
  return grants;
}

// The WAL-only outbox's writer function (outbox/emitted_event.h) and its signing key
// (outbox/emit_key.h), beside the outbox table. The function is replaced on every run,
// so an upgrade brings its new definition, and EXECUTE is taken from PUBLIC each time
// (the owner grants it like INSERT on the outbox). `upgraded`: the outbox table, set
// when an unsigned function got its first key (Setup then lets its version-1 backlog
// through).
absl::Status EnsureEmitFunction(pg::Connection& conn, const SetupOptions& options,
                                SetupReport& report, std::optional<TableName>& upgraded) {
  OUTBOXD_ASSIGN_OR_RETURN(const TableName outbox, outbox::ParseOutboxTable(options.table));
  OUTBOXD_ASSIGN_OR_RETURN(const TableName resolved, ResolveSchema(conn, outbox));
  const TableName function = resolved.Sibling(std::string(outbox::kEmitFunction));
  const outbox::EmitKeyStore keys(resolved);
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::Result found,
      conn.ExecParams("SELECT pg_catalog.to_regprocedure($1 || '(text,text,jsonb)') IS NULL, "
                      "pg_catalog.to_regclass($2) IS NULL",
                      {function.quoted, keys.table().quoted}));
  OUTBOXD_ASSIGN_OR_RETURN(const bool first_key, keys.Ensure(conn, found.Get(0, 0) == "f"));
  if (first_key) upgraded = resolved;
  OUTBOXD_ASSIGN_OR_RETURN(const std::string grants, HeadersOverloadGrants(conn, function));
  absl::StatusOr<pg::Result> created = conn.Exec(
      absl::StrCat(outbox::EmitFunctionSql(function, keys.table()), "; REVOKE ALL ON FUNCTION ",
                   function.quoted, outbox::kEmitArgs, " FROM PUBLIC; REVOKE ALL ON FUNCTION ",
                   function.quoted, outbox::kEmitArgsWithHeaders, " FROM PUBLIC", grants));
  if (!created.ok()) {
    return Annotate(created.status(), absl::StrCat("cannot create function ", function.Display(), ": "));
  }
  if (found.Get(0, 0) == "t") {
    report.created.push_back("function " +
                             outbox.Sibling(std::string(outbox::kEmitFunction)).Display());
  }
  if (found.Get(0, 1) == "t") {
    report.created.push_back("table " +
                             outbox.Sibling(std::string(outbox::kEmitKeyTable)).Display());
  }
  if (upgraded) {
    report.notes.push_back(
        absl::StrCat(function.Display(),
                     " now signs its events and only roles granted EXECUTE may call it: "
                     "GRANT EXECUTE ON FUNCTION ",
                     function.Display(), outbox::kEmitArgs, " (and ", outbox::kEmitArgsWithHeaders,
                     ") TO the application's role, and SELECT ON ", keys.table().Display(),
                     " to the relay's role"));
  }
  return absl::OkStatus();
}

// --source messages|both: pgoutput sends every logical message whatever its prefix,
// and libpq holds each whole before the relay can skip it, so while PUBLIC may call
// pg_logical_emit_message any role that connects decides how much memory the relay
// needs (docs/security.md, "Who may publish an event"). A superuser's setup takes
// EXECUTE from PUBLIC, on every overload the server has, and gives it to
// outboxd_emit's owner (the SECURITY DEFINER function calls it for its callers).
// Anyone else's setup cannot: the relay names the REVOKE when it starts with a
// WAL-only source (relay/preflight.cc).
absl::Status RestrictEmitMessage(pg::Connection& conn, const SetupOptions& options,
                                 SetupReport& report) {
  if (options.keep_public_emit_message) return absl::OkStatus();
  OUTBOXD_ASSIGN_OR_RETURN(const TableName outbox, outbox::ParseOutboxTable(options.table));
  OUTBOXD_ASSIGN_OR_RETURN(const TableName resolved, ResolveSchema(conn, outbox));
  const TableName function = resolved.Sibling(std::string(outbox::kEmitFunction));
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::Result r,
      conn.ExecParams("SELECT pg_catalog.string_agg('pg_catalog.pg_logical_emit_message(' || "
                      "pg_catalog.pg_get_function_identity_arguments(p.oid) || ')', ', '), "
                      "(SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user), "
                      "(SELECT pg_catalog.quote_ident(o.rolname) FROM pg_catalog.pg_proc f JOIN "
                      "pg_catalog.pg_roles o ON o.oid = f.proowner WHERE NOT o.rolsuper AND "
                      "f.oid = pg_catalog.to_regprocedure($1 || '(text,text,jsonb)')) "
                      "FROM pg_catalog.pg_proc p WHERE p.proname = 'pg_logical_emit_message' AND "
                      "p.pronamespace = 'pg_catalog'::regnamespace AND "
                      "pg_catalog.has_function_privilege('public', p.oid, 'EXECUTE')",
                      {function.quoted}));
  if (r.IsNull(0, 0) || r.Get(0, 1) != "t") return absl::OkStatus();
  const std::string functions(r.Get(0, 0));
  std::string sql = absl::StrCat("REVOKE EXECUTE ON FUNCTION ", functions, " FROM PUBLIC");
  std::string granted;
  if (!r.IsNull(0, 2)) {
    const std::string owner(r.Get(0, 2));
    granted = absl::StrCat(" (granted to ", owner, ", owner of ", function.Display(), ")");
    absl::StrAppend(&sql, "; GRANT EXECUTE ON FUNCTION ", functions, " TO ", owner);
  }
  absl::StatusOr<pg::Result> done = conn.Exec(sql);
  if (!done.ok()) {
    return Annotate(done.status(), "cannot take pg_logical_emit_message from PUBLIC: ");
  }
  report.created.push_back(absl::StrCat(
      "EXECUTE on pg_logical_emit_message taken from PUBLIC", granted,
      ": no other role can put a logical message in the relay's stream; GRANT it to a role "
      "another tool needs it for, or pass --keep-public-emit-message"));
  return absl::OkStatus();
}

// Tables, index and publication commit together; the advisory lock serialises two
// setups racing on the same database.
absl::Status EnsureSchema(pg::Connection& conn, const SetupOptions& options, SetupReport& report) {
  OUTBOXD_RETURN_IF_ERROR(
      conn.Exec("BEGIN; SELECT pg_advisory_xact_lock(hashtext('outboxd setup'))").status());
  absl::Status status = EnsureTables(conn, options, report);
  if (status.ok() && !options.poll_only) status = EnsurePublication(conn, options, report);
  std::optional<TableName> upgraded;
  if (status.ok() && !options.poll_only) {
    status = EnsureEmitFunction(conn, options, report, upgraded);
    if (status.ok()) status = RestrictEmitMessage(conn, options, report);
  }
  if (!status.ok()) {
    (void)conn.Exec("ROLLBACK");
    report.created.clear();
    return status;
  }
  OUTBOXD_RETURN_IF_ERROR(conn.Exec("COMMIT").status());
  if (!upgraded) return absl::OkStatus();
  // Committed first: a call of the old function that began before has written its
  // message below the position read now.
  return outbox::EmitKeyStore(*upgraded).RecordUpgrade(conn);
}

// An existing slot must be a pgoutput slot of this database.
absl::Status CheckSlot(pg::Connection& conn, const SetupOptions& options,
                       const pg::SlotInfo& slot) {
  OUTBOXD_ASSIGN_OR_RETURN(std::string what, pg::SlotMismatch(conn, slot));
  if (what.empty()) return absl::OkStatus();
  OUTBOXD_ASSIGN_OR_RETURN(std::string slot_literal, conn.QuoteLiteral(options.slot));
  return absl::FailedPreconditionError(
      absl::StrCat("replication slot ", options.slot, " ", what,
                   ": drop it with SELECT pg_drop_replication_slot(", slot_literal,
                   ") or choose another --slot"));
}

// Rows a new slot would never stream: committed before its consistent point, still
// pending. Counted in the slot's exported snapshot, so a row committed just after
// is streamed, never missed.
absl::StatusOr<int64_t> PendingBeforeSlot(pg::Connection& conn, const SetupOptions& options,
                                          const pg::CreatedSlot& created) {
  OUTBOXD_ASSIGN_OR_RETURN(const TableName outbox, outbox::ParseOutboxTable(options.table));
  OUTBOXD_ASSIGN_OR_RETURN(bool polled, outbox.HasColumn(conn, "publicado_em"));
  if (!polled) return 0;
  OUTBOXD_ASSIGN_OR_RETURN(pg::Connection reader, pg::Connection::Open(conn.conninfo()));
  OUTBOXD_ASSIGN_OR_RETURN(std::string snapshot, reader.QuoteLiteral(created.snapshot));
  OUTBOXD_RETURN_IF_ERROR(reader
                              .Exec(absl::StrCat("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY;"
                                                 " SET TRANSACTION SNAPSHOT ",
                                                 snapshot))
                              .status());
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::Result r,
      reader.Exec(absl::StrCat("SELECT count(*) FROM ", outbox.quoted, " WHERE publicado_em IS NULL")));
  return std::stoll(std::string(r.Get(0, 0)));
}

absl::Status RequestBackfill(pg::Connection& conn, const SetupOptions& options, bool after_acked,
                             const std::string& what, SetupReport& report) {
  const outbox::RelayStateStore state(options.table);
  OUTBOXD_RETURN_IF_ERROR(state.RequestBackfill(conn, options.slot, after_acked));
  report.created.push_back(what);
  return absl::OkStatus();
}

absl::Status PermissionError(pg::Connection& conn) {
  return absl::PermissionDeniedError(absl::StrCat("role ", conn.user(),
                                                  " lacks REPLICATION: ALTER ROLE ",
                                                  pg::SqlIdentifier(conn.user()), " REPLICATION"));
}

absl::Status CreateSlot(pg::Connection& conn, const SetupOptions& options, SetupReport& report) {
  absl::StatusOr<pg::Connection> repl =
      pg::Connection::Open(conn.conninfo(), pg::ConnectionKind::kReplication);
  if (!repl.ok()) return repl.status();
  absl::StatusOr<pg::CreatedSlot> created = pg::CreateSlotWithSnapshot(*repl, options.slot);
  if (!created.ok()) {
    const std::string state = repl->last_sqlstate();
    if (state == "42710") {  // created meanwhile by a concurrent setup
      OUTBOXD_ASSIGN_OR_RETURN(pg::SlotInfo slot, pg::QuerySlot(conn, options.slot));
      return CheckSlot(conn, options, slot);
    }
    if (state == "42501") return PermissionError(conn);
    return Annotate(created.status(),
                    absl::StrCat("cannot create replication slot ", options.slot, ": "));
  }
  OUTBOXD_ASSIGN_OR_RETURN(int64_t pending, PendingBeforeSlot(conn, options, *created));
  if (pending == 0) {
    report.created.push_back("replication slot " + options.slot);
    return absl::OkStatus();
  }
  { pg::Connection done = *std::move(repl); }  // closing it ends the snapshot and frees the slot
  OUTBOXD_RETURN_IF_ERROR(pg::DropSlot(conn, options.slot));
  return RequestBackfill(
      conn, options, /*after_acked=*/false,
      absl::StrCat("backfill of the ", pending, " pending rows (outboxd run creates slot ",
                   options.slot, " and publishes them first)"),
      report);
}

// The recovery from a lost slot: drop it, and let the relay republish what came
// after the last acknowledged position from the table.
absl::Status RecreateSlot(pg::Connection& conn, const SetupOptions& options,
                          const pg::SlotInfo& slot, SetupReport& report) {
  if (slot.active) {
    return absl::FailedPreconditionError(
        absl::StrCat("replication slot ", options.slot, " is in use by process ", slot.active_pid,
                     ": stop the relay, then run setup --recreate-slot again"));
  }
  if (slot.exists) {
    OUTBOXD_RETURN_IF_ERROR(pg::DropSlot(conn, options.slot));
    report.created.push_back("dropped replication slot " + options.slot);
  }
  return RequestBackfill(conn, options, /*after_acked=*/true,
                         absl::StrCat("backfill of the outbox rows after the last acknowledged "
                                      "position (outboxd run creates slot ",
                                      options.slot, " and republishes them first)"),
                         report);
}

absl::Status EnsureSlot(pg::Connection& conn, const SetupOptions& options, SetupReport& report) {
  OUTBOXD_ASSIGN_OR_RETURN(pg::SlotInfo slot, pg::QuerySlot(conn, options.slot));
  if (options.recreate_slot) return RecreateSlot(conn, options, slot, report);
  if (slot.exists) return CheckSlot(conn, options, slot);
  const outbox::RelayStateStore state(options.table);
  OUTBOXD_ASSIGN_OR_RETURN(std::optional<outbox::BackfillRequest> pending,
                           state.PendingBackfill(conn, options.slot));
  if (pending) return absl::OkStatus();  // already requested: the relay creates the slot
  return CreateSlot(conn, options, report);
}

// Every name, before anything is created: a name the server would refuse at the
// slot would otherwise fail after the tables and the publication were committed.
absl::Status CheckNames(const SetupOptions& options) {
  OUTBOXD_RETURN_IF_ERROR(outbox::ParseOutboxTable(options.table).status());
  OUTBOXD_RETURN_IF_ERROR(pg::CheckIdentifier(options.publication, "--publication"));
  OUTBOXD_RETURN_IF_ERROR(pg::CheckSlotName(options.slot, "--slot"));
  if (options.partitions_ahead < 0) {
    return absl::InvalidArgumentError("--partitions-ahead must be 0 or more");
  }
  if (options.partition_by != PartitionInterval::kNone && options.columns.created_at.empty()) {
    return absl::InvalidArgumentError(
        "--partition-by needs the created-at column (--created-at-column): it is the key");
  }
  return pg::CheckIdentifier(options.inbox_table, "--inbox-table");
}

// The slot problems EnsureSlot would meet, before anything is created.
absl::Status CheckExistingSlot(pg::Connection& conn, const SetupOptions& options) {
  OUTBOXD_ASSIGN_OR_RETURN(pg::SlotInfo slot, pg::QuerySlot(conn, options.slot));
  if (!slot.exists) return absl::OkStatus();
  if (!options.recreate_slot) return CheckSlot(conn, options, slot);
  if (!slot.active) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("replication slot ", options.slot, " is in use by process ", slot.active_pid,
                   ": stop the relay, then run setup --recreate-slot again"));
}

// A slot failure after the schema committed says what stays (a second setup reuses it).
absl::Status WithLeftovers(const absl::Status& status, const SetupReport& report) {
  if (status.ok() || report.created.empty()) return status;
  std::string kept;
  for (const std::string& what : report.created)
    absl::StrAppend(&kept, kept.empty() ? "" : ", ", what);
  return Annotate(
      status, "",
      absl::StrCat(" (setup created and keeps ", kept, "; setup run again reuses them)"));
}

// run's wal_level message, plus the set-up that needs no logical decoding.
absl::Status CheckWalLevelForSetup(pg::Connection& conn) {
  absl::Status status = pg::CheckWalLevel(conn);
  if (status.code() != absl::StatusCode::kFailedPrecondition) return status;
  return absl::FailedPreconditionError(
      absl::StrCat(status.message(), ", or use outboxd setup --poll-only for the polling relay"));
}

}  // namespace

absl::Status Setup(pg::Connection& conn, const SetupOptions& options, SetupReport* report) {
  OUTBOXD_RETURN_IF_ERROR(CheckNames(options));
  SetupReport local;
  SetupReport& out = report ? *report : local;
  out.created.clear();
  out.notes.clear();
  if (options.poll_only) return EnsureSchema(conn, options, out);
  OUTBOXD_RETURN_IF_ERROR(CheckWalLevelForSetup(conn));
  // Without REPLICATION the slot would fail after the schema was committed.
  OUTBOXD_RETURN_IF_ERROR(pg::CheckReplicationPrivilege(conn));
  OUTBOXD_RETURN_IF_ERROR(CheckExistingSlot(conn, options));
  OUTBOXD_RETURN_IF_ERROR(EnsureSchema(conn, options, out));
  return WithLeftovers(EnsureSlot(conn, options, out), out);
}

}  // namespace outboxd::ops
