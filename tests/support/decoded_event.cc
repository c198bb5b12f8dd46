#include "support/decoded_event.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "outbox/v1/event.pb.h"
#include "simdjson.h"

namespace outboxd::test {
namespace {

absl::StatusOr<DecodedEvent> FromEnvelope(std::string_view value) {
  simdjson::dom::parser parser;
  simdjson::dom::object root;
  if (auto error = parser.parse(std::string(value)).get(root)) {
    return absl::InvalidArgumentError(
        absl::StrCat("envelope is not a JSON object: ", simdjson::error_message(error)));
  }
  DecodedEvent event;
  for (auto [name, out] : {std::pair<const char*, std::string*>{"id", &event.id},
                           {"type", &event.type},
                           {"aggregate_id", &event.aggregate_id},
                           {"created_at", &event.created_at}}) {
    std::string_view text;
    if (root[name].get(text)) return absl::InvalidArgumentError(absl::StrCat("no string ", name));
    *out = text;
  }
  simdjson::dom::element lsn;
  if (root["lsn"].get(lsn)) return absl::InvalidArgumentError("no lsn field");
  if (!lsn.is_null()) event.lsn = std::string(lsn.get_string().value());
  simdjson::dom::element payload;
  if (root["payload"].get(payload)) return absl::InvalidArgumentError("no payload field");
  if (!payload.is_object() && !payload.is_array()) {
    return absl::InvalidArgumentError("payload is not embedded as JSON");
  }
  event.payload = simdjson::minify(payload);
  if (root.size() != 6) return absl::InvalidArgumentError("envelope has other fields");
  return event;
}

}  // namespace

std::string Minify(std::string_view json) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (parser.parse(std::string(json)).get(root)) return "<invalid JSON>";
  return simdjson::minify(root);
}

absl::StatusOr<DecodedEvent> DecodeEvent(std::string_view format, const CollectedMessage& m) {
  if (format == "json") {
    return DecodedEvent{.id = m.Header("id").value_or(""),
                        .type = m.Header("type").value_or(""),
                        .aggregate_id = m.Header("aggregate_id").value_or(""),
                        .created_at = m.Header("created_at").value_or(""),
                        .lsn = m.Header("lsn"),
                        .payload = m.value};
  }
  if (format == "envelope") return FromEnvelope(m.value);
  if (format == "protobuf") {
    ::outbox::v1::Event event;
    if (!event.ParseFromString(m.value)) {
      return absl::InvalidArgumentError("value is not an outbox.v1.Event");
    }
    DecodedEvent out{.id = event.id(),
                     .type = event.type(),
                     .aggregate_id = event.aggregate_id(),
                     .created_at = event.created_at(),
                     .payload = event.payload_json()};
    if (!event.lsn().empty()) out.lsn = event.lsn();
    return out;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown format ", absl::string_view(format.data(), format.size())));
}

}  // namespace outboxd::test
