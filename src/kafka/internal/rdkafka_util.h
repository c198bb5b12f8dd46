// Small pieces every librdkafka client here needs (the producer, the inbox consumer,
// the test collectors): setting a property with a one-line error, and walking a
// message's headers. Includes librdkafka: only for code that links it anyway.
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

}  // namespace outboxd::kafka::internal

#endif  // OUTBOXD_KAFKA_INTERNAL_RDKAFKA_UTIL_H_
