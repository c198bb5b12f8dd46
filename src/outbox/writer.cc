// Enqueue checks what it can before touching the database (transaction state,
// required fields, payload shape), because a failed statement aborts the caller's
// whole transaction; only then runs one parameterised INSERT ... RETURNING id.
#include "outbox/writer.h"

#include <libpq-fe.h>

#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/annotate.h"
#include "base/json_string.h"
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

absl::Status CheckHeaders(const NewEvent& event, const char* api);

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
  return CheckHeaders(event, api);
}

// What the headers column's checks and outboxd_emit would refuse, refused before the
// statement (which would abort the caller's transaction).
absl::Status CheckHeaders(const NewEvent& event, const char* api) {
  for (size_t i = 0; i < event.headers.size(); ++i) {
    const std::string& name = event.headers[i].first;
    absl::string_view why;
    if (name.empty()) {
      why = "has an empty name";
    } else if (IsOwnHeader(name)) {
      why = "is one of outboxd's own headers (in any case); rename it";
    } else {
      for (size_t j = 0; j < i; ++j) {
        if (event.headers[j].first == name) why = "is given twice";
      }
    }
    if (!why.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(api, ": header \"", name, "\" ", why));
    }
  }
  return absl::OkStatus();
}

// The headers as a JSON object's text, or nullopt (SQL NULL) when there are none.
std::optional<std::string> HeadersJson(const NewEvent& event) {
  if (event.headers.empty()) return std::nullopt;
  std::string json = "{";
  for (const auto& [name, value] : event.headers) {
    if (json.size() > 1) json.push_back(',');
    AppendJsonString(json, name);
    json.push_back(':');
    AppendJsonString(json, value);
  }
  json.push_back('}');
  return json;
}

// Built on the client, so a bad name fails before the caller's transaction is touched.
absl::StatusOr<std::string> InsertSql(pg::Connection& conn, const WriterOptions& options,
                                      const NewEvent& event) {
  const ColumnMapping& c = options.columns;
  std::string headers;  // ", <column>" when the event has headers
  if (!event.headers.empty()) {
    if (c.headers.empty()) {
      return absl::InvalidArgumentError(
          "outbox::Enqueue: the event has headers but WriterOptions::columns.headers names no "
          "column; set it to the relay's --headers-column");
    }
    OUTBOXD_ASSIGN_OR_RETURN(std::string column, conn.QuoteIdentifier(c.headers));
    headers = absl::StrCat(", ", column);
  }
  OUTBOXD_ASSIGN_OR_RETURN(const pg::TableName table, pg::TableName::Parse(options.table));
  OUTBOXD_ASSIGN_OR_RETURN(std::string aggregate_id, conn.QuoteIdentifier(c.aggregate_id));
  OUTBOXD_ASSIGN_OR_RETURN(std::string type, conn.QuoteIdentifier(c.type));
  OUTBOXD_ASSIGN_OR_RETURN(std::string payload, conn.QuoteIdentifier(c.payload));
  OUTBOXD_ASSIGN_OR_RETURN(std::string id, conn.QuoteIdentifier(c.id));
  return absl::StrCat("INSERT INTO ", table.quoted, " (", aggregate_id, ", ", type, ", ", payload,
                      headers, ") VALUES ($1, $2, $3", headers.empty() ? "" : ", $4::jsonb",
                      ") RETURNING ", id, "::text");
}

// Keeps the code and the SQLSTATE payload; says how to fix a missing table/column.
absl::Status InsertError(const absl::Status& status, const WriterOptions& options) {
  return Annotate(status, absl::StrCat("cannot add the event to ", options.table, ": "),
                  status.code() == absl::StatusCode::kNotFound
                      ? " (run `outboxd setup`, or set WriterOptions to the table's names)"
                      : "");
}

// How to fix what keeps a role from calling outboxd_emit.
std::string EmitHint(const absl::Status& status, const pg::TableName& function,
                     std::string_view args) {
  if (status.code() == absl::StatusCode::kNotFound)
    return " (run `outboxd setup`, which installs it)";
  if (status.code() != absl::StatusCode::kPermissionDenied) return "";
  return absl::StrCat(" (the outbox's owner grants it: GRANT EXECUTE ON FUNCTION ",
                      function.Display(), absl::string_view(args.data(), args.size()),
                      " TO this role)");
}

}  // namespace

absl::StatusOr<std::string> Enqueue(pg::Connection& conn, const NewEvent& event,
                                    const WriterOptions& options) {
  if (absl::Status s = CheckInTransaction(conn, "outbox::Enqueue"); !s.ok()) return s;
  if (absl::Status s = CheckEvent(event, "outbox::Enqueue"); !s.ok()) return s;
  std::vector<std::optional<std::string>> params = {event.aggregate_id, event.type, event.payload};
  if (!event.headers.empty()) params.push_back(HeadersJson(event));
  absl::StatusOr<std::string> sql = InsertSql(conn, options, event);
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
  // Without headers the three-argument overload, as before version 3 (a role granted
  // only that one keeps working).
  absl::StatusOr<pg::Result> emitted =
      event.headers.empty()
          ? conn.ExecParams(absl::StrCat("SELECT ", function.quoted, "($1, $2, $3::jsonb)::text"),
                            {event.aggregate_id, event.type, event.payload})
          : conn.ExecParams(
                absl::StrCat("SELECT ", function.quoted, "($1, $2, $3::jsonb, $4::jsonb)::text"),
                {event.aggregate_id, event.type, event.payload, HeadersJson(event)});
  if (!emitted.ok()) {
    return Annotate(emitted.status(),
                    absl::StrCat("cannot emit the event through ", function.Display(), ": "),
                    EmitHint(emitted.status(), function,
                             event.headers.empty() ? kEmitArgs : kEmitArgsWithHeaders));
  }
  if (emitted->rows() != 1) {
    return absl::InternalError(
        absl::StrCat(function.Display(), " returned ", emitted->rows(), " rows"));
  }
  return std::string(emitted->Get(0, 0));
}

}  // namespace outboxd::outbox
