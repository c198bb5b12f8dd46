// The outbox model: which columns of the outbox table carry what, and a row of an
// INSERT turned into an OutboxEvent. Column names default to the mission's schema
// (id, aggregate_id, tipo, payload, criado_em); flags rename them, e.g. for a
// Debezium-style table (id, aggregateid, type, payload, timestamp).
//
//   EventMapper mapper(ColumnMapping{});
//   OUTBOXD_RETURN_IF_ERROR(mapper.SetRelation(relation));     // on each Relation
//   OUTBOXD_ASSIGN_OR_RETURN(OutboxEvent ev, mapper.Map(insert.tuple));
#ifndef OUTBOXD_OUTBOX_EVENT_H_
#define OUTBOXD_OUTBOX_EVENT_H_

#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "pgoutput/messages.h"

namespace outboxd::outbox {

// The header naming the relay that published a message: "<database>/<slot>" (a slot
// name is unique in its cluster and has no '/'). Every CDC relay message carries it.
inline constexpr char kSlotHeader[] = "outboxd_slot";

// The headers outboxd sets itself, which a row's headers column may not override
// (compared case-insensitively): the contract's, the slot mark, and the sinks' id
// headers (Nats-Msg-Id). Lower case.
std::span<const std::string_view> OwnHeaderNames();
bool IsOwnHeader(std::string_view name);
// Header names compare case-insensitively. The sizes first, inline: most names differ
// in size, and absl::EqualsIgnoreCase is a call into the library per comparison.
inline bool SameHeaderName(std::string_view a, std::string_view b) {
  return a.size() == b.size() && absl::EqualsIgnoreCase(absl::string_view(a.data(), a.size()),
                                                        absl::string_view(b.data(), b.size()));
}
// The jsonpath like_regex matching them, "^(id|type|...)$" (names of [a-z_-] only,
// nothing to escape), for the SQL checks of the headers column and outboxd_emit.
std::string OwnHeaderRegex();

struct ColumnMapping {
  std::string id = "id";
  std::string aggregate_id = "aggregate_id";
  std::string type = "tipo";
  std::string payload = "payload";
  // Empty: the table has none (see MissingCreatedAtNote); events then carry no
  // created_at of their own.
  std::string created_at = "criado_em";
  // Empty: none (--headers-column). A nullable jsonb object of string values, each a
  // message header (message_format.h).
  std::string headers;
};

// The one line, for setup's report and run's start, that says what goes without a
// created-at column (a Debezium outbox table has none): the created_at header is the
// transaction's commit time instead, and status and cleanup cannot tell a row's age.
std::string MissingCreatedAtNote(std::string_view table, std::string_view column);

// Views into the decoded replication message: valid while that message is.
struct OutboxEvent {
  std::string_view id;
  std::string_view aggregate_id;
  std::string_view type;
  std::string_view payload;
  std::string_view created_at;  // as PostgreSQL renders it (ISO DateStyle, UTC); may be empty
  std::string_view headers;     // the headers column's jsonb text; empty when NULL or none
};

class EventMapper {
 public:
  explicit EventMapper(ColumnMapping mapping) : mapping_(std::move(mapping)) {}

  // Learns the column positions from the outbox table's Relation message; called
  // again when the table is altered mid-stream. FailedPrecondition naming the
  // missing column and the flag that renames it (an empty created-at name is not
  // looked up: Map leaves created_at empty; nor an empty headers name).
  absl::Status SetRelation(const pgoutput::Relation& relation);
  bool ready() const { return ready_; }

  // A row of the outbox table as an event. InvalidArgument when a needed value is
  // NULL (the headers column may be), or not sent in text form.
  absl::StatusOr<OutboxEvent> Map(const pgoutput::Tuple& tuple) const;
  // The fields of a row Map refused for a NULL (or a value not in text form): those
  // that hold text, the others empty. The tuple must have column_count() columns.
  OutboxEvent MapPresent(const pgoutput::Tuple& tuple) const;
  size_t column_count() const { return column_count_; }

 private:
  ColumnMapping mapping_;
  bool ready_ = false;
  size_t column_count_ = 0;
  int id_ = -1, aggregate_id_ = -1, type_ = -1, payload_ = -1, created_at_ = -1, headers_ = -1;
};

// "2026-12-02 12:22:45.123+00" -> "2026-12-02T12:22:45.123+00:00" (ISO-8601 with
// offset), written into `buffer`; returns a view of it.
std::string_view IsoTimestamp(std::string_view pg_timestamptz, std::string& buffer);

}  // namespace outboxd::outbox

#endif  // OUTBOXD_OUTBOX_EVENT_H_
