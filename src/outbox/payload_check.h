// The payload check: a Kafka event value must be a JSON object or array. Anything
// else (a scalar, invalid JSON from a text column) is a poison event, never a crash.
// One simdjson parser and one padded buffer are reused: no allocation per event once
// warmed up.
//
//   PayloadChecker checker;
//   absl::Status s = checker.Check(R"({"pedidoId":"77"})");   // OK
#ifndef OUTBOXD_OUTBOX_PAYLOAD_CHECK_H_
#define OUTBOXD_OUTBOX_PAYLOAD_CHECK_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "simdjson.h"

namespace outboxd::outbox {

class PayloadChecker {
 public:
  // OK for a JSON object or array; InvalidArgument naming what was found otherwise.
  absl::Status Check(std::string_view payload);

 private:
  simdjson::dom::parser parser_;
  std::string padded_;  // payload copy followed by SIMDJSON_PADDING bytes
};

}  // namespace outboxd::outbox

#endif  // OUTBOXD_OUTBOX_PAYLOAD_CHECK_H_
