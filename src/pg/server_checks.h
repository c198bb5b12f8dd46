// Checks that the server and the role can do logical replication, on a regular
// connection: `outboxd run`'s preflight (relay/preflight.h) and `outboxd setup`
// (ops/setup.h, before it creates anything) both start with them. Each failure is
// one line naming the problem and the fix.
//
//   OUTBOXD_RETURN_IF_ERROR(pg::CheckWalLevel(conn));
//   OUTBOXD_RETURN_IF_ERROR(pg::CheckReplicationPrivilege(conn));
#ifndef OUTBOXD_PG_SERVER_CHECKS_H_
#define OUTBOXD_PG_SERVER_CHECKS_H_

#include "absl/status/status.h"
#include "pg/connection.h"

namespace outboxd::pg {

// FailedPrecondition: "wal_level is replica; set wal_level = logical in ...".
absl::Status CheckWalLevel(Connection& conn);
// PermissionDenied: "role app lacks REPLICATION: ALTER ROLE app REPLICATION".
absl::Status CheckReplicationPrivilege(Connection& conn);

}  // namespace outboxd::pg

#endif  // OUTBOXD_PG_SERVER_CHECKS_H_
