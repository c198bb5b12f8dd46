// Checks, on a regular connection, that a database can serve `outboxd run` before
// the relay streams: a relay on a table without the type column would otherwise
// stream until the first outbox Relation message arrives and only then fail.
// Each failure is one line naming the problem and the fix, with a code the CLI
// maps to exit 2 (FailedPrecondition, NotFound, PermissionDenied).
//
//   OUTBOXD_ASSIGN_OR_RETURN(pg::Connection conn, pg::Connection::Open(options.conninfo));
//   OUTBOXD_RETURN_IF_ERROR(Preflight(conn, options));
//   // e.g. "publication outboxd does not exist; run outboxd setup, or name it with
//   //       --publication"
#ifndef OUTBOXD_RELAY_PREFLIGHT_H_
#define OUTBOXD_RELAY_PREFLIGHT_H_

#include "absl/status/status.h"
#include "pg/connection.h"
#include "relay/relay_options.h"

namespace outboxd::relay {

// What Preflight found that is not an error: a table without its created-at column
// (a Debezium outbox table) is relayed, and the caller says once what goes without
// it (outbox::MissingCreatedAtNote) and clears options.columns.created_at.
struct PreflightFindings {
  bool created_at_missing = false;
};

// In order: a primary (not a standby), wal_level and the role's REPLICATION privilege
// (pg/server_checks.h), the table, the mapped columns (all but the created-at one
// required), the dead-letter table beside it, the publication (exists, publishes the
// table's inserts and the mapped columns), the slot (exists, logical, pgoutput, this
// database), and with --source messages|both that max_slot_wal_keep_size is -1 (or
// --allow-wal-only-with-slot-limit). Reads catalogs only; changes nothing.
absl::Status Preflight(pg::Connection& conn, const RelayOptions& options,
                       PreflightFindings* findings = nullptr);

// The names: --table, the column flags, --publication and --slot (pg/identifier.h),
// checked by Preflight first; InvalidArgument naming the flag.
absl::Status CheckNames(const RelayOptions& options);

// Unavailable (retried) when `conn` reached a standby: the slot is never used there,
// even where PostgreSQL 17 could keep a synchronized copy of it.
absl::Status CheckPrimary(pg::Connection& conn);

// The error for a slot that does not exist, NotFound naming the fix: `outboxd setup`
// on a fresh install; when the relay-state table records positions for the slot (it
// existed: a failover to a server without it), --recreate-missing-slot or
// `outboxd setup --recreate-slot`.
absl::Status MissingSlotError(pg::Connection& conn, const RelayOptions& options);

}  // namespace outboxd::relay

#endif  // OUTBOXD_RELAY_PREFLIGHT_H_
