// The Kafka message of an outbox event: key, value and headers, in one of three value
// formats, used by `outboxd run`, `outboxd poll` and `outboxd dead-letter replay`.
//
//   json      the payload exactly as PostgreSQL renders the jsonb (the default)
//   envelope  {"id":..,"type":..,"aggregate_id":..,"created_at":..,"lsn":..,"payload":{..}}
//             (the payload embedded as JSON; "lsn" is null from `outboxd poll`,
//             "created_at" null when the event has none)
//   protobuf  outbox.v1.Event (proto/outbox/v1/event.proto)
//
// Headers, whatever the format: id, type, aggregate_id, created_at (ISO-8601 with
// offset; left out when the event has none), lsn (left out when there is none:
// `outboxd poll`); outboxd_slot (the CDC relay only: "<database>/<slot>", how a
// restarted relay tells its own messages from other producers' when it reads a topic
// back, relay/resume_dedupe.h); content-type for the envelope and protobuf formats
// only; then one header per key of the row's --headers-column object (its values must
// be strings and its keys none of OwnHeaderNames: else the event is refused, a dead
// letter with the reason); then one header per --header NAME=/json/pointer found in
// the payload. A traceparent or tracestate header (in any case) that breaks the W3C
// Trace Context format (outbox/trace_context.h) is then dropped, the event published
// without it, and dropped() says which and why; so is a tracestate without a valid
// traceparent, which the W3C says no one may read. The key
// is the aggregate_id column, or the payload field at --key-pointer.
//
// Encode also checks the payload (a JSON object or array, PayloadChecker) and reads
// the pointers from that one parse. Buffers are reused: once warmed up, the default
// json format allocates nothing per event.
//
//   MessageEncoder encoder({.format = ValueFormat::kEnvelope,
//                           .headers = {{"traceparent", "/trace/traceparent"}}});
//   absl::Status s = encoder.Encode(event, "0/16B3748");
//   const EncodedMessage& m = encoder.message();   // views, valid until the next Encode
//   if (!s.ok()) DeadLetter(m, event.payload, s);  // m still has the headers
//   else Produce({.topic = t, .key = m.key, .value = m.value, .headers = m.headers});
#ifndef OUTBOXD_OUTBOX_MESSAGE_FORMAT_H_
#define OUTBOXD_OUTBOX_MESSAGE_FORMAT_H_

#include <array>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "outbox/event.h"
#include "outbox/payload_check.h"
#include "sink/sink.h"

namespace outbox::v1 {
class Event;
}

namespace outboxd::outbox {

// kCloudEvents: CloudEvents 1.0 in binary content mode (the payload as the value, the
// attributes as headers under MessageFormat::ce_prefix); kCloudEventsJson: structured
// mode (application/cloudevents+json, the payload as "data"). docs/tracing.md.
enum class ValueFormat { kJson, kEnvelope, kProtobuf, kCloudEvents, kCloudEventsJson };

// The value of kSlotHeader (outbox/event.h) for a relay of `slot` on `database`.
std::string SlotMark(std::string_view database, std::string_view slot);

// "json" | "envelope" | "protobuf" | "cloudevents" | "cloudevents-json"; InvalidArgument
// naming the choices otherwise.
absl::StatusOr<ValueFormat> ParseValueFormat(std::string_view name);
std::string_view ValueFormatName(ValueFormat format);

// A Kafka header whose value comes from the payload (--header NAME=/json/pointer).
struct HeaderPointer {
  std::string name;
  std::string pointer;  // RFC 6901, e.g. "/trace/traceparent"
};

// RFC 6901 syntax: "/a/b~1c" (starts with '/', '~' only as "~0" or "~1").
absl::Status CheckJsonPointer(std::string_view pointer);
// "traceparent=/trace/traceparent"; InvalidArgument with the expected form otherwise,
// or when NAME is one of the contract's own headers.
absl::StatusOr<HeaderPointer> ParseHeaderPointer(std::string_view flag_value);

struct MessageFormat {
  ValueFormat format = ValueFormat::kJson;
  std::vector<HeaderPointer> headers;
  std::string key_pointer;  // empty: the key is the aggregate_id column
  // CloudEvents: the `source` attribute (--ce-source), and the binary mode's header
  // prefix, the sink's binding's: "ce_" (Kafka), "cloudEvents_" (AMQP), "ce-" (NATS).
  std::string ce_source = "/outboxd";
  std::string ce_prefix = "ce_";
};

// A header Encode left out: its canonical name (kTraceparent or kTracestate) and the
// reason (a TraceparentDefect or TracestateDefect, or "without_valid_traceparent").
struct DroppedHeader {
  std::string_view name;
  std::string_view reason;
};

// What a relay does with the headers Encode dropped: each one through `count` (the
// relay's outboxd_headers_dropped_total), and a warning naming the event and the first
// header at most once per `interval` (a writer whose every event has a malformed
// traceparent must not flood the log), saying how many more went unlogged meanwhile.
//   DroppedHeadersLog log([&](auto h, auto r) { metrics.HeaderDropped(h, r); });
//   log.Report(event.id, encoder.dropped(), absl::Now);
class DroppedHeadersLog {
 public:
  using Count = std::function<void(std::string_view header, std::string_view reason)>;
  explicit DroppedHeadersLog(Count count, absl::Duration interval = absl::Seconds(10))
      : count_(std::move(count)), interval_(interval) {}
  // Called for every event: nothing dropped costs one comparison, no clock read.
  void Report(std::string_view event_id, std::span<const DroppedHeader> dropped,
              absl::FunctionRef<absl::Time()> now) {
    if (!dropped.empty()) Log(event_id, dropped, now());
  }

 private:
  void Log(std::string_view event_id, std::span<const DroppedHeader> dropped, absl::Time now);

  Count count_;
  absl::Duration interval_;
  uint64_t unlogged_ = 0;
  absl::Time logged_at_ = absl::InfinitePast();
};

struct EncodedMessage {
  std::string_view key;
  std::string_view value;
  std::span<const sink::Header> headers;
};

class MessageEncoder {
 public:
  explicit MessageEncoder(MessageFormat format = {});
  ~MessageEncoder();
  MessageEncoder(const MessageEncoder&) = delete;
  MessageEncoder& operator=(const MessageEncoder&) = delete;

  // Checks the payload and the row's headers and builds message(). `event.created_at` as PostgreSQL
  // renders it or already ISO-8601; `lsn` "X/Y" or empty (no lsn header). InvalidArgument for a
  // payload that is not a JSON object or array, or whose --key-pointer field is missing or not a
  // scalar, or for headers (OutboxEvent::headers) that are not a JSON object of strings or override
  // an own header: message() then holds the outboxd headers, the aggregate_id as key and the
  // payload as value, for the dead letter.
  absl::Status Encode(const OutboxEvent& event, std::string_view lsn);
  const EncodedMessage& message() const { return message_; }
  // The headers the last successful Encode dropped (for the metric and the log).
  std::span<const DroppedHeader> dropped() const { return dropped_; }
  // The created_at header of the last Encode (ISO-8601 with offset).
  std::string_view created_at() const { return created_at_view_; }

  // The payload inside a value this encoder produced, from the message's headers: what
  // a dead letter stores (replay encodes it again). A view into `value` or into this
  // encoder, valid until the next call.
  absl::StatusOr<std::string_view> PayloadOf(std::string_view value,
                                             std::span<const sink::Header> headers);
  // The headers of a message this encoder produced that are not outboxd's own (nor,
  // in binary CloudEvents, its attributes), as a JSON object of strings: what a dead
  // letter keeps of a failed delivery's headers, for replay to send again; "" when
  // there are none. A --header copied from the payload is among them, and replay
  // keeps its value, as a row's header of that name would be kept.
  std::string RowHeadersOf(std::span<const sink::Header> headers) const;

  const MessageFormat& format() const { return format_; }
  // The outboxd_slot header's value on every message from now on (SlotMark); empty: none
  // (`outboxd poll`, dead-letter replay).
  void SetSlotMark(std::string mark) { slot_mark_ = std::move(mark); }

 private:
  void EncodeHeaders(const OutboxEvent& event, std::string_view lsn);
  absl::Status EncodeKey();
  // The row's headers column (jsonb text, may be empty) as headers; on error none.
  absl::Status EncodeRowHeaders(std::string_view json);
  void EncodePointerHeaders();
  // Drops the malformed traceparent and tracestate headers into dropped_.
  void DropMalformedTraceContext();
  void EncodeProtobuf(const OutboxEvent& event, std::string_view lsn);
  // The scalar at `pointer` as header or key text (strings unquoted, other scalars as
  // their JSON text); NotFound when missing, InvalidArgument for null, an object or an
  // array, the message saying which. `out` may point into the parser or `scratch`.
  absl::Status ScalarAt(const std::string& pointer, std::string_view& out, std::string& scratch);
  // A decimal number's text as written in the payload.
  std::string_view RawNumber(const std::string& pointer, double value, std::string& scratch);
  // The envelope, field order fixed and the payload last (PayloadOf relies on it); a
  // null lsn when `lsn` is empty.
  // The CloudEvents attributes' values, in kCloudEventAttributes' order (message_format.cc);
  // an empty one is left out. As headers (binary mode), or as the structured event,
  // "data" last (PayloadOf relies on it).
  using CloudEventValues = std::array<std::string_view, 9>;
  CloudEventValues CloudEventAttributes(const OutboxEvent& event) const;
  // A header name under the binding's prefix in binary mode: an attribute's, which
  // only outboxd sets (a row's is dropped; a dead letter keeps none).
  bool IsCloudEventsAttribute(std::string_view name) const;
  void EncodeCloudEventHeaders(const OutboxEvent& event);
  void AppendStructuredEvent(const OutboxEvent& event);
  // The value of an already encoded header (traceparent, tracestate), or empty.
  std::string_view HeaderOf(std::string_view name) const;
  static void AppendEnvelope(std::string_view id, std::string_view type,
                             std::string_view aggregate_id, std::string_view created_at,
                             std::string_view lsn, std::string_view payload, std::string& out);

  MessageFormat format_;
  PayloadChecker checker_;
  PayloadChecker row_headers_;     // parses the headers column; its values are the headers'
  std::string_view content_type_;  // empty for json
  EncodedMessage message_;
  std::vector<sink::Header> headers_;  // reserved once: contract + pointer headers
  std::string slot_mark_;              // SetSlotMark
  std::vector<std::string> ce_names_;  // the binary mode's header names, prefixed
  std::string created_at_;
  std::string_view created_at_view_;
  std::string value_;
  std::string key_scratch_;
  std::vector<std::string> header_scratch_;  // one per --header
  std::vector<DroppedHeader> dropped_;       // reserved once
  simdjson::ondemand::parser raw_parser_;  // decimals as written, on demand
  // PayloadOf's own buffers: it runs from delivery reports, while message() may still
  // be waiting for room in the producer's queue.
  std::string decode_scratch_;
  std::unique_ptr<::outbox::v1::Event> decoded_;
};

}  // namespace outboxd::outbox

#endif  // OUTBOXD_OUTBOX_MESSAGE_FORMAT_H_
