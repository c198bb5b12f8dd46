// IssueInvoice lets PostgreSQL read the event's JSON: the invoice is built from the
// payload alone, as the seed asks (no call back to the order service).
#include "examples/billing.h"

#include "absl/strings/numbers.h"
#include "base/status_macros.h"

namespace outboxd::examples {

absl::Status EnsureInvoicesTable(pg::Connection& conn) {
  return conn
      // client_min_messages: no "already exists, skipping" NOTICE on every start.
      .Exec(R"sql(SET client_min_messages = warning;
CREATE TABLE IF NOT EXISTS faturas (
  id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  pedido_id      text        NOT NULL,
  cliente_id     text,
  total_centavos bigint      NOT NULL,
  message_id     uuid        NOT NULL,
  emitida_em     timestamptz NOT NULL DEFAULT now()
);
RESET client_min_messages)sql")
      .status();
}

absl::StatusOr<int64_t> IssueInvoice(pg::Connection& conn, const inbox::Message& message) {
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::Result invoice,
      conn.ExecParams("INSERT INTO faturas (pedido_id, cliente_id, total_centavos, message_id) "
                      "SELECT e->>'pedidoId', e->>'clienteId', (e->>'totalCentavos')::bigint, $2 "
                      "FROM (SELECT $1::jsonb AS e) event RETURNING id",
                      {message.value, message.id}));
  int64_t id = 0;
  if (invoice.rows() != 1 || !absl::SimpleAtoi(std::string(invoice.Get(0, 0)), &id)) {
    return absl::InternalError("INSERT INTO faturas returned no id");
  }
  return id;
}

}  // namespace outboxd::examples
