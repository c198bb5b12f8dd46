// The content's one reader (the relay) and its writers (the SQL function, and
// EmittedContent for tests) live together, so the format has one home.
#include "outbox/emitted_event.h"

#include <array>

#include "absl/strings/str_cat.h"

namespace outboxd::outbox {
namespace {

constexpr char kSeparator = '\0';

// Takes the text up to the next NUL from `rest`; false when there is none.
bool NextField(std::string_view& rest, std::string_view& field) {
  const size_t end = rest.find(kSeparator);
  if (end == std::string_view::npos) return false;
  field = rest.substr(0, end);
  rest.remove_prefix(end + 1);
  return true;
}

absl::Status Unreadable(const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("outboxd message content ", why));
}

}  // namespace

absl::StatusOr<OutboxEvent> ParseEmittedEvent(std::string_view content) {
  std::string_view version;
  if (!NextField(content, version) || version != kEmitVersion) {
    return Unreadable(
        absl::StrCat("does not start with ", kEmitVersion,
                     " (written by another outboxd version, or not by outboxd_emit)"));
  }
  OutboxEvent event;
  std::array<std::string_view*, 4> fields = {&event.id, &event.aggregate_id, &event.type,
                                             &event.created_at};
  for (std::string_view* field : fields) {
    if (!NextField(content, *field)) {
      return Unreadable("is truncated: id, aggregate_id, type, created_at and payload expected");
    }
  }
  event.payload = content;
  if (event.id.empty() || event.aggregate_id.empty() || event.type.empty()) {
    return Unreadable("has an empty id, aggregate_id or type");
  }
  return event;
}

std::string EmittedContent(const OutboxEvent& event) {
  std::string out(kEmitVersion);
  for (std::string_view field : {event.id, event.aggregate_id, event.type, event.created_at}) {
    out.push_back(kSeparator);
    out.append(field);
  }
  out.push_back(kSeparator);
  out.append(event.payload);
  return out;
}

std::string EmitFunctionSql(const pg::TableName& function) {
  // plpgsql for the checks' messages; every name is schema-qualified instead of a SET
  // search_path clause, which would cost each call a configuration save and restore.
  // created_at is rendered as the walsender renders a timestamptz column in UTC, so
  // the relay handles it as it handles a row's.
  return absl::StrCat("CREATE OR REPLACE FUNCTION ", function.quoted,
                      R"sql((aggregate_id text, type text, payload jsonb)
RETURNS uuid LANGUAGE plpgsql VOLATILE AS $outboxd$
DECLARE
  event_id uuid := pg_catalog.gen_random_uuid();
  sep CONSTANT bytea := '\x00'::bytea;
BEGIN
  IF coalesce($1, '') = '' OR coalesce($2, '') = '' THEN
    RAISE EXCEPTION 'outboxd_emit: aggregate_id and type must not be empty (they are the key and topic)'
      USING ERRCODE = '22023';
  END IF;
  IF pg_catalog.jsonb_typeof($3) IS NULL OR pg_catalog.jsonb_typeof($3) NOT IN ('object', 'array') THEN
    RAISE EXCEPTION 'outboxd_emit: payload must be a JSON object or array' USING ERRCODE = '22023';
  END IF;
  PERFORM pg_catalog.pg_logical_emit_message(true, ')sql",
                      kEmitPrefix, R"sql(',
    pg_catalog.convert_to(')sql",
                      kEmitVersion, R"sql(', 'UTF8') || sep ||
    pg_catalog.convert_to(event_id::text, 'UTF8') || sep ||
    pg_catalog.convert_to($1, 'UTF8') || sep ||
    pg_catalog.convert_to($2, 'UTF8') || sep ||
    pg_catalog.convert_to(pg_catalog.to_char(pg_catalog.now() AT TIME ZONE 'UTC',
                                             'YYYY-MM-DD HH24:MI:SS.US') || '+00', 'UTF8') || sep ||
    pg_catalog.convert_to($3::text, 'UTF8'));
  RETURN event_id;
END
$outboxd$)sql");
}

}  // namespace outboxd::outbox
