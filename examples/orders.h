// The example application's write side: confirming an order writes the order change
// and its `pedido.confirmado` event in one transaction (the seed article's
// `confirmarPedido`). An order that is not pending any more (a client's impatient
// retry) changes nothing and produces no second event.
//
//   OUTBOXD_RETURN_IF_ERROR(examples::EnsureOrdersTable(conn));
//   OUTBOXD_ASSIGN_OR_RETURN(std::optional<std::string> event_id,
//                            examples::ConfirmOrder(conn, "pedido-77"));
//   if (!event_id) { /* missing or already confirmed: no event */ }
#ifndef OUTBOXD_EXAMPLES_ORDERS_H_
#define OUTBOXD_EXAMPLES_ORDERS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "outbox/writer.h"
#include "pg/connection.h"

namespace outboxd::examples {

inline constexpr char kOrderConfirmed[] = "pedido.confirmado";

struct Order {
  std::string id;
  std::string customer_id;
  int64_t total_cents = 0;
};

// CREATE TABLE IF NOT EXISTS pedidos (the same table as examples/pedidos.sql).
absl::Status EnsureOrdersTable(pg::Connection& conn);

// Inserts a pending order unless one with this id exists; true when it inserted.
absl::StatusOr<bool> CreateOrderIfMissing(pg::Connection& conn, const Order& order);

// BEGIN; confirm the order only if it is still pending; if a row changed, Enqueue
// the event (payload: pedidoId, clienteId, totalCentavos, confirmadoEm, everything a
// consumer needs without calling back); COMMIT. Returns the event id, or std::nullopt
// when no row changed (no such order, or already confirmed): rolled back, no event.
// Any error, including a failed COMMIT, rolls back both; `conn` must not be in a
// transaction.
absl::StatusOr<std::optional<std::string>> ConfirmOrder(pg::Connection& conn,
                                                        const std::string& order_id,
                                                        const outbox::WriterOptions& writer = {});

}  // namespace outboxd::examples

#endif  // OUTBOXD_EXAMPLES_ORDERS_H_
