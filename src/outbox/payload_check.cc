// simdjson needs SIMDJSON_PADDING readable bytes after the input; replication
// buffers give no such promise, so the payload is copied into a reused buffer.
#include "outbox/payload_check.h"

#include "absl/strings/str_cat.h"

namespace outboxd::outbox {

absl::Status PayloadChecker::Check(std::string_view payload) {
  if (padded_.size() < payload.size() + simdjson::SIMDJSON_PADDING) {
    padded_.resize(payload.size() + simdjson::SIMDJSON_PADDING);
  }
  padded_.replace(0, payload.size(), payload);
  size_ = payload.size();
  simdjson::dom::element& root = root_;
  auto error = parser_.parse(padded_.data(), payload.size(), false).get(root);
  if (error) {
    return absl::InvalidArgumentError(
        absl::StrCat("payload is not valid JSON: ", simdjson::error_message(error)));
  }
  switch (root.type()) {
    case simdjson::dom::element_type::OBJECT:
    case simdjson::dom::element_type::ARRAY:
      return absl::OkStatus();
    default:
      return absl::InvalidArgumentError(
          "payload is a JSON scalar; an event needs an object or array");
  }
}

}  // namespace outboxd::outbox
