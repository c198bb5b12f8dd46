// `outboxd setup`: prepares a database for the relay. Creates, where missing, the
// outbox and inbox tables (the schema in docs/architecture.md), the dead-letter and relay-state
// tables beside the outbox, the publication of the outbox's inserts and the pgoutput
// logical replication slot. Idempotent: a second run changes nothing and succeeds.
// An outbox table that already exists (a Debezium-style one, say) is checked against
// the column mapping and never altered, but for adding the --headers-column asked
// for. With poll_only it stops after the tables: no
// publication, no slot, and wal_level may be replica (for `outboxd poll`).
//
//   OUTBOXD_ASSIGN_OR_RETURN(pg::Connection conn, pg::Connection::Open(conninfo));
//   SetupReport report;
//   OUTBOXD_RETURN_IF_ERROR(Setup(conn, SetupOptions{.table = "events"}, &report));
//   for (const auto& what : report.created) std::cout << "created " << what << "\n";
#ifndef OUTBOXD_OPS_SETUP_H_
#define OUTBOXD_OPS_SETUP_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "ops/partition_upkeep.h"
#include "outbox/event.h"
#include "pg/connection.h"

namespace outboxd::ops {

struct SetupOptions {
  std::string table = "outbox";  // may be schema-qualified: "app.outbox"
  std::string publication = "outboxd";
  std::string slot = "outboxd";
  std::string inbox_table = "inbox";  // created in the outbox table's schema
  // The outbox's event columns (--id-column ...): a new table gets these names, an
  // existing one must have them (the created-at column may be missing).
  outbox::ColumnMapping columns;
  // Tables and index only, for the polling relay: works on wal_level = replica.
  bool poll_only = false;
  // Drop the slot (it must not be in use) and let `outboxd run` create it again and
  // first republish the outbox rows written after its last acknowledged position:
  // the recovery from wal_status "lost".
  bool recreate_slot = false;
  // A new outbox partitioned by range of the created-at column, one partition per
  // day, week or month (UTC), `partitions_ahead` of them after the current one and a
  // DEFAULT partition, so an insert never fails for want of one (cleanup keeps them
  // ahead: ops/partition_upkeep.h). The primary key becomes (seq, created-at) and the
  // id's UNIQUE (id, created-at): PostgreSQL enforces uniqueness per partition only.
  // An existing partitioned outbox gets its missing partitions; an existing plain
  // one is refused (docs/operations.md: moving to a partitioned outbox).
  PartitionInterval partition_by = PartitionInterval::kNone;
  // The same for a new inbox, by the event's created-at (evento_criado_em, which
  // joins message_id in the primary key: inbox/inbox.h says why a redelivery still
  // conflicts); cleanup drops its partitions whole after --inbox-retention. A flag of
  // its own: the inbox grows with what this database consumes, the outbox with what
  // it produces. An existing plain inbox is refused (docs/operations.md:
  // moving to a partitioned inbox).
  PartitionInterval inbox_partition_by = PartitionInterval::kNone;
  int partitions_ahead = 3;  // both tables
  // An existing outbox whose mapped columns allow NULL is refused (FailedPrecondition
  // naming the ALTER TABLE) instead of noted: the relay dead-letters a row with a NULL
  // there, and a NULL aggregate keeps no order.
  bool require_not_null = false;
  // Leave EXECUTE on pg_logical_emit_message with PUBLIC. Without it, a superuser's
  // setup takes it from PUBLIC and grants it to outboxd_emit's owner, so no role that
  // merely connects can put a message of any size in a WAL-only relay's stream (the
  // relay skips it, but libpq holds it whole first).
  bool keep_public_emit_message = false;
};

// What one Setup run created, e.g. {"table outbox", "index outbox_pendentes"}, and
// what it left out of an existing outbox table and which feature goes without it,
// one line each, e.g. "table dbz_outbox has no polling columns ...: outboxd poll
// cannot serve it (outboxd run can); setup never alters an existing table".
struct SetupReport {
  std::vector<std::string> created;
  std::vector<std::string> notes;
};

// The slot is created with an exported snapshot. When that snapshot shows outbox
// rows still pending (publicado_em IS NULL: left by a polling relay), the slot is
// dropped again and a backfill is requested instead: `outboxd run` creates the slot
// itself and publishes exactly those rows before streaming (no gap, no overlap).
//
// `conn` must be a regular (not a replication) connection whose role may create
// tables and publications and has REPLICATION (or is superuser; not needed with
// poll_only). Fails, before creating anything, with InvalidArgument for a name
// PostgreSQL would refuse or truncate (pg/identifier.h, outbox/names.h),
// PermissionDenied without REPLICATION, FailedPrecondition when wal_level is not
// logical (unless poll_only), when an existing outbox table lacks a mapped column, or
// when an existing slot cannot serve outboxd; and with FailedPrecondition when an
// existing publication cannot (the message says how to fix it).
absl::Status Setup(pg::Connection& conn, const SetupOptions& options,
                   SetupReport* report = nullptr);

}  // namespace outboxd::ops

#endif  // OUTBOXD_OPS_SETUP_H_
