#include "pg/server_checks.h"

#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace outboxd::pg {

absl::Status CheckWalLevel(Connection& conn) {
  OUTBOXD_ASSIGN_OR_RETURN(Result result, conn.Exec("SHOW wal_level"));
  const std::string_view level = result.Get(0, 0);
  if (level == "logical") return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("wal_level is ", std::string(level),
                   "; set wal_level = logical in postgresql.conf and restart PostgreSQL"));
}

absl::Status CheckReplicationPrivilege(Connection& conn) {
  // Amazon RDS grants replication through membership of rds_replication instead of
  // the REPLICATION attribute.
  OUTBOXD_ASSIGN_OR_RETURN(
      Result result,
      conn.Exec("SELECT r.rolsuper OR r.rolreplication OR EXISTS (SELECT 1 FROM pg_roles g "
                "WHERE g.rolname = 'rds_replication' AND pg_has_role(r.oid, g.oid, 'member')) "
                "FROM pg_roles r WHERE r.rolname = current_user"));
  if (result.rows() == 1 && result.Get(0, 0) == "t") return absl::OkStatus();
  const std::string user = conn.user();
  return absl::PermissionDeniedError(absl::StrCat("role ", user, " lacks REPLICATION: ALTER ROLE ",
                                                  SqlIdentifier(user), " REPLICATION"));
}

}  // namespace outboxd::pg
