// The writer API: applications add an event to the outbox inside *their* open
// transaction, on *their* libpq connection, so the business change and the event
// commit together or not at all (the whole point of the pattern). The relay then
// publishes the row; nothing here talks to Kafka.
//
//   OUTBOXD_RETURN_IF_ERROR(conn.Exec("BEGIN").status());
//   ... UPDATE pedidos SET status = 'confirmado' WHERE id = $1 AND status = 'pendente' ...
//   absl::StatusOr<std::string> id = outbox::Enqueue(
//       conn, {.aggregate_id = "pedido-77", .type = "pedido.confirmado",
//              .payload = R"({"pedidoId":"pedido-77","totalCentavos":1000})"});
//   if (!id.ok()) { (void)conn.Exec("ROLLBACK"); return id.status(); }
//   OUTBOXD_RETURN_IF_ERROR(conn.Exec("COMMIT").status());
#ifndef OUTBOXD_OUTBOX_WRITER_H_
#define OUTBOXD_OUTBOX_WRITER_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "outbox/event.h"
#include "pg/connection.h"

namespace outboxd::outbox {

struct NewEvent {
  std::string aggregate_id;  // the Kafka key: events of one aggregate stay in order
  std::string type;          // the default topic, e.g. "pedido.confirmado"
  std::string payload;       // JSON text: an object or an array
  // Message headers, e.g. {{"traceparent", "00-4bf9...-01"}}: names unique, none of
  // OwnHeaderNames (outbox/event.h), in any case. Enqueue writes them to the headers
  // column (WriterOptions::columns.headers), EmitEvent into the emitted message.
  std::vector<std::pair<std::string, std::string>> headers;
};

// Where the event goes. The defaults are the default schema (src/ops/setup.cc); rename them to match
// the relay's --table and --*-column flags.
struct WriterOptions {
  std::string table = "outbox";  // [schema.]name
  // id, aggregate_id, type and payload columns are used; headers (the relay's
  // --headers-column; empty: none) when an event has headers.
  ColumnMapping columns;
};

// Inserts one outbox row with a parameterised INSERT and returns the new event's id
// (the `id` header consumers deduplicate on). Errors, all leaving the caller to ROLLBACK:
//   FailedPrecondition  the connection is not inside a transaction block (BEGIN first:
//                       an event committed on its own defeats the pattern), or the
//                       transaction has already failed;
//   InvalidArgument     empty aggregate_id or type, payload not a JSON object/array,
//                       headers with an empty, repeated or outboxd's own name, or
//                       headers when options.columns.headers names no column
//                       (checked before the INSERT, so the transaction stays usable);
//   NotFound            the table or a column is missing (run `outboxd setup`);
//   others              as pg::Connection::ExecParams maps them.
absl::StatusOr<std::string> Enqueue(pg::Connection& conn, const NewEvent& event,
                                    const WriterOptions& options = {});

// The WAL-only outbox (outbox/emitted_event.h; the relay runs with --source messages
// or both): writes the event as a transactional logical decoding message through the
// outboxd_emit function `outboxd setup` installs in the schema of options.table,
// instead of a row. About half an INSERT's cost to the writer, but no table keeps the
// event: nothing can backfill it after a lost slot (docs/usage.md, "A WAL-only outbox").
// Returns the new event's id; the same checks and errors as Enqueue, NotFound naming
// `outboxd setup` when the function is missing, PermissionDenied naming the GRANT
// EXECUTE when the role may not call it (setup takes EXECUTE from PUBLIC; see
// docs/security.md). Only options.table's schema is used.
//
//   absl::StatusOr<std::string> id = outbox::EmitEvent(
//       conn, {.aggregate_id = "pedido-77", .type = "pedido.confirmado", .payload = "{}",
//              .headers = {{"traceparent", traceparent}}});
absl::StatusOr<std::string> EmitEvent(pg::Connection& conn, const NewEvent& event,
                                      const WriterOptions& options = {});

}  // namespace outboxd::outbox

#endif  // OUTBOXD_OUTBOX_WRITER_H_
