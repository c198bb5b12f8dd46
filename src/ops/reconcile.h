// Reconciliation, the safety net of the pattern: business rows that should have an
// event (the --expect query, e.g. orders confirmed today) but have no outbox row of
// that type created within the window. Each one is a code path that bypassed the
// outbox, such as a manual fix script updating an order outside ConfirmOrder.
//
//   ReconcileOptions opts{
//       .expect_sql = "SELECT id FROM pedidos WHERE status = 'confirmado' "
//                     "AND confirmado_em >= $1",
//       .type = "pedido.confirmado", .since = absl::Hours(24)};
//   OUTBOXD_ASSIGN_OR_RETURN(ReconcileReport report, Reconcile(conn, opts));
//   for (const std::string& id : report.missing) std::cout << id << "\n";
#ifndef OUTBOXD_OPS_RECONCILE_H_
#define OUTBOXD_OPS_RECONCILE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "outbox/event.h"
#include "pg/connection.h"

namespace outboxd::ops {

struct ReconcileOptions {
  // One SELECT whose first column is the aggregate id (compared as text). It may use
  // $1, the window start (timestamptz, now() - since), to pick the same window.
  std::string expect_sql;
  std::string type;  // the event type that each expected row should have
  absl::Duration since = absl::Hours(24);
  std::string table = "outbox";   // [schema.]name
  outbox::ColumnMapping columns;  // aggregate_id, type and created_at are used
};

struct ReconcileReport {
  std::string window_start;          // as PostgreSQL printed it
  int64_t expected = 0;              // distinct aggregate ids the query returned
  std::vector<std::string> missing;  // sorted, distinct
};

// Runs in a READ ONLY, REPEATABLE READ transaction: the expect query cannot change
// data, and the count and the list see one snapshot. InvalidArgument for empty
// options or bad SQL (the server's message, e.g. a syntax error or "cannot execute
// UPDATE in a read-only transaction"); NotFound for a missing table or column.
absl::StatusOr<ReconcileReport> Reconcile(pg::Connection& conn, const ReconcileOptions& options);

}  // namespace outboxd::ops

#endif  // OUTBOXD_OPS_RECONCILE_H_
