// The payload check: a Kafka event value must be a JSON object or array. Anything
// else (a scalar, invalid JSON from a text column) is a poison event, never a crash.
// One simdjson parser and one padded buffer are reused: no allocation per event once
// warmed up. The parsed document stays available until the next Check, so callers
// that need fields of the payload (message_format.h) do not parse it twice.
//
//   PayloadChecker checker;
//   absl::Status s = checker.Check(R"({"pedidoId":"77"})");   // OK
//   simdjson::dom::element id = checker.root()["pedidoId"];
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

  // The document of the last successful Check; valid until the next Check.
  simdjson::dom::element root() const { return root_; }
  // The last checked payload followed by SIMDJSON_PADDING bytes, for a second look
  // with simdjson's on-demand API (number tokens as written).
  simdjson::padded_string_view padded() const {
    return simdjson::padded_string_view(padded_.data(), size_, padded_.size());
  }

 private:
  simdjson::dom::parser parser_;
  std::string padded_;  // payload copy followed by SIMDJSON_PADDING bytes
  size_t size_ = 0;      // of the payload in padded_
  simdjson::dom::element root_;
};

}  // namespace outboxd::outbox

#endif  // OUTBOXD_OUTBOX_PAYLOAD_CHECK_H_
