// Preflight reads pg_settings, pg_roles, pg_class/pg_attribute, pg_publication(_tables)
// and pg_replication_slots; the messages follow `outboxd setup`'s where both can
// meet the same problem.
#include "relay/preflight.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "outbox/dead_letter.h"
#include "outbox/names.h"
#include "outbox/relay_state.h"
#include "pg/identifier.h"
#include "pg/partitions.h"
#include "pg/server_checks.h"
#include "pg/slot.h"
#include "pg/table_name.h"

namespace outboxd::relay {
namespace {

// The outbox table as the catalog resolved it.
struct ResolvedTable {
  std::string oid;
  std::string schema;
  std::string name;
  std::string display;  // schema.name, each part quoted only if needed
  bool partitioned = false;
};

absl::Status TableNotFound(pg::Connection& conn, const RelayOptions& options,
                           const pg::TableName& name) {
  OUTBOXD_ASSIGN_OR_RETURN(pg::Result db, conn.Exec("SELECT current_database()"));
  std::string where = absl::StrCat("database ", std::string(db.Get(0, 0)));
  if (name.schema.empty()) {
    OUTBOXD_ASSIGN_OR_RETURN(pg::Result path, conn.Exec("SHOW search_path"));
    absl::StrAppend(&where, " (search_path: ", std::string(path.Get(0, 0)), ")");
  }
  return absl::NotFoundError(absl::StrCat("table ", options.table, " not found in ", where,
                                          "; run outboxd setup, or name the outbox table "
                                          "with --table [schema.]name"));
}

absl::StatusOr<ResolvedTable> ResolveTable(pg::Connection& conn, const RelayOptions& options) {
  OUTBOXD_ASSIGN_OR_RETURN(const pg::TableName name, outbox::ParseOutboxTable(options.table));
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::Result found,
      conn.ExecParams("SELECT c.oid, n.nspname, c.relname, c.relkind FROM pg_class c "
                      "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass($1)",
                      {name.quoted}));
  if (found.rows() == 0) return TableNotFound(conn, options, name);
  ResolvedTable table{std::string(found.Get(0, 0)), std::string(found.Get(0, 1)),
                      std::string(found.Get(0, 2)), ""};
  table.display = absl::StrCat(pg::SqlIdentifier(table.schema), ".", pg::SqlIdentifier(table.name));
  const std::string_view kind = found.Get(0, 3);
  table.partitioned = kind == "p";
  if (kind != "r" && kind != "p") {
    const std::string what = kind == "v"   ? "a view"
                             : kind == "m" ? "a materialized view"
                             : kind == "f"
                                 ? "a foreign table"
                                 : absl::StrCat("not a table (relkind ", std::string(kind), ")");
    return absl::FailedPreconditionError(
        absl::StrCat(table.display, " is ", what,
                     ", so no publication can carry its inserts; name the outbox table with "
                     "--table [schema.]name"));
  }
  return table;
}

// The first row whose first field is `value`, or -1.
int RowWith(const pg::Result& result, const std::string& value) {
  for (int row = 0; row < result.rows(); ++row) {
    if (result.Get(row, 0) == value) return row;
  }
  return -1;
}

// The mapped columns with the flag that renames each (as EventMapper names them).
struct MappedColumn {
  const std::string& name;
  const char* flag;
};

// Without the created-at one when it is named "" (the table has none).
std::vector<MappedColumn> MappedColumns(const outbox::ColumnMapping& columns) {
  std::vector<MappedColumn> mapped = {{columns.id, "--id-column"},
                                      {columns.aggregate_id, "--aggregate-column"},
                                      {columns.type, "--type-column"},
                                      {columns.payload, "--payload-column"}};
  if (!columns.created_at.empty()) mapped.push_back({columns.created_at, "--created-at-column"});
  return mapped;
}

// The created-at column is the one a table may lack: a Debezium outbox table has none.
absl::StatusOr<bool> CreatedAtMissing(pg::Connection& conn, const RelayOptions& options,
                                      const ResolvedTable& table) {
  if (options.columns.created_at.empty()) return false;
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::Result found,
      conn.ExecParams("SELECT 1 FROM pg_attribute WHERE attrelid = $1::oid AND attname = $2 "
                      "AND attnum > 0 AND NOT attisdropped",
                      {table.oid, options.columns.created_at}));
  return found.rows() == 0;
}

// The dead-letter table setup creates beside the outbox: the relay reads it as it
// connects. (Without the relay-state table it runs on, and says what it cannot do.)
absl::Status CheckDeadLetterTable(pg::Connection& conn, const RelayOptions& options,
                                  const ResolvedTable& table) {
  const std::string dead_letter = outbox::DeadLetterStore(options.table).table();
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::Result found,
      conn.ExecParams("SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                      "WHERE c.relname = $1 AND n.nspname = $2",
                      {dead_letter, table.schema}));
  if (found.rows() > 0) return absl::OkStatus();
  return absl::NotFoundError(
      absl::StrCat("table ", pg::SqlIdentifier(table.schema), ".", pg::SqlIdentifier(dead_letter),
                   " does not exist; run outboxd setup with the same --table and column flags "
                   "(it creates only what is missing)"));
}

// `columns`: the mapping without a created-at column the table lacks.
absl::Status CheckColumns(pg::Connection& conn, const outbox::ColumnMapping& columns,
                          const ResolvedTable& table) {
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::Result found,
      conn.ExecParams("SELECT attname, attgenerated <> '' FROM pg_attribute "
                      "WHERE attrelid = $1::oid AND attnum > 0 AND NOT attisdropped",
                      {table.oid}));
  for (const MappedColumn& column : MappedColumns(columns)) {
    const int row = RowWith(found, column.name);
    if (row < 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("table ", table.display, " has no column \"", column.name,
                       "\"; add it or name the right column with ", column.flag));
    }
    // Before PostgreSQL 18 pgoutput never sends generated columns.
    if (found.Get(row, 1) == "t" && PQserverVersion(conn.get()) < 180000) {
      return absl::FailedPreconditionError(
          absl::StrCat("column \"", column.name, "\" of table ", table.display,
                       " is generated, and logical replication does not send generated columns; "
                       "name a stored column with ",
                       column.flag));
    }
  }
  return absl::OkStatus();
}

// The columns the publication sends for the table (its column list, PostgreSQL 15+).
absl::Status CheckPublishedColumns(pg::Connection& conn, const RelayOptions& options,
                                   const outbox::ColumnMapping& columns,
                                   const ResolvedTable& table) {
  if (PQserverVersion(conn.get()) < 150000) return absl::OkStatus();  // no column lists
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::Result published,
      conn.ExecParams("SELECT unnest(attnames)::text FROM pg_publication_tables "
                      "WHERE pubname = $1 AND schemaname = $2 AND tablename = $3",
                      {options.publication, table.schema, table.name}));
  for (const MappedColumn& column : MappedColumns(columns)) {
    if (RowWith(published, column.name) < 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("publication ", options.publication, " leaves column \"", column.name,
                       "\" of table ", table.display, " out of its column list: ALTER PUBLICATION ",
                       pg::SqlIdentifier(options.publication), " SET TABLE ", table.display));
    }
  }
  return absl::OkStatus();
}

// A partitioned outbox's inserts must come named as the outbox, not as its leaf
// partitions (outboxd setup switches the publication; see src/ops/setup.cc).
absl::Status CheckViaRoot(pg::Connection& conn, const RelayOptions& options,
                          const ResolvedTable& table) {
  if (!table.partitioned) return absl::OkStatus();
  OUTBOXD_ASSIGN_OR_RETURN(std::optional<bool> via_root,
                           pg::PublishesViaRoot(conn, options.publication));
  if (!via_root.has_value() || *via_root) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "publication ", options.publication, " publishes the partitions of ", table.display,
      " as themselves: run outboxd setup (it switches the publication), or ALTER PUBLICATION ",
      pg::SqlIdentifier(options.publication), " SET (publish_via_partition_root = true)"));
}

absl::Status CheckPublication(pg::Connection& conn, const RelayOptions& options,
                              const outbox::ColumnMapping& columns, const ResolvedTable& table) {
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::Result pub, conn.ExecParams("SELECT pubinsert FROM pg_publication WHERE pubname = $1",
                                      {options.publication}));
  const std::string name = pg::SqlIdentifier(options.publication);
  if (pub.rows() == 0) {
    return absl::NotFoundError(absl::StrCat("publication ", options.publication,
                                            " does not exist; run outboxd setup, or name the "
                                            "publication with --publication"));
  }
  if (pub.Get(0, 0) != "t") {
    return absl::FailedPreconditionError(absl::StrCat(
        "publication ", options.publication, " does not publish inserts: ALTER PUBLICATION ", name,
        " SET (publish = 'insert')"));
  }
  OUTBOXD_RETURN_IF_ERROR(CheckViaRoot(conn, options, table));
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::Result covered,
      conn.ExecParams("SELECT 1 FROM pg_publication_tables "
                      "WHERE pubname = $1 AND schemaname = $2 AND tablename = $3",
                      {options.publication, table.schema, table.name}));
  if (covered.rows() == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("publication ", options.publication, " does not publish table ", table.display,
                     ": ALTER PUBLICATION ", name, " ADD TABLE ", table.display,
                     ", or choose another --publication"));
  }
  return CheckPublishedColumns(conn, options, columns, table);
}

}  // namespace

absl::Status CheckPrimary(pg::Connection& conn) {
  OUTBOXD_ASSIGN_OR_RETURN(pg::Result r, conn.Exec("SELECT pg_is_in_recovery()"));
  if (r.Get(0, 0) != "t") return absl::OkStatus();
  // Unavailable: retried, so a relay pointed at a standby being promoted goes on then.
  return absl::UnavailableError(absl::StrCat(
      "PostgreSQL at ", conn.endpoint(),
      " is a standby (read-only): the slot is used on the primary only; list every host in "
      "--pg with target_session_attrs=read-write"));
}

absl::Status MissingSlotError(pg::Connection& conn, const RelayOptions& options) {
  OUTBOXD_ASSIGN_OR_RETURN(
      bool existed, outbox::RelayStateStore(options.table).HasRecordedPosition(conn, options.slot));
  if (!existed) {
    return absl::NotFoundError(absl::StrCat("replication slot ", options.slot,
                                            " does not exist; run outboxd setup, or name the "
                                            "slot with --slot"));
  }
  return absl::NotFoundError(absl::StrCat(
      "replication slot ", options.slot,
      " does not exist, yet relays recorded positions for it (a failover to a server without "
      "it?): run with --recreate-missing-slot to re-create it and republish the rows after the "
      "last acknowledged position, or run outboxd setup --recreate-slot --slot ",
      options.slot, " first"));
}

namespace {

absl::Status CheckSlot(pg::Connection& conn, const RelayOptions& options) {
  OUTBOXD_ASSIGN_OR_RETURN(pg::SlotInfo slot, pg::QuerySlot(conn, options.slot));
  if (!slot.exists) {
    // setup asked the relay to create it (backfill first): nothing to check yet.
    OUTBOXD_ASSIGN_OR_RETURN(std::optional<outbox::BackfillRequest> backfill,
                             outbox::RelayStateStore(options.table).PendingBackfill(conn, options.slot));
    if (backfill) return absl::OkStatus();
    // The relay re-creates it itself (relay/session.h).
    if (options.recreate_missing_slot) {
      OUTBOXD_ASSIGN_OR_RETURN(
          bool existed,
          outbox::RelayStateStore(options.table).HasRecordedPosition(conn, options.slot));
      if (existed) return absl::OkStatus();
    }
    return MissingSlotError(conn, options);
  }
  OUTBOXD_ASSIGN_OR_RETURN(std::string what, pg::SlotMismatch(conn, slot));
  if (what.empty()) return absl::OkStatus();
  OUTBOXD_ASSIGN_OR_RETURN(std::string slot_literal, conn.QuoteLiteral(options.slot));
  return absl::FailedPreconditionError(
      absl::StrCat("replication slot ", options.slot, " ", what,
                   ": choose another --slot, or drop it with SELECT pg_drop_replication_slot(",
                   slot_literal, ") and run outboxd setup"));
}

// --source messages|both: an emitted event lives only in the WAL, so a slot that
// max_slot_wal_keep_size lets PostgreSQL cut loses it for good (a row would be
// republished by setup --recreate-slot). Refused unless the person accepted that.
absl::Status CheckWalOnlyRetention(pg::Connection& conn, const RelayOptions& options) {
  if (options.source == Source::kTable || options.allow_wal_only_with_slot_limit) {
    return absl::OkStatus();
  }
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::Result r, conn.Exec("SELECT setting FROM pg_settings WHERE name = 'max_slot_wal_keep_size'"));
  if (r.rows() == 0 || r.Get(0, 0) == "-1") return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "--source ", options.source == Source::kMessages ? "messages" : "both",
      " with max_slot_wal_keep_size = ", std::string(r.Get(0, 0)),
      "MB: slot ", options.slot,
      " can lose WAL and with it emitted events no table can backfill; set "
      "max_slot_wal_keep_size = -1, or accept the loss with --allow-wal-only-with-slot-limit"));
}

// --source messages|both: pgoutput sends every logical message whatever its prefix,
// and libpq holds each whole (twice) before the relay can skip it. While PUBLIC may
// call pg_logical_emit_message, any role that connects decides how much memory the
// relay needs (a 150 MiB message: 317 MiB peak). Warned, not refused: other tools may
// rely on it, and nothing it writes is published (docs/security.md).
absl::Status WarnIfPublicEmitsMessages(pg::Connection& conn, const RelayOptions& options) {
  if (options.source == Source::kTable) return absl::OkStatus();
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::Result r,
      conn.Exec("SELECT pg_catalog.bool_or(pg_catalog.has_function_privilege('public', p.oid, "
                "'EXECUTE')) FROM pg_catalog.pg_proc p WHERE p.proname = "
                "'pg_logical_emit_message' AND p.pronamespace = 'pg_catalog'::regnamespace"));
  if (r.rows() == 1 && r.Get(0, 0) == "t") {
    spdlog::warn(
        "every role may call pg_logical_emit_message in this database: a message of any "
        "size reaches the relay whole, whatever its prefix (none is published unless "
        "outboxd_emit signed it); to bound the relay's memory, run outboxd setup once as a "
        "superuser, or REVOKE EXECUTE ON FUNCTION pg_logical_emit_message FROM PUBLIC and "
        "grant it to the outbox's owner (docs/security.md, least privilege step 1)");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckNames(const RelayOptions& options) {
  OUTBOXD_RETURN_IF_ERROR(outbox::CheckNames(options.table, options.columns));
  OUTBOXD_RETURN_IF_ERROR(pg::CheckIdentifier(options.publication, "--publication"));
  return pg::CheckSlotName(options.slot, "--slot");
}

absl::Status Preflight(pg::Connection& conn, const RelayOptions& options,
                       PreflightFindings* findings) {
  OUTBOXD_RETURN_IF_ERROR(CheckNames(options));
  OUTBOXD_RETURN_IF_ERROR(CheckPrimary(conn));
  OUTBOXD_RETURN_IF_ERROR(pg::CheckWalLevel(conn));
  OUTBOXD_RETURN_IF_ERROR(pg::CheckReplicationPrivilege(conn));
  // With --source messages too: the run's cleanup job and a requested backfill read the
  // table and its mapped columns (docs/usage.md, "A WAL-only outbox").
  OUTBOXD_ASSIGN_OR_RETURN(ResolvedTable table, ResolveTable(conn, options));
  OUTBOXD_ASSIGN_OR_RETURN(bool created_at_missing, CreatedAtMissing(conn, options, table));
  outbox::ColumnMapping present = options.columns;
  if (created_at_missing) present.created_at.clear();
  OUTBOXD_RETURN_IF_ERROR(CheckColumns(conn, present, table));
  OUTBOXD_RETURN_IF_ERROR(CheckDeadLetterTable(conn, options, table));
  OUTBOXD_RETURN_IF_ERROR(CheckPublication(conn, options, present, table));
  OUTBOXD_RETURN_IF_ERROR(CheckSlot(conn, options));
  OUTBOXD_RETURN_IF_ERROR(CheckWalOnlyRetention(conn, options));
  OUTBOXD_RETURN_IF_ERROR(WarnIfPublicEmitsMessages(conn, options));
  if (findings != nullptr) findings->created_at_missing = created_at_missing;
  return absl::OkStatus();
}

}  // namespace outboxd::relay
