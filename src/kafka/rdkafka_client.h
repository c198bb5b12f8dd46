// What a librdkafka client outside this folder needs from it (the inbox's Kafka
// consumer, the test collectors; the producer uses it too): a property set with a
// one-line error that never shows the value, and a consumed message copied out of
// librdkafka's memory. Includes librdkafka, so only code that links it includes this;
// publisher.h and mock_cluster.h keep librdkafka out of their users.
//
//   OUTBOXD_RETURN_IF_ERROR(kafka::SetProperty(conf, "group.id", "billing"));
//   inbox::Message m;
//   kafka::CopyMessage(rkmessage, m);
#ifndef OUTBOXD_KAFKA_RDKAFKA_CLIENT_H_
#define OUTBOXD_KAFKA_RDKAFKA_CLIENT_H_

#include <librdkafka/rdkafka.h>

#include <cstddef>
#include <string>

#include "absl/status/status.h"

namespace outboxd::kafka {

// InvalidArgument "Kafka property NAME=[redacted]: <librdkafka's reason>" when
// refused: the value is taken out of the message (and of librdkafka's reason) for
// every property, since a refused name may be a misspelt secret one.
absl::Status SetProperty(rd_kafka_conf_t* conf, const std::string& name, const std::string& value);

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

}  // namespace outboxd::kafka

#endif  // OUTBOXD_KAFKA_RDKAFKA_CLIENT_H_
