// The example billing service: one invoice (`faturas` row) per `pedido.confirmado`
// event. `faturas` has no unique constraint on pedido_id on purpose: the inbox (see
// src/inbox/) is what makes a redelivered event bill nothing twice, and the tests
// prove it with this table.
//
//   OUTBOXD_RETURN_IF_ERROR(examples::EnsureInvoicesTable(conn));
//   inbox::Handler bill = [](pg::Connection& c, const inbox::Message& m) {
//     return examples::IssueInvoice(c, m).status();
//   };
#ifndef OUTBOXD_EXAMPLES_BILLING_H_
#define OUTBOXD_EXAMPLES_BILLING_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "inbox/inbox.h"
#include "pg/connection.h"

namespace outboxd::examples {

// CREATE TABLE IF NOT EXISTS faturas (the same table as examples/pedidos.sql).
absl::Status EnsureInvoicesTable(pg::Connection& conn);

// Writes the invoice for one `pedido.confirmado` message on `conn` (inside the inbox
// transaction) and returns its id. The message id is stored with it: it is the
// idempotency key a call to an external invoicing API would carry.
absl::StatusOr<int64_t> IssueInvoice(pg::Connection& conn, const inbox::Message& message);

}  // namespace outboxd::examples

#endif  // OUTBOXD_EXAMPLES_BILLING_H_
