// Small pieces every librdkafka client here needs (the producer, the inbox consumer,
// the test collectors): setting a property with a one-line error, walking a message's
// headers, copying a consumed message out. Includes librdkafka: only for code that
// links it anyway.
#ifndef OUTBOXD_KAFKA_INTERNAL_RDKAFKA_UTIL_H_
#define OUTBOXD_KAFKA_INTERNAL_RDKAFKA_UTIL_H_

#include <librdkafka/rdkafka.h>

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace outboxd::kafka::internal {

// librdkafka's error text with its line breaks turned into spaces.
std::string OneLine(absl::string_view text);

// `text` with `value` replaced by [redacted] (quoted, and anywhere when it is longer
// than one character).
std::string RedactValue(absl::string_view text, const std::string& value);

// InvalidArgument "Kafka property NAME=[redacted]: <librdkafka's reason>" when
// refused: the value is taken out of the message (and of librdkafka's reason) for
// every property, since a refused name may be a misspelt secret one.
absl::Status SetProperty(rd_kafka_conf_t* conf, const std::string& name,
                         const std::string& value);

// The one mapping of librdkafka's error codes to status codes, for every call into
// librdkafka (produce, delivery reports, the mock cluster):
//   Aborted            __FATAL: the producer must be recreated;
//   ResourceExhausted  __QUEUE_FULL: serve delivery reports, then produce again;
//   InvalidArgument    the message can never be delivered (too large, invalid);
//   NotFound           unknown topic, partition or (mock) broker;
//   AlreadyExists      (mock) topic exists;
//   PermissionDenied   topic or cluster authorization failed;
//   Cancelled          purged at shutdown;
//   DeadlineExceeded   message timed out;
//   `otherwise`        any other code. A call that refuses at once and did not say
//                      why refuses this input (InvalidArgument); a delivery that
//                      failed later failed for the brokers' state (Unavailable).
// OK for RD_KAFKA_RESP_ERR_NO_ERROR; `message` is the status's message otherwise.
//   return ErrorStatus(err, StrCat("Kafka produce to topic \"t\": ", rd_kafka_err2str(err)),
//                      absl::StatusCode::kInvalidArgument);
absl::Status ErrorStatus(rd_kafka_resp_err_t err, absl::string_view message,
                         absl::StatusCode otherwise);

// Calls f(name, value, size) for each header of `msg`, in order.
template <typename F>
void ForEachHeader(const rd_kafka_message_t* msg, F&& f) {
  rd_kafka_headers_t* headers = nullptr;
  if (rd_kafka_message_headers(msg, &headers) != RD_KAFKA_RESP_ERR_NO_ERROR) return;
  const char* name;
  const void* value;
  size_t size;
  for (size_t i = 0;
       rd_kafka_header_get_all(headers, i, &name, &value, &size) == RD_KAFKA_RESP_ERR_NO_ERROR;
       ++i) {
    f(name, value, size);
  }
}

// A consumed message's fields copied into `out`, any struct with `topic`, `partition`,
// `offset`, `key`, `value` (empty for a null key or value) and `headers` (name-value
// pairs, in order): the inbox's Message and the test collector's, which both keep
// the message after librdkafka frees it.
//   inbox::Message m;
//   CopyMessage(rkmessage, m);
template <typename T>
void CopyMessage(const rd_kafka_message_t* msg, T& out) {
  const auto bytes = [](const void* data, size_t size) {
    return data == nullptr ? std::string() : std::string(static_cast<const char*>(data), size);
  };
  out.topic = rd_kafka_topic_name(msg->rkt);
  out.partition = msg->partition;
  out.offset = msg->offset;
  out.key = bytes(msg->key, msg->key_len);
  out.value = bytes(msg->payload, msg->len);
  ForEachHeader(msg, [&out, &bytes](const char* name, const void* value, size_t size) {
    out.headers.emplace_back(name, bytes(value, size));
  });
}

}  // namespace outboxd::kafka::internal

#endif  // OUTBOXD_KAFKA_INTERNAL_RDKAFKA_UTIL_H_
