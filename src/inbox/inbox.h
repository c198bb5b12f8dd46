// The consumer side of the pattern: delivery is at least once, so a consumer marks
// each message id in the `inbox` table and runs its effect in the *same* PostgreSQL
// transaction. A repeat finds the mark and is skipped; a failing effect rolls the
// mark back with it, so the redelivery tries again instead of looking done.
//
//   inbox::Handler bill = [](pg::Connection& conn, const inbox::Message& m) {
//     return conn.ExecParams("INSERT INTO faturas (pedido_id, message_id) "
//                            "VALUES ($1::jsonb->>'pedidoId', $2)", {m.value, m.id}).status();
//   };
//   OUTBOXD_ASSIGN_OR_RETURN(inbox::Outcome outcome, inbox::Process(conn, message, bill));
//
// Two consumers racing on one id (e.g. around a rebalance) are safe: the second INSERT
// into the inbox waits for the first transaction and then finds the mark.
//
// A partitioned inbox (`outboxd setup --inbox-partition-by day`, docs/operations.md)
// is keyed by (message id, the event's created-at): PostgreSQL enforces a unique key
// per partition only, so the partition key must be in it. Every delivery of one event
// carries the same `created_at` header (the outbox row's, src/outbox/message_format.cc),
// so a redelivery has the same pair and still conflicts. Process reads that header
// and, unless told (InboxOptions::key), finds out which key the table has in its
// BEGIN's round trip, so a caller needs no change either way; the Consumer looks it
// up once (DetectKey).
#ifndef OUTBOXD_INBOX_INBOX_H_
#define OUTBOXD_INBOX_INBOX_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "pg/connection.h"

namespace outboxd::inbox {

// One Kafka message as the handler sees it.
struct Message {
  // The `id` header: the outbox event id. Pass it as the idempotency key to any
  // effect outside this database (an HTTP API, a payment provider).
  std::string id;
  std::string topic;
  int32_t partition = -1;
  int64_t offset = -1;
  std::string key;
  std::string value;
  std::vector<std::pair<std::string, std::string>> headers;

  // The first header with this name.
  std::optional<std::string_view> Header(std::string_view name) const;
};

// Runs the effect on `conn`, inside the transaction that holds the inbox mark. It must
// not COMMIT or ROLLBACK itself; a non-OK status rolls everything back.
using Handler = std::function<absl::Status(pg::Connection& conn, const Message& message)>;

// What the inbox is keyed by: the message id alone (the plain inbox), or the id and
// the event's created-at (the partitioned one, partitioned by that column).
enum class InboxKey {
  kDetect,          // from the table: kIdAndCreatedAt when it has created_at_column
  kId,              // skip the look-up
  kIdAndCreatedAt,  // skip the look-up
};

struct InboxOptions {
  std::string table = "inbox";           // [schema.]name, as `outboxd setup` made it
  std::string id_column = "message_id";  // uuid primary key
  InboxKey key = InboxKey::kDetect;
  // kIdAndCreatedAt: the column and the header the event's created-at comes from.
  std::string created_at_column = "evento_criado_em";
  std::string created_at_header = "created_at";
};

// The created-at a message without the header is marked with (a backfilled row of an
// outbox table without a created-at column: docs/usage.md, "A Debezium-style outbox table").
// A fixed value, so that its redeliveries still conflict; -infinity lies outside
// every range, so these marks sit in the DEFAULT partition and cleanup deletes them
// row by row by processado_em, as on a plain inbox. Such a message is also a
// duplicate of any mark of its id: the same event streamed before a slot was
// recreated carried the commit time as its created_at (outbox/event.h).
inline constexpr char kUndatedCreatedAt[] = "-infinity";

enum class Outcome {
  kProcessed,  // first time: the handler ran and its effect is committed
  kDuplicate,  // the id was already marked: nothing ran
};
std::string_view OutcomeName(Outcome outcome);  // "processed", "duplicate"

// Marks `message.id` and runs `handler`, in one transaction on `conn` (which must not
// be in a transaction already). Errors (the transaction is rolled back, nothing is
// marked, the message should be retried):
//   InvalidArgument  message.id is not a UUID (retrying cannot help), or (a
//     partitioned inbox) its created_at header is not a timestamp;
//   the handler's own status, prefixed with "handler failed";
//   FailedPrecondition  `conn` was in a transaction, or the handler ended it;
//   database errors (BEGIN, the inbox INSERT, COMMIT) as pg::Connection maps them.
absl::StatusOr<Outcome> Process(pg::Connection& conn, const Message& message,
                                const Handler& handler, const InboxOptions& options = {});

// The inbox's key as the table has it (options.key when that is not kDetect): one
// catalog query, to pass as InboxOptions::key so that Process skips its own.
//   OUTBOXD_ASSIGN_OR_RETURN(options.key, inbox::DetectKey(conn, options));
absl::StatusOr<InboxKey> DetectKey(pg::Connection& conn, const InboxOptions& options);

// True for the canonical text form 8-4-4-4-12 hex digits (either case).
bool IsUuid(std::string_view text);

}  // namespace outboxd::inbox

#endif  // OUTBOXD_INBOX_INBOX_H_
