// Status propagation helpers. The pinned abseil (20220623) has no RETURN_IF_ERROR,
// so we keep these two small macros here.
//
//   OUTBOXD_RETURN_IF_ERROR(conn.Exec("SELECT 1").status());
//   OUTBOXD_ASSIGN_OR_RETURN(auto result, conn.Exec("SELECT 1"));
#ifndef OUTBOXD_BASE_STATUS_MACROS_H_
#define OUTBOXD_BASE_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace outboxd {

// Errors that retrying cannot fix: bad configuration, a missing table, column,
// publication or slot, a missing privilege, a refused login. The CLI exits 2 on
// them; the relays stop instead of reconnecting.
inline bool IsConfigurationError(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kAlreadyExists:
      return true;
    default:
      return false;
  }
}

}  // namespace outboxd

#define OUTBOXD_RETURN_IF_ERROR(expr)                  \
  do {                                                 \
    ::absl::Status _outboxd_status = (expr);           \
    if (!_outboxd_status.ok()) return _outboxd_status; \
  } while (0)

#define OUTBOXD_STATUS_CONCAT_INNER(a, b) a##b
#define OUTBOXD_STATUS_CONCAT(a, b) OUTBOXD_STATUS_CONCAT_INNER(a, b)

#define OUTBOXD_ASSIGN_OR_RETURN(lhs, expr) \
  OUTBOXD_ASSIGN_OR_RETURN_IMPL(OUTBOXD_STATUS_CONCAT(_outboxd_statusor_, __LINE__), lhs, expr)

#define OUTBOXD_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return std::move(tmp).status();      \
  lhs = std::move(tmp).value()

#endif  // OUTBOXD_BASE_STATUS_MACROS_H_
