// The producer's and the mock cluster's own librdkafka pieces: librdkafka's text on
// one line, a value taken out of a text, and the one mapping of its error codes to
// status codes. What clients outside this folder need is in kafka/rdkafka_client.h.
#ifndef OUTBOXD_KAFKA_INTERNAL_RDKAFKA_UTIL_H_
#define OUTBOXD_KAFKA_INTERNAL_RDKAFKA_UTIL_H_

#include <librdkafka/rdkafka.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace outboxd::kafka::internal {

// librdkafka's error text with its line breaks turned into spaces.
std::string OneLine(absl::string_view text);

// `text` with `value` replaced by [redacted] (quoted, and anywhere when it is longer
// than one character).
std::string RedactValue(absl::string_view text, const std::string& value);

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

}  // namespace outboxd::kafka::internal

#endif  // OUTBOXD_KAFKA_INTERNAL_RDKAFKA_UTIL_H_
