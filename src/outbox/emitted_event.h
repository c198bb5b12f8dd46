// The WAL-only outbox (`outboxd run --source messages|both`): an event written with
// pg_logical_emit_message(true, 'outboxd', content) instead of an outbox row. It costs
// the writer one WAL record: no heap tuple, no index entries, no DELETE and vacuum
// later. The relay reads it from the slot (pgoutput with messages 'true') and
// publishes it exactly like a row, with the same id, key, headers and formats.
//
// The content, version 1, is bytes:
//
//   "outboxd-v1" NUL id NUL aggregate_id NUL type NUL created_at NUL payload
//
//   id            the event's uuid, as text (what consumers deduplicate on)
//   aggregate_id  the key; events of one aggregate stay in order
//   type          the default topic ({type} in --topic)
//   created_at    now() of the writing transaction, as PostgreSQL renders a timestamptz
//                 in UTC with ISO DateStyle ("2026-12-03 15:40:00.123456+00"), which
//                 is how a row's created-at column reaches the relay
//   payload       the JSON text, running to the end of the content
//
// That is every field an outbox row carries (the table has no headers column; the
// message headers come from --header pointers into the payload, as for a row). A
// PostgreSQL text value cannot hold a NUL byte, so the separators need no escaping,
// and the payload goes last so it needs no length. Only transactional messages are
// events: a non-transactional one is written even when its transaction rolls back.
//
//   SELECT outboxd_emit('pedido-77', 'pedido.confirmado', '{"totalCentavos":1000}');
//   ... the relay: if (m.prefix == kEmitPrefix) event = ParseEmittedEvent(m.content);
#ifndef OUTBOXD_OUTBOX_EMITTED_EVENT_H_
#define OUTBOXD_OUTBOX_EMITTED_EVENT_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "outbox/event.h"
#include "pg/table_name.h"

namespace outboxd::outbox {

// The prefix of outboxd's messages; the relay ignores every other prefix.
inline constexpr char kEmitPrefix[] = "outboxd";
// The first field of the content: a later format gets a new one.
inline constexpr char kEmitVersion[] = "outboxd-v1";
// The SQL function `outboxd setup` installs beside the outbox table.
inline constexpr char kEmitFunction[] = "outboxd_emit";

// The event a message carries, as views into `content` (like EventMapper::Map's views
// into the row). InvalidArgument when the content is not version 1 or lacks a field,
// or id, aggregate_id or type is empty. The payload is not checked here: a payload that
// is not a JSON object or array is dead-lettered by the relay, like a row's.
absl::StatusOr<OutboxEvent> ParseEmittedEvent(std::string_view content);

// The content for an event (tests, and anything that emits without the SQL function).
std::string EmittedContent(const OutboxEvent& event);

// CREATE OR REPLACE FUNCTION <schema of the outbox table>.outboxd_emit(aggregate_id
// text, type text, payload jsonb) RETURNS uuid: checks the fields like
// outbox::Enqueue, emits the message inside the caller's transaction and returns the
// new event's id. `function` is the outbox table's Sibling(kEmitFunction).
std::string EmitFunctionSql(const pg::TableName& function);

}  // namespace outboxd::outbox

#endif  // OUTBOXD_OUTBOX_EMITTED_EVENT_H_
