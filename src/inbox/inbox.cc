// Process is the seed article's `consumir`: BEGIN, INSERT the id ON CONFLICT DO
// NOTHING, the handler only if a row went in, COMMIT; any error rolls back both.
#include "inbox/inbox.h"

#include <libpq-fe.h>

#include <cctype>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/annotate.h"
#include "base/status_macros.h"
#include "pg/table_name.h"

namespace outboxd::inbox {
namespace {

// Ends the transaction without masking the error that made us end it. Nothing to do
// when PostgreSQL already ended it (a failed COMMIT).
void Rollback(pg::Connection& conn) {
  if (PQtransactionStatus(conn.get()) != PQTRANS_IDLE) (void)conn.Exec("ROLLBACK");
}

// The query that tells the inbox's key: does it have the created-at column?
absl::StatusOr<std::string> KeySql(pg::Connection& conn, const InboxOptions& options) {
  OUTBOXD_ASSIGN_OR_RETURN(const pg::TableName table, pg::TableName::Parse(options.table));
  OUTBOXD_ASSIGN_OR_RETURN(std::string regclass, conn.QuoteLiteral(table.quoted));
  OUTBOXD_ASSIGN_OR_RETURN(std::string column, conn.QuoteLiteral(options.created_at_column));
  return absl::StrCat("SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass(",
                      regclass, ") AND attname = ", column, " AND NOT attisdropped)");
}

InboxKey KeyOf(const pg::Result& r) {
  return r.Get(0, 0) == "t" ? InboxKey::kIdAndCreatedAt : InboxKey::kId;
}

// BEGIN, and with InboxKey::kDetect the look-up of the inbox's key in the same round
// trip (the server still plans the catalog query each time: DetectKey once saves it).
absl::StatusOr<InboxKey> Begin(pg::Connection& conn, const InboxOptions& options) {
  if (options.key != InboxKey::kDetect) {
    OUTBOXD_RETURN_IF_ERROR(conn.Exec("BEGIN").status());
    return options.key;
  }
  OUTBOXD_ASSIGN_OR_RETURN(std::string sql, KeySql(conn, options));
  OUTBOXD_ASSIGN_OR_RETURN(pg::Result r, conn.Exec(absl::StrCat("BEGIN; ", sql)));
  return KeyOf(r);
}

// How a message is marked: its id alone (a plain inbox), the id and its created-at,
// or the id and kUndatedCreatedAt when it carries none.
enum class MarkKind { kId, kIdAndCreatedAt, kIdUndated };

// The INSERT of the mark ($1 the id, $2 the created-at). kIdUndated: the message is a
// backfilled row of an outbox table without a created-at column, whose delivery from
// the stream (before a slot was recreated, say) carried the commit time as created_at
// instead (outbox/event.h), so a mark of the id in any partition makes it a
// duplicate. Such messages are rare, so probing every partition's key is cheap.
absl::StatusOr<std::string> MarkSql(pg::Connection& conn, const InboxOptions& options,
                                    MarkKind kind) {
  OUTBOXD_ASSIGN_OR_RETURN(const pg::TableName table, pg::TableName::Parse(options.table));
  OUTBOXD_ASSIGN_OR_RETURN(std::string id_column, conn.QuoteIdentifier(options.id_column));
  if (kind == MarkKind::kId) {
    return absl::StrCat("INSERT INTO ", table.quoted, " (", id_column,
                        ") VALUES ($1) ON CONFLICT DO NOTHING");
  }
  OUTBOXD_ASSIGN_OR_RETURN(std::string created_at_column,
                           conn.QuoteIdentifier(options.created_at_column));
  const std::string insert =
      absl::StrCat("INSERT INTO ", table.quoted, " (", id_column, ", ", created_at_column, ") ");
  if (kind == MarkKind::kIdAndCreatedAt) {
    return absl::StrCat(insert, "VALUES ($1, $2::timestamptz) ON CONFLICT DO NOTHING");
  }
  return absl::StrCat(insert, "SELECT $1::uuid, $2::timestamptz WHERE NOT EXISTS (SELECT 1 FROM ",
                      table.quoted, " WHERE ", id_column, " = $1::uuid) ON CONFLICT DO NOTHING");
}

// True when the id was not marked before (the INSERT took a row).
absl::StatusOr<bool> Mark(pg::Connection& conn, const Message& message, const InboxOptions& options,
                          InboxKey key) {
  std::vector<std::optional<std::string>> params = {message.id};
  MarkKind kind = MarkKind::kId;
  if (key == InboxKey::kIdAndCreatedAt) {
    std::optional<std::string_view> created_at = message.Header(options.created_at_header);
    const bool dated = created_at && !created_at->empty();
    kind = dated ? MarkKind::kIdAndCreatedAt : MarkKind::kIdUndated;
    params.push_back(dated ? std::string(*created_at) : std::string(kUndatedCreatedAt));
  }
  OUTBOXD_ASSIGN_OR_RETURN(std::string sql, MarkSql(conn, options, kind));
  absl::StatusOr<pg::Result> inserted = conn.ExecParams(sql, params);
  if (!inserted.ok()) return Annotate(inserted.status(), "cannot mark the message in the inbox: ");
  return inserted->AffectedRows() == 1;
}

// The handler's effect joins the transaction holding the mark; a handler that ends
// the transaction itself would commit one without the other.
absl::Status RunHandler(pg::Connection& conn, const Message& message, const Handler& handler) {
  absl::Status status = handler(conn, message);
  if (!status.ok()) return Annotate(status, "handler failed: ");
  if (PQtransactionStatus(conn.get()) != PQTRANS_INTRANS) {
    return absl::FailedPreconditionError(
        "handler failed: it ended or broke the inbox transaction (it must not COMMIT, ROLLBACK "
        "or swallow an SQL error)");
  }
  return absl::OkStatus();
}

absl::StatusOr<Outcome> ProcessInTransaction(pg::Connection& conn, const Message& message,
                                             const Handler& handler, const InboxOptions& options,
                                             InboxKey key) {
  OUTBOXD_ASSIGN_OR_RETURN(bool first_time, Mark(conn, message, options, key));
  if (!first_time) return Outcome::kDuplicate;
  OUTBOXD_RETURN_IF_ERROR(RunHandler(conn, message, handler));
  absl::StatusOr<pg::Result> committed = conn.Exec("COMMIT");
  if (!committed.ok()) return Annotate(committed.status(), "COMMIT failed: ");
  return Outcome::kProcessed;
}

}  // namespace

std::optional<std::string_view> Message::Header(std::string_view name) const {
  for (const auto& [n, v] : headers) {
    if (n == name) return v;
  }
  return std::nullopt;
}

std::string_view OutcomeName(Outcome outcome) {
  return outcome == Outcome::kProcessed ? "processed" : "duplicate";
}

absl::StatusOr<InboxKey> DetectKey(pg::Connection& conn, const InboxOptions& options) {
  if (options.key != InboxKey::kDetect) return options.key;
  OUTBOXD_ASSIGN_OR_RETURN(std::string sql, KeySql(conn, options));
  OUTBOXD_ASSIGN_OR_RETURN(pg::Result r, conn.Exec(sql));
  return KeyOf(r);
}

bool IsUuid(std::string_view text) {
  if (text.size() != 36) return false;
  for (size_t i = 0; i < text.size(); ++i) {
    const bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash ? text[i] != '-' : !std::isxdigit(static_cast<unsigned char>(text[i]))) return false;
  }
  return true;
}

absl::StatusOr<Outcome> Process(pg::Connection& conn, const Message& message,
                                const Handler& handler, const InboxOptions& options) {
  if (!IsUuid(message.id)) {
    return absl::InvalidArgumentError(
        absl::StrCat("message id \"", message.id.substr(0, 64), "\" is not a UUID"));
  }
  if (PQtransactionStatus(conn.get()) != PQTRANS_IDLE) {
    return absl::FailedPreconditionError(
        "inbox::Process needs a connection outside any transaction: it runs its own");
  }
  absl::StatusOr<InboxKey> key = Begin(conn, options);
  absl::StatusOr<Outcome> outcome =
      key.ok() ? ProcessInTransaction(conn, message, handler, options, *key) : key.status();
  // A duplicate changed nothing: ROLLBACK releases the row lock the INSERT waited on.
  if (!outcome.ok() || *outcome == Outcome::kDuplicate) Rollback(conn);
  return outcome;
}

}  // namespace outboxd::inbox
