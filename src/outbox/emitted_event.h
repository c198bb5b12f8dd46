// The WAL-only outbox (`outboxd run --source messages|both`): an event written with
// pg_logical_emit_message(true, 'outboxd', content) instead of an outbox row. It costs
// the writer one WAL record: no heap tuple, no index entries, no DELETE and vacuum
// later. The relay reads it from the slot (pgoutput with messages 'true') and
// publishes it exactly like a row, with the same id, key, headers and formats.
//
// pg_logical_emit_message is executable by every role, so the prefix proves nothing:
// the relay publishes only content signed with a key that the role owning the outbox
// alone can read (docs/security.md, "Who may publish an event"). The content,
// version 2, is bytes:
//
//   "outboxd-v2" NUL mac NUL id NUL aggregate_id NUL type NUL created_at NUL payload
//
//   mac           64 lowercase hex digits: HMAC-SHA256 (RFC 2104) under the key of
//                 the signed bytes, which are the content without "mac NUL"
//   id            the event's uuid, as text (what consumers deduplicate on)
//   aggregate_id  the key; events of one aggregate stay in order (1-1024 bytes)
//   type          the default topic ({type} in --topic) (1-1024 bytes)
//   created_at    now() of the writing transaction, as PostgreSQL renders a timestamptz
//                 in UTC with ISO DateStyle ("2026-12-03 15:40:00.123456+00"), which
//                 is how a row's created-at column reaches the relay
//   payload       the JSON text, running to the end of the content
//
// Version 3, "outboxd-v3", is version 2 with the event's headers (outbox::NewEvent's,
// or outboxd_emit's fourth argument) as a jsonb object's text between created_at and
// payload; outboxd_emit writes it only for an event with headers, so a relay from
// before version 3 still reads every event written without them.
//
// The whole content is at most kMaxEmittedContent bytes, and every text is UTF-8.
// Version 1 was the same without the mac; the relay takes it only from before the
// upgrade that brought version 2 (EmitKey::unsigned_before). A PostgreSQL text value
// cannot hold a NUL byte, so the separators need no escaping, and the payload goes
// last so it needs no length. Only transactional messages are events: a
// non-transactional one is written even when its transaction rolls back.
//
//   SELECT outboxd_emit('pedido-77', 'pedido.confirmado', '{"totalCentavos":1000}');
//   ... the relay: if (m.prefix == kEmitPrefix) read = ReadEmittedEvent(m.content, key, m.lsn);
#ifndef OUTBOXD_OUTBOX_EMITTED_EVENT_H_
#define OUTBOXD_OUTBOX_EMITTED_EVENT_H_

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "outbox/event.h"
#include "pg/lsn.h"
#include "pg/table_name.h"

namespace outboxd::outbox {

// The prefix of outboxd's messages; the relay ignores every other prefix.
inline constexpr char kEmitPrefix[] = "outboxd";
// The first field of the content: a later format gets a new one.
inline constexpr char kEmitVersion[] = "outboxd-v2";
// Version 2 with the headers field: an event written with headers.
inline constexpr char kEmitVersionHeaders[] = "outboxd-v3";
// The unsigned format of outboxd 1.x, read only from before the upgrade.
inline constexpr char kEmitVersionUnsigned[] = "outboxd-v1";
// The SQL function `outboxd setup` installs beside the outbox table.
inline constexpr char kEmitFunction[] = "outboxd_emit";
// Its two overloads' argument types, as GRANT and REVOKE name them.
inline constexpr char kEmitArgs[] = "(text, text, jsonb)";
inline constexpr char kEmitArgsWithHeaders[] = "(text, text, jsonb, jsonb)";
// The table beside it that holds the signing key (one row; no rights for PUBLIC).
inline constexpr char kEmitKeyTable[] = "outboxd_emit_key";
// The largest content the relay reads, and outboxd_emit writes: librdkafka's default
// message.max.bytes is 1,000,000, so a larger event could not be produced anyway. The
// relay never parses, hashes or copies a larger one.
inline constexpr size_t kMaxEmittedContent = 1 << 20;
// The content a bulk catch-up's query puts in place of a message over
// kMaxEmittedContent (relay/bulk_stream.cc), so the relay counts it as too_large
// without receiving it. Anyone may write it too: it is refused as too_large all the same.
inline constexpr char kEmitCutByServer[] = "outboxd-too-large";
// The longest aggregate_id and type, in bytes (a key and a topic, not documents).
inline constexpr size_t kMaxEmittedField = 1024;

// The signing key as outboxd_emit and the relay use it: HMAC's two padded keys
// (K XOR 0x36.., K XOR 0x5c.., 64 bytes each), which is what SQL's sha256() needs.
struct EmitKey {
  std::string inner_pad;
  std::string outer_pad;
  // Version-1 content is read only at a position below this one: what an older
  // outboxd_emit wrote before `outboxd setup` upgraded it ('0/0' on a new install).
  pg::Lsn unsigned_before = 0;
};

// Why the relay refused a message with outboxd's prefix. Each is counted in
// outboxd_messages_rejected_total{reason} and logged; none is a dead letter.
enum class Rejection {
  kNone,
  kTooLarge,          // content over kMaxEmittedContent
  kUnsigned,          // version 1 after the upgrade, or no version outboxd writes
  kBadSignature,      // the mac does not match the content under the key
  kInvalidField,      // signed, but a field breaks the rules above
  kNonTransactional,  // pg_logical_emit_message(false, ...): no commit confirms it
};
// "too_large", "unsigned", "bad_signature", "invalid_field", "non_transactional".
std::string_view RejectionName(Rejection reason);
inline constexpr Rejection kEveryRejection[] = {Rejection::kTooLarge, Rejection::kUnsigned,
                                                Rejection::kBadSignature, Rejection::kInvalidField,
                                                Rejection::kNonTransactional};

// What ReadEmittedEvent made of a message: the event (views into the content, like
// EventMapper::Map's into the row), or why it was refused.
struct EmittedRead {
  OutboxEvent event;
  Rejection rejected = Rejection::kNone;
  std::string why;  // for the log line; never holds the content's bytes
  bool ok() const { return rejected == Rejection::kNone; }
};

// Reads the content of a transactional message with outboxd's prefix written at `lsn`:
// checks its size, version and signature under `key`, then every field (id a UUID,
// aggregate_id and type 1-1024 bytes, created_at a valid timestamp as above, all of
// it UTF-8). The payload's JSON is checked where a row's is (the relay dead-letters
// an authorised event whose payload is not a JSON object or array).
//   EmittedRead read = ReadEmittedEvent(message.content, key, message.lsn);
//   if (!read.ok()) count(read.rejected), log(read.why); else publish(read.event);
EmittedRead ReadEmittedEvent(std::string_view content, const EmitKey& key, pg::Lsn lsn);

// The version-2 content of an event signed with `key`, version 3 when it has headers
// (tests, fuzzing, and anything that emits without the SQL function but holds the key).
std::string SignedContent(const OutboxEvent& event, const EmitKey& key);
// The version-1 (unsigned) content of an event, as outboxd 1.x wrote it (tests).
std::string EmittedContent(const OutboxEvent& event);
// The padded keys for a key of at most 64 bytes (HMAC's block).
EmitKey KeyFromSecret(std::string_view secret);

// CREATE OR REPLACE FUNCTION <schema of the outbox table>.outboxd_emit(aggregate_id
// text, type text, payload jsonb) and its overload with `headers jsonb` (NULL or an
// object of string values, none of OwnHeaderNames), each RETURNS uuid, SECURITY DEFINER with a
// fixed search_path: checks the fields like outbox::Enqueue, signs the content with the key in
// `key_table` (which only the function's owner can read), emits the message inside the caller's
// transaction and returns the new event's id. `function` and `key_table` are the outbox table's
// Sibling(kEmitFunction) and Sibling(kEmitKeyTable).
std::string EmitFunctionSql(const pg::TableName& function, const pg::TableName& key_table);

}  // namespace outboxd::outbox

#endif  // OUTBOXD_OUTBOX_EMITTED_EVENT_H_
