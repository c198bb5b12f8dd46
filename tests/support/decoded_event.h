// A collected Kafka message read back as an outbox event, whatever its value format
// (--format json|envelope|protobuf), by a consumer's means: simdjson for the envelope,
// the generated outbox.v1.Event for protobuf. For tests that check the round trip.
//
//   absl::StatusOr<DecodedEvent> e = DecodeEvent("protobuf", collector.Messages()[0]);
//   EXPECT_EQ(e->payload, row.payload);
#ifndef OUTBOXD_TESTS_SUPPORT_DECODED_EVENT_H_
#define OUTBOXD_TESTS_SUPPORT_DECODED_EVENT_H_

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "support/kafka_collector.h"

namespace outboxd::test {

struct DecodedEvent {
  std::string id;
  std::string type;
  std::string aggregate_id;
  std::string created_at;
  std::optional<std::string> lsn;  // nullopt: null in the envelope, absent header (json)
  // json and protobuf: the payload's bytes; envelope: the embedded payload re-printed
  // by simdjson (compare it with Minify(expected)).
  std::string payload;
};

// json: the fields from the headers and the value as payload; envelope and protobuf:
// everything from the value alone (the headers are not consulted).
absl::StatusOr<DecodedEvent> DecodeEvent(std::string_view format, const CollectedMessage& message);

// `json` re-printed by simdjson without whitespace.
std::string Minify(std::string_view json);

}  // namespace outboxd::test

#endif  // OUTBOXD_TESTS_SUPPORT_DECODED_EVENT_H_
