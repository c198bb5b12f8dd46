#include "kafka/internal/rdkafka_util.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace outboxd::kafka::internal {

std::string OneLine(absl::string_view text) {
  return absl::StrReplaceAll(text, {{"\r", " "}, {"\n", " "}});
}

std::string RedactValue(absl::string_view text, const std::string& value) {
  if (value.empty()) return std::string(text);
  // librdkafka quotes the value it refuses ("Invalid value \"x\" for ..."); a longer
  // value is also taken out wherever else it shows. A one-character value is only
  // taken out quoted, or every digit of the reason would go with it.
  std::string out =
      absl::StrReplaceAll(text, {{absl::StrCat("\"", value, "\""), "\"[redacted]\""}});
  if (value.size() >= 2) out = absl::StrReplaceAll(out, {{value, "[redacted]"}});
  return out;
}

absl::Status ErrorStatus(rd_kafka_resp_err_t err, absl::string_view message,
                         absl::StatusCode otherwise) {
  using Code = absl::StatusCode;
  static constexpr struct {
    rd_kafka_resp_err_t err;
    Code code;
  } kCodes[] = {
      {RD_KAFKA_RESP_ERR__FATAL, Code::kAborted},
      {RD_KAFKA_RESP_ERR__QUEUE_FULL, Code::kResourceExhausted},
      {RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE, Code::kInvalidArgument},
      {RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE, Code::kInvalidArgument},
      {RD_KAFKA_RESP_ERR_INVALID_MSG, Code::kInvalidArgument},
      {RD_KAFKA_RESP_ERR_INVALID_RECORD, Code::kInvalidArgument},
      {RD_KAFKA_RESP_ERR_TOPIC_EXCEPTION, Code::kInvalidArgument},
      {RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC, Code::kNotFound},
      {RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART, Code::kNotFound},
      {RD_KAFKA_RESP_ERR__UNKNOWN_BROKER, Code::kNotFound},
      {RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS, Code::kAlreadyExists},
      {RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED, Code::kPermissionDenied},
      {RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED, Code::kPermissionDenied},
      {RD_KAFKA_RESP_ERR__PURGE_QUEUE, Code::kCancelled},
      {RD_KAFKA_RESP_ERR__PURGE_INFLIGHT, Code::kCancelled},
      {RD_KAFKA_RESP_ERR__MSG_TIMED_OUT, Code::kDeadlineExceeded},
  };
  if (err == RD_KAFKA_RESP_ERR_NO_ERROR) return absl::OkStatus();
  for (const auto& entry : kCodes) {
    if (entry.err == err) return absl::Status(entry.code, message);
  }
  return absl::Status(otherwise, message);
}

}  // namespace outboxd::kafka::internal
