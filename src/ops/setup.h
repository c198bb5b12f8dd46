// `outboxd setup`: prepares a database for the relay. Creates, where missing, the
// outbox and inbox tables (the schema in docs/architecture.md), the dead-letter and relay-state
// tables beside the outbox, the publication of the outbox's inserts and the pgoutput
// logical replication slot. Idempotent: a second run changes nothing and succeeds.
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
#include "pg/connection.h"

namespace outboxd::ops {

struct SetupOptions {
  std::string table = "outbox";  // may be schema-qualified: "app.outbox"
  std::string publication = "outboxd";
  std::string slot = "outboxd";
  std::string inbox_table = "inbox";  // created in the outbox table's schema
  // Drop the slot (it must not be in use) and let `outboxd run` create it again and
  // first republish the outbox rows written after its last acknowledged position:
  // the recovery from wal_status "lost".
  bool recreate_slot = false;
};

// What one Setup run created, e.g. {"table outbox", "index outbox_pendentes"}.
struct SetupReport {
  std::vector<std::string> created;
};

// The slot is created with an exported snapshot. When that snapshot shows outbox
// rows still pending (publicado_em IS NULL: left by a polling relay), the slot is
// dropped again and a backfill is requested instead: `outboxd run` creates the slot
// itself and publishes exactly those rows before streaming (no gap, no overlap).
//
// `conn` must be a regular (not a replication) connection whose role may create
// tables and publications and has REPLICATION (or is superuser). Fails, before
// creating anything, with InvalidArgument for a name PostgreSQL would refuse or
// truncate (pg/identifier.h, outbox/names.h), PermissionDenied without REPLICATION,
// FailedPrecondition when wal_level is not logical or an existing slot cannot serve
// outboxd; and with FailedPrecondition when an existing publication cannot (the
// message says how to fix it).
absl::Status Setup(pg::Connection& conn, const SetupOptions& options,
                   SetupReport* report = nullptr);

}  // namespace outboxd::ops

#endif  // OUTBOXD_OPS_SETUP_H_
