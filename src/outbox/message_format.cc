// Envelope JSON is written by hand into one reused string (field order fixed, payload
// last: PayloadOf relies on it). So is protobuf: outbox.v1.Event is six string fields,
// and the generated serializer would copy each one and check the payload's UTF-8 again
// (simdjson has): 26 us instead of 6 for a 10 KiB payload. The unit test holds the
// bytes equal to the generated code's; decoding (PayloadOf, consumers) uses it.
#include "outbox/message_format.h"

#include <algorithm>
#include <array>
#include <charconv>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/json_string.h"
#include "base/log.h"
#include "base/log_escape.h"
#include "base/status_macros.h"
#include "outbox/trace_context.h"
#include "outbox/v1/event.pb.h"

namespace outboxd::outbox {
namespace {

constexpr std::string_view kEnvelopeContentType = "application/vnd.outboxd.envelope+json";
constexpr std::string_view kProtobufContentType =
    "application/x-protobuf; messageType=outbox.v1.Event";
// CloudEvents: the payload's media type (the binary mode's content-type, the structured
// event's datacontenttype), and the structured mode's.
constexpr std::string_view kJsonContentType = "application/json";
constexpr std::string_view kCloudEventsJsonContentType = "application/cloudevents+json";
// The attributes the binary mode sets, in this order (ce_names_): the required ones,
// then subject (the aggregate), time (created-at), the partitioning extension's
// partitionkey (the message key) and the distributed tracing extension's two.
constexpr std::array<std::string_view, 9> kCloudEventAttributes = {
    "specversion", "id",           "source",      "type",      "subject",
    "time",        "partitionkey", "traceparent", "tracestate"};
constexpr std::string_view kDataField = ",\"data\":";

// StrCat takes abseil's own string_view here (Debian's abseil is not C++17-aliased).
absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

template <typename T>
std::string_view ToChars(T value, std::string& scratch) {
  scratch.resize(32);
  auto [end, ec] = std::to_chars(scratch.data(), scratch.data() + scratch.size(), value);
  scratch.resize(ec == std::errc() ? end - scratch.data() : 0);
  return scratch;
}

// Protocol buffers wire format (protobuf.dev/programming-guides/encoding): a
// length-delimited field is the tag (field number << 3 | wire type 2) as a varint, the
// length as a varint, the bytes. proto3 writes nothing for an empty string.
void AppendVarint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>(value | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}

void AppendProtoString(std::string& out, uint32_t field, std::string_view bytes) {
  if (bytes.empty()) return;
  AppendVarint(out, field << 3 | 2);
  AppendVarint(out, bytes.size());
  out.append(bytes);
}

std::string_view HeaderValue(std::span<const sink::Header> headers, std::string_view name) {
  for (const sink::Header& h : headers) {
    if (h.name == name) return h.value;
  }
  return {};
}

}  // namespace

absl::StatusOr<ValueFormat> ParseValueFormat(std::string_view name) {
  if (name == "json") return ValueFormat::kJson;
  if (name == "envelope") return ValueFormat::kEnvelope;
  if (name == "protobuf") return ValueFormat::kProtobuf;
  if (name == "cloudevents") return ValueFormat::kCloudEvents;
  if (name == "cloudevents-json") return ValueFormat::kCloudEventsJson;
  return absl::InvalidArgumentError(
      absl::StrCat("--format \"", Sv(name),
                   "\": expected json (the payload), envelope, protobuf, cloudevents or "
                   "cloudevents-json"));
}

std::string_view ValueFormatName(ValueFormat format) {
  switch (format) {
    case ValueFormat::kJson: return "json";
    case ValueFormat::kEnvelope: return "envelope";
    case ValueFormat::kProtobuf: return "protobuf";
    case ValueFormat::kCloudEvents:
      return "cloudevents";
    case ValueFormat::kCloudEventsJson:
      return "cloudevents-json";
  }
  return "?";
}

void DroppedHeadersLog::Log(std::string_view event_id, std::span<const DroppedHeader> dropped,
                            absl::Time now) {
  for (const DroppedHeader& d : dropped) count_(d.name, d.reason);
  if (now - logged_at_ < interval_) {
    unlogged_ += dropped.size();
    return;
  }
  spdlog::warn("event {} published without its {} header ({}; docs/tracing.md){}",
               LogSafe(event_id), LogSafe(dropped.front().name), dropped.front().reason,
               unlogged_ == 0 ? std::string()
                              : absl::StrCat("; ", unlogged_,
                                             " more header(s) dropped since the last such line "
                                             "(outboxd_headers_dropped_total counts them)"));
  unlogged_ = dropped.size() - 1;
  logged_at_ = now;
}

std::string SlotMark(std::string_view database, std::string_view slot) {
  return absl::StrCat(Sv(database), "/", Sv(slot));
}

absl::Status CheckJsonPointer(std::string_view pointer) {
  const absl::string_view fix = "; a JSON pointer (RFC 6901) looks like /trace/traceparent";
  if (pointer.empty() || pointer[0] != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("JSON pointer \"", Sv(pointer), "\" must start with /", fix));
  }
  for (size_t i = 0; i < pointer.size(); ++i) {
    if (pointer[i] == '~' && (i + 1 == pointer.size() || (pointer[i + 1] != '0' &&
                                                          pointer[i + 1] != '1'))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "JSON pointer \"", Sv(pointer), "\": ~ must be written ~0 (and / inside a name ~1)", fix));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<HeaderPointer> ParseHeaderPointer(std::string_view flag_value) {
  const size_t eq = flag_value.find('=');
  if (eq == std::string_view::npos || eq == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--header \"", Sv(flag_value), "\": expected NAME=/json/pointer, e.g. "
        "--header traceparent=/trace/traceparent"));
  }
  HeaderPointer header{.name = std::string(flag_value.substr(0, eq)),
                       .pointer = std::string(flag_value.substr(eq + 1))};
  if (IsOwnHeader(header.name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--header \"", Sv(flag_value), "\": ", header.name,
                     " is one of outboxd's own headers (in any case); choose another name"));
  }
  if (absl::Status s = CheckJsonPointer(header.pointer); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--header ", header.name, ": ", s.message()));
  }
  return header;
}

MessageEncoder::MessageEncoder(MessageFormat format)
    : format_(std::move(format)),
      decoded_(std::make_unique<::outbox::v1::Event>()) {
  if (format_.format == ValueFormat::kEnvelope) content_type_ = kEnvelopeContentType;
  if (format_.format == ValueFormat::kProtobuf) content_type_ = kProtobufContentType;
  if (format_.format == ValueFormat::kCloudEvents) content_type_ = kJsonContentType;
  if (format_.format == ValueFormat::kCloudEventsJson) content_type_ = kCloudEventsJsonContentType;
  for (std::string_view attribute : kCloudEventAttributes) {
    ce_names_.push_back(absl::StrCat(format_.ce_prefix, Sv(attribute)));
  }
  headers_.reserve(OwnHeaderNames().size() + kCloudEventAttributes.size() + format_.headers.size());
  header_scratch_.resize(format_.headers.size());
  dropped_.reserve(4);
}

MessageEncoder::~MessageEncoder() = default;

absl::Status MessageEncoder::Encode(const OutboxEvent& event, std::string_view lsn) {
  dropped_.clear();
  EncodeHeaders(event, lsn);
  message_ = {.key = event.aggregate_id, .value = event.payload, .headers = headers_};
  OUTBOXD_RETURN_IF_ERROR(checker_.Check(event.payload));
  if (!format_.key_pointer.empty()) OUTBOXD_RETURN_IF_ERROR(EncodeKey());
  const absl::Status row_headers = EncodeRowHeaders(event.headers);
  message_.headers = headers_;  // the vector may have grown
  OUTBOXD_RETURN_IF_ERROR(row_headers);
  EncodePointerHeaders();
  DropMalformedTraceContext();
  message_.headers = headers_;
  switch (format_.format) {
    case ValueFormat::kJson:
      break;
    case ValueFormat::kEnvelope:
      value_.clear();
      AppendEnvelope(event.id, event.type, event.aggregate_id, created_at_view_, lsn,
                     event.payload, value_);
      message_.value = value_;
      break;
    case ValueFormat::kProtobuf:
      EncodeProtobuf(event, lsn);
      message_.value = value_;
      break;
    case ValueFormat::kCloudEvents:
      EncodeCloudEventHeaders(event);
      message_.headers = headers_;
      break;
    case ValueFormat::kCloudEventsJson:
      value_.clear();
      AppendStructuredEvent(event);
      message_.value = value_;
      break;
  }
  return absl::OkStatus();
}

std::string_view MessageEncoder::HeaderOf(std::string_view name) const {
  for (const sink::Header& h : headers_) {
    if (SameHeaderName(h.name, name)) return h.value;
  }
  return {};
}

MessageEncoder::CloudEventValues MessageEncoder::CloudEventAttributes(
    const OutboxEvent& event) const {
  static_assert(kCloudEventAttributes.size() == std::tuple_size_v<CloudEventValues>);
  // After DropMalformedTraceContext: only a valid trace context is copied.
  return {"1.0",
          event.id,
          format_.ce_source,
          event.type,
          event.aggregate_id,
          created_at_view_,
          message_.key,
          HeaderOf(kTraceparent),
          HeaderOf(kTracestate)};
}

bool MessageEncoder::IsCloudEventsAttribute(std::string_view name) const {
  return format_.format == ValueFormat::kCloudEvents &&
         absl::StartsWithIgnoreCase(Sv(name), Sv(format_.ce_prefix));
}

void MessageEncoder::EncodeCloudEventHeaders(const OutboxEvent& event) {
  // The attributes are outboxd's: a row's or --header's header under the binding's
  // prefix would stand beside them (a second ce_id, a forged ce_source), so it goes.
  std::erase_if(headers_, [&](const sink::Header& h) {
    if (!IsCloudEventsAttribute(h.name)) return false;
    dropped_.push_back({h.name, "cloudevents_attribute"});
    return true;
  });
  const CloudEventValues values = CloudEventAttributes(event);
  for (size_t i = 0; i < ce_names_.size(); ++i) {
    if (!values[i].empty()) headers_.push_back({ce_names_[i], values[i]});
  }
}

void MessageEncoder::AppendStructuredEvent(const OutboxEvent& event) {
  const CloudEventValues values = CloudEventAttributes(event);
  value_.push_back('{');
  for (size_t i = 0; i < kCloudEventAttributes.size(); ++i) {
    if (values[i].empty()) continue;
    if (value_.size() > 1) value_.push_back(',');
    AppendJsonString(value_, kCloudEventAttributes[i]);
    value_.push_back(':');
    AppendJsonString(value_, values[i]);
  }
  absl::StrAppend(&value_, R"(,"datacontenttype":)");
  AppendJsonString(value_, kJsonContentType);
  value_.append(kDataField);
  value_.append(event.payload);
  value_.push_back('}');
}

void MessageEncoder::EncodeHeaders(const OutboxEvent& event, std::string_view lsn) {
  created_at_view_ = IsoTimestamp(event.created_at, created_at_);
  headers_.clear();
  headers_.push_back({"id", event.id});
  headers_.push_back({"type", event.type});
  headers_.push_back({"aggregate_id", event.aggregate_id});
  // Empty for a backfilled row of a table without a created-at column: no header
  // rather than an empty one.
  if (!created_at_view_.empty()) headers_.push_back({"created_at", created_at_view_});
  // `outboxd poll` has no commit LSN: no header rather than a made-up one.
  if (!lsn.empty()) headers_.push_back({"lsn", lsn});
  if (!slot_mark_.empty()) headers_.push_back({kSlotHeader, slot_mark_});
  if (!content_type_.empty()) headers_.push_back({"content-type", content_type_});
}

absl::Status MessageEncoder::EncodeKey() {
  absl::Status found = ScalarAt(format_.key_pointer, message_.key, key_scratch_);
  if (found.ok()) return found;
  return absl::InvalidArgumentError(
      absl::StrCat("no key: --key-pointer ", format_.key_pointer, " ", found.message()));
}

absl::Status MessageEncoder::EncodeRowHeaders(std::string_view json) {
  if (json.empty()) return absl::OkStatus();
  simdjson::dom::object object;
  if (!row_headers_.Check(json).ok() || row_headers_.root().get_object().get(object)) {
    return absl::InvalidArgumentError(
        "headers column is not a JSON object; it must hold an object of string values");
  }
  const size_t own = headers_.size();
  for (const auto [key, value] : object) {
    std::string_view text;
    absl::string_view why;
    if (IsOwnHeader(key)) {
      why = "is one of outboxd's own headers; rename the key";
    } else if (value.get_string().get(text)) {
      why = "has a value that is not a string; header values must be strings";
    }
    if (!why.empty()) {
      headers_.resize(own);
      return absl::InvalidArgumentError(absl::StrCat("headers column: \"", Sv(key), "\" ", why));
    }
    headers_.push_back({key, text});  // views into row_headers_'s parser
  }
  return absl::OkStatus();
}

void MessageEncoder::EncodePointerHeaders() {
  const size_t given = headers_.size();  // outboxd's own and the row's
  for (size_t i = 0; i < format_.headers.size(); ++i) {
    // The row named this header itself: its value stands, one header of that name.
    const std::string& name = format_.headers[i].name;
    if (std::any_of(headers_.begin(), headers_.begin() + given,
                    [&](const sink::Header& h) { return SameHeaderName(h.name, name); })) {
      continue;
    }
    std::string_view value;
    // A missing field leaves its header out; the event is still published.
    if (ScalarAt(format_.headers[i].pointer, value, header_scratch_[i]).ok()) {
      headers_.push_back({format_.headers[i].name, value});
    }
  }
}

void MessageEncoder::DropMalformedTraceContext() {
  bool valid_parent = false;
  // traceparent first: a tracestate counts only beside a valid one (W3C 3.3).
  for (std::string_view name : {kTraceparent, kTracestate}) {
    std::erase_if(headers_, [&](const sink::Header& h) {
      if (!SameHeaderName(h.name, name)) return false;
      std::optional<std::string_view> defect;
      if (name == kTraceparent) {
        defect = TraceparentDefect(h.value);
        valid_parent = valid_parent || !defect;
      } else {
        defect = valid_parent ? TracestateDefect(h.value) : "without_valid_traceparent";
      }
      if (defect) dropped_.push_back({name, *defect});
      return defect.has_value();
    });
  }
}

absl::Status MessageEncoder::ScalarAt(const std::string& pointer, std::string_view& out,
                                      std::string& scratch) {
  simdjson::dom::element element;
  if (checker_.root().at_pointer(pointer).get(element)) {
    return absl::NotFoundError("finds nothing in the payload");
  }
  switch (element.type()) {
    case simdjson::dom::element_type::STRING:
      out = element.get_string().value_unsafe();  // unescaped, in the parser's buffer
      return absl::OkStatus();
    case simdjson::dom::element_type::INT64:
      out = ToChars(element.get_int64().value_unsafe(), scratch);
      return absl::OkStatus();
    case simdjson::dom::element_type::UINT64:
      out = ToChars(element.get_uint64().value_unsafe(), scratch);
      return absl::OkStatus();
    case simdjson::dom::element_type::DOUBLE:
      out = RawNumber(pointer, element.get_double().value_unsafe(), scratch);
      return absl::OkStatus();
    case simdjson::dom::element_type::BOOL:
      out = element.get_bool().value_unsafe() ? "true" : "false";
      return absl::OkStatus();
    case simdjson::dom::element_type::NULL_VALUE:
      return absl::InvalidArgumentError("finds null");
    case simdjson::dom::element_type::OBJECT:
      return absl::InvalidArgumentError("finds an object, not a scalar");
    case simdjson::dom::element_type::ARRAY:
      return absl::InvalidArgumentError("finds an array, not a scalar");
  }
  return absl::InternalError("unknown JSON type");
}

std::string_view MessageEncoder::RawNumber(const std::string& pointer, double value,
                                           std::string& scratch) {
  // The DOM keeps a decimal only as a double (10.50 would come back as 10.5): take the
  // token as written with the on-demand API, a second look that only decimals pay.
  std::string_view raw;
  simdjson::ondemand::document doc;
  if (!raw_parser_.iterate(checker_.padded()).get(doc) &&
      !doc.at_pointer(pointer).raw_json_token().get(raw)) {
    while (!raw.empty() && (raw.back() == ' ' || raw.back() == '\n' || raw.back() == '\r' ||
                            raw.back() == '\t')) {
      raw.remove_suffix(1);
    }
    scratch.assign(raw);  // the on-demand parser's view goes with its next use
    return scratch;
  }
  return ToChars(value, scratch);
}

void MessageEncoder::AppendEnvelope(std::string_view id, std::string_view type,
                                    std::string_view aggregate_id, std::string_view created_at,
                                    std::string_view lsn, std::string_view payload,
                                    std::string& out) {
  out.append(R"({"id":)");
  AppendJsonString(out, id);
  out.append(R"(,"type":)");
  AppendJsonString(out, type);
  out.append(R"(,"aggregate_id":)");
  AppendJsonString(out, aggregate_id);
  out.append(R"(,"created_at":)");
  if (created_at.empty()) {
    out.append("null");
  } else {
    AppendJsonString(out, created_at);
  }
  out.append(R"(,"lsn":)");
  if (lsn.empty()) {
    out.append("null");
  } else {
    AppendJsonString(out, lsn);
  }
  out.append(R"(,"payload":)");
  out.append(payload);  // already JSON: embedded, not quoted
  out.push_back('}');
}

void MessageEncoder::EncodeProtobuf(const OutboxEvent& event, std::string_view lsn) {
  // Field numbers of proto/outbox/v1/event.proto, in order, as the generated code writes.
  value_.clear();
  AppendProtoString(value_, ::outbox::v1::Event::kIdFieldNumber, event.id);
  AppendProtoString(value_, ::outbox::v1::Event::kTypeFieldNumber, event.type);
  AppendProtoString(value_, ::outbox::v1::Event::kAggregateIdFieldNumber, event.aggregate_id);
  AppendProtoString(value_, ::outbox::v1::Event::kCreatedAtFieldNumber, created_at_view_);
  AppendProtoString(value_, ::outbox::v1::Event::kLsnFieldNumber, lsn);
  AppendProtoString(value_, ::outbox::v1::Event::kPayloadJsonFieldNumber, event.payload);
}

absl::StatusOr<std::string_view> MessageEncoder::PayloadOf(
    std::string_view value, std::span<const sink::Header> headers) {
  switch (format_.format) {
    case ValueFormat::kJson:
    case ValueFormat::kCloudEvents:
      return value;
    case ValueFormat::kCloudEventsJson: {
      // The first `,"data":` is the field: inside the strings before it a quote is
      // escaped; and "data" is last, so the payload runs to the closing brace.
      const size_t at = value.find(kDataField);
      if (at == std::string_view::npos || value.back() != '}') {
        return absl::InvalidArgumentError("not a structured CloudEvent of this encoder");
      }
      const size_t start = at + kDataField.size();
      return value.substr(start, value.size() - start - 1);
    }
    case ValueFormat::kEnvelope: {
      // Rebuilt from the headers, the envelope up to the payload must match exactly.
      decode_scratch_.clear();
      AppendEnvelope(HeaderValue(headers, "id"), HeaderValue(headers, "type"),
                     HeaderValue(headers, "aggregate_id"), HeaderValue(headers, "created_at"),
                     HeaderValue(headers, "lsn"), "", decode_scratch_);
      const size_t prefix = decode_scratch_.size() - 1;  // without the closing brace
      if (value.size() <= prefix + 1 || value.compare(0, prefix, decode_scratch_, 0, prefix) != 0 ||
          value.back() != '}') {
        return absl::InvalidArgumentError("not an envelope of this event");
      }
      return value.substr(prefix, value.size() - prefix - 1);
    }
    case ValueFormat::kProtobuf:
      if (!decoded_->ParseFromArray(value.data(), static_cast<int>(value.size()))) {
        return absl::InvalidArgumentError("not an outbox.v1.Event");
      }
      return std::string_view(decoded_->payload_json());
  }
  return absl::InternalError("unknown value format");
}

std::string MessageEncoder::RowHeadersOf(std::span<const sink::Header> headers) const {
  std::string json;
  for (const sink::Header& h : headers) {
    if (IsOwnHeader(h.name) || IsCloudEventsAttribute(h.name)) continue;
    json.push_back(json.empty() ? '{' : ',');
    AppendJsonString(json, h.name);
    json.push_back(':');
    AppendJsonString(json, h.value);
  }
  if (!json.empty()) json.push_back('}');
  return json;
}

}  // namespace outboxd::outbox
