// Enqueue checks what it can before touching the database (transaction state,
// required fields, payload shape), because a failed statement aborts the caller's
// whole transaction; only then runs one parameterised INSERT ... RETURNING id.
#include "outbox/writer.h"

#include <libpq-fe.h>

#include <optional>
#include <vector>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "outbox/payload_check.h"

namespace outboxd::outbox {
namespace {

absl::Status CheckInTransaction(pg::Connection& conn) {
  switch (PQtransactionStatus(conn.get())) {
    case PQTRANS_INTRANS:
      return absl::OkStatus();
    case PQTRANS_IDLE:
      return absl::FailedPreconditionError(
          "outbox::Enqueue needs an open transaction on the connection: run BEGIN first, "
          "then the business change, Enqueue and COMMIT (both or neither)");
    case PQTRANS_INERROR:
      return absl::FailedPreconditionError(
          "outbox::Enqueue: the transaction has already failed; ROLLBACK it");
    case PQTRANS_ACTIVE:
      return absl::FailedPreconditionError(
          "outbox::Enqueue: the connection is busy with another command");
    default:
      return absl::UnavailableError("outbox::Enqueue: the connection to PostgreSQL is broken");
  }
}

absl::Status CheckEvent(const NewEvent& event) {
  if (event.aggregate_id.empty() || event.type.empty()) {
    return absl::InvalidArgumentError(
        "outbox::Enqueue: aggregate_id and type must not be empty (they are the Kafka key and "
        "topic)");
  }
  // The relay dead-letters anything but an object or array; refusing it here keeps a
  // poison event from ever being committed. One parser per thread: it keeps its buffers.
  thread_local PayloadChecker checker;
  absl::Status payload = checker.Check(event.payload);
  if (!payload.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("outbox::Enqueue: ", payload.message()));
  }
  return absl::OkStatus();
}

// "schema.name" or "name", each part quoted.
std::string QuotedTable(pg::Connection& conn, const std::string& table) {
  const size_t dot = table.rfind('.');
  if (dot == std::string::npos) return conn.QuoteIdentifier(table);
  return absl::StrCat(conn.QuoteIdentifier(table.substr(0, dot)), ".",
                      conn.QuoteIdentifier(table.substr(dot + 1)));
}

std::string InsertSql(pg::Connection& conn, const WriterOptions& options) {
  const ColumnMapping& c = options.columns;
  return absl::StrCat("INSERT INTO ", QuotedTable(conn, options.table), " (",
                      conn.QuoteIdentifier(c.aggregate_id), ", ", conn.QuoteIdentifier(c.type),
                      ", ", conn.QuoteIdentifier(c.payload), ") VALUES ($1, $2, $3) RETURNING ",
                      conn.QuoteIdentifier(c.id), "::text");
}

// Keeps the code and the SQLSTATE payload; says how to fix a missing table/column.
absl::Status InsertError(const absl::Status& status, const WriterOptions& options) {
  std::string message =
      absl::StrCat("cannot add the event to ", options.table, ": ", status.message());
  if (status.code() == absl::StatusCode::kNotFound) {
    absl::StrAppend(&message, " (run `outboxd setup`, or set WriterOptions to the table's names)");
  }
  absl::Status out(status.code(), message);
  status.ForEachPayload(
      [&out](absl::string_view url, const absl::Cord& payload) { out.SetPayload(url, payload); });
  return out;
}

}  // namespace

absl::StatusOr<std::string> Enqueue(pg::Connection& conn, const NewEvent& event,
                                    const WriterOptions& options) {
  if (absl::Status s = CheckInTransaction(conn); !s.ok()) return s;
  if (absl::Status s = CheckEvent(event); !s.ok()) return s;
  const std::vector<std::optional<std::string>> params = {event.aggregate_id, event.type,
                                                          event.payload};
  absl::StatusOr<pg::Result> inserted = conn.ExecParams(InsertSql(conn, options), params);
  if (!inserted.ok()) return InsertError(inserted.status(), options);
  if (inserted->rows() != 1) {
    return absl::InternalError(
        absl::StrCat("INSERT INTO ", options.table, " returned ", inserted->rows(), " rows"));
  }
  return std::string(inserted->Get(0, 0));
}

}  // namespace outboxd::outbox
