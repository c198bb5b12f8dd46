// Enqueue checks what it can before touching the database (transaction state,
// required fields, payload shape), because a failed statement aborts the caller's
// whole transaction; only then runs one parameterised INSERT ... RETURNING id.
#include "outbox/writer.h"

#include <libpq-fe.h>

#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/annotate.h"
#include "base/status_macros.h"
#include "outbox/emitted_event.h"
#include "outbox/payload_check.h"
#include "pg/table_name.h"

namespace outboxd::outbox {
namespace {

absl::Status CheckInTransaction(pg::Connection& conn, const char* api) {
  switch (PQtransactionStatus(conn.get())) {
    case PQTRANS_INTRANS:
      return absl::OkStatus();
    case PQTRANS_IDLE:
      return absl::FailedPreconditionError(
          absl::StrCat(api,
                       " needs an open transaction on the connection: run BEGIN first, "
                       "then the business change, the event and COMMIT (both or neither)"));
    case PQTRANS_INERROR:
      return absl::FailedPreconditionError(
          absl::StrCat(api, ": the transaction has already failed; ROLLBACK it"));
    case PQTRANS_ACTIVE:
      return absl::FailedPreconditionError(
          absl::StrCat(api, ": the connection is busy with another command"));
    default:
      return absl::UnavailableError(absl::StrCat(api, ": the connection to PostgreSQL is broken"));
  }
}

absl::Status CheckEvent(const NewEvent& event, const char* api) {
  if (event.aggregate_id.empty() || event.type.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(api,
                     ": aggregate_id and type must not be empty (they are the Kafka key and "
                     "topic)"));
  }
  // The relay dead-letters anything but an object or array; refusing it here keeps a
  // poison event from ever being committed. One parser per thread: it keeps its buffers.
  thread_local PayloadChecker checker;
  absl::Status payload = checker.Check(event.payload);
  if (!payload.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(api, ": ", payload.message()));
  }
  return absl::OkStatus();
}

// Built on the client, so a bad name fails before the caller's transaction is touched.
absl::StatusOr<std::string> InsertSql(pg::Connection& conn, const WriterOptions& options) {
  const ColumnMapping& c = options.columns;
  OUTBOXD_ASSIGN_OR_RETURN(const pg::TableName table, pg::TableName::Parse(options.table));
  OUTBOXD_ASSIGN_OR_RETURN(std::string aggregate_id, conn.QuoteIdentifier(c.aggregate_id));
  OUTBOXD_ASSIGN_OR_RETURN(std::string type, conn.QuoteIdentifier(c.type));
  OUTBOXD_ASSIGN_OR_RETURN(std::string payload, conn.QuoteIdentifier(c.payload));
  OUTBOXD_ASSIGN_OR_RETURN(std::string id, conn.QuoteIdentifier(c.id));
  return absl::StrCat("INSERT INTO ", table.quoted, " (", aggregate_id, ", ", type, ", ", payload,
                      ") VALUES ($1, $2, $3) RETURNING ", id, "::text");
}

// Keeps the code and the SQLSTATE payload; says how to fix a missing table/column.
absl::Status InsertError(const absl::Status& status, const WriterOptions& options) {
  return Annotate(status, absl::StrCat("cannot add the event to ", options.table, ": "),
                  status.code() == absl::StatusCode::kNotFound
                      ? " (run `outboxd setup`, or set WriterOptions to the table's names)"
                      : "");
}

// How to fix what keeps a role from calling outboxd_emit.
std::string EmitHint(const absl::Status& status, const pg::TableName& function) {
  if (status.code() == absl::StatusCode::kNotFound)
    return " (run `outboxd setup`, which installs it)";
  if (status.code() != absl::StatusCode::kPermissionDenied) return "";
  return absl::StrCat(" (the outbox's owner grants it: GRANT EXECUTE ON FUNCTION ",
                      function.Display(), "(text, text, jsonb) TO this role)");
}

}  // namespace

absl::StatusOr<std::string> Enqueue(pg::Connection& conn, const NewEvent& event,
                                    const WriterOptions& options) {
  if (absl::Status s = CheckInTransaction(conn, "outbox::Enqueue"); !s.ok()) return s;
  if (absl::Status s = CheckEvent(event, "outbox::Enqueue"); !s.ok()) return s;
  const std::vector<std::optional<std::string>> params = {event.aggregate_id, event.type,
                                                          event.payload};
  absl::StatusOr<std::string> sql = InsertSql(conn, options);
  if (!sql.ok()) return sql.status();
  absl::StatusOr<pg::Result> inserted = conn.ExecParams(*sql, params);
  if (!inserted.ok()) return InsertError(inserted.status(), options);
  if (inserted->rows() != 1) {
    return absl::InternalError(
        absl::StrCat("INSERT INTO ", options.table, " returned ", inserted->rows(), " rows"));
  }
  return std::string(inserted->Get(0, 0));
}

absl::StatusOr<std::string> EmitEvent(pg::Connection& conn, const NewEvent& event,
                                      const WriterOptions& options) {
  if (absl::Status s = CheckInTransaction(conn, "outbox::EmitEvent"); !s.ok()) return s;
  if (absl::Status s = CheckEvent(event, "outbox::EmitEvent"); !s.ok()) return s;
  OUTBOXD_ASSIGN_OR_RETURN(const pg::TableName table, pg::TableName::Parse(options.table));
  const pg::TableName function = table.Sibling(std::string(kEmitFunction));
  absl::StatusOr<pg::Result> emitted =
      conn.ExecParams(absl::StrCat("SELECT ", function.quoted, "($1, $2, $3::jsonb)::text"),
                      {event.aggregate_id, event.type, event.payload});
  if (!emitted.ok()) {
    return Annotate(emitted.status(),
                    absl::StrCat("cannot emit the event through ", function.Display(), ": "),
                    EmitHint(emitted.status(), function));
  }
  if (emitted->rows() != 1) {
    return absl::InternalError(
        absl::StrCat(function.Display(), " returned ", emitted->rows(), " rows"));
  }
  return std::string(emitted->Get(0, 0));
}

}  // namespace outboxd::outbox
