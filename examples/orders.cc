// ConfirmOrder follows the seed's confirmarPedido step by step. The payload is built
// by PostgreSQL (jsonb_build_object in RETURNING) from the row just updated, so it is
// exactly what was committed and needs no JSON escaping here.
#include "examples/orders.h"

#include <libpq-fe.h>

#include <string_view>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace outboxd::examples {
namespace {

constexpr char kConfirmSql[] = R"sql(
UPDATE pedidos SET status = 'confirmado', confirmado_em = now()
 WHERE id = $1 AND status = 'pendente'
RETURNING jsonb_build_object('pedidoId', id, 'clienteId', cliente_id,
                             'totalCentavos', total_centavos, 'confirmadoEm', confirmado_em)::text
)sql";

void Rollback(pg::Connection& conn) {
  if (PQtransactionStatus(conn.get()) != PQTRANS_IDLE) (void)conn.Exec("ROLLBACK");
}

// The order change and its event; the caller owns BEGIN/COMMIT/ROLLBACK.
absl::StatusOr<std::optional<std::string>> ConfirmInTransaction(
    pg::Connection& conn, const std::string& order_id, const outbox::WriterOptions& writer) {
  OUTBOXD_ASSIGN_OR_RETURN(pg::Result updated, conn.ExecParams(kConfirmSql, {order_id}));
  if (updated.rows() == 0) return std::nullopt;  // missing or no longer pending
  OUTBOXD_ASSIGN_OR_RETURN(std::string event_id,
                           outbox::Enqueue(conn,
                                           {.aggregate_id = order_id,
                                            .type = kOrderConfirmed,
                                            .payload = std::string(updated.Get(0, 0))},
                                           writer));
  return event_id;
}

// PostgreSQL answers COMMIT on a transaction that already failed with the tag
// "ROLLBACK" and no error; treat that as the failure it is.
absl::Status Commit(pg::Connection& conn) {
  OUTBOXD_ASSIGN_OR_RETURN(pg::Result committed, conn.Exec("COMMIT"));
  if (std::string_view(PQcmdStatus(committed.get())) != "COMMIT") {
    return absl::AbortedError("the transaction was rolled back at COMMIT");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status EnsureOrdersTable(pg::Connection& conn) {
  return conn
      // client_min_messages: no "already exists, skipping" NOTICE on every start.
      .Exec(R"sql(SET client_min_messages = warning;
CREATE TABLE IF NOT EXISTS pedidos (
  id             text PRIMARY KEY,
  cliente_id     text        NOT NULL,
  total_centavos bigint      NOT NULL,
  status         text        NOT NULL DEFAULT 'pendente',
  confirmado_em  timestamptz
);
RESET client_min_messages)sql")
      .status();
}

absl::StatusOr<bool> CreateOrderIfMissing(pg::Connection& conn, const Order& order) {
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::Result inserted,
      conn.ExecParams("INSERT INTO pedidos (id, cliente_id, total_centavos) VALUES ($1, $2, $3) "
                      "ON CONFLICT (id) DO NOTHING",
                      {order.id, order.customer_id, absl::StrCat(order.total_cents)}));
  return inserted.AffectedRows() == 1;
}

absl::StatusOr<std::optional<std::string>> ConfirmOrder(pg::Connection& conn,
                                                        const std::string& order_id,
                                                        const outbox::WriterOptions& writer) {
  if (PQtransactionStatus(conn.get()) != PQTRANS_IDLE) {
    return absl::FailedPreconditionError("ConfirmOrder runs its own transaction");
  }
  OUTBOXD_RETURN_IF_ERROR(conn.Exec("BEGIN").status());
  absl::StatusOr<std::optional<std::string>> event_id =
      ConfirmInTransaction(conn, order_id, writer);
  if (!event_id.ok() || !event_id->has_value()) {
    Rollback(conn);  // nothing changed, or half a change: neither may commit
    return event_id;
  }
  if (absl::Status committed = Commit(conn); !committed.ok()) {
    Rollback(conn);
    return committed;
  }
  return event_id;
}

}  // namespace outboxd::examples
