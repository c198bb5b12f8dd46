// internal::ErrorStatus (kafka/internal/rdkafka_util.h): the one mapping of
// librdkafka's error codes, shared by produce, delivery reports and the mock cluster.
#include <gtest/gtest.h>
#include <librdkafka/rdkafka.h>

#include "kafka/internal/rdkafka_util.h"

namespace outboxd::kafka::internal {
namespace {

using Code = absl::StatusCode;

Code CodeOf(rd_kafka_resp_err_t err, Code otherwise) {
  return ErrorStatus(err, "m", otherwise).code();
}

TEST(ErrorStatus, NamesTheSameCodeWhicheverCallMetTheError) {
  for (Code otherwise : {Code::kInvalidArgument, Code::kUnavailable}) {
    EXPECT_EQ(CodeOf(RD_KAFKA_RESP_ERR__FATAL, otherwise), Code::kAborted);
    EXPECT_EQ(CodeOf(RD_KAFKA_RESP_ERR__QUEUE_FULL, otherwise), Code::kResourceExhausted);
    EXPECT_EQ(CodeOf(RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE, otherwise), Code::kInvalidArgument);
    // Produce used to say InvalidArgument here, the delivery report NotFound.
    EXPECT_EQ(CodeOf(RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC, otherwise), Code::kNotFound);
    EXPECT_EQ(CodeOf(RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART, otherwise), Code::kNotFound);
    EXPECT_EQ(CodeOf(RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS, otherwise), Code::kAlreadyExists);
    EXPECT_EQ(CodeOf(RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED, otherwise),
              Code::kPermissionDenied);
    EXPECT_EQ(CodeOf(RD_KAFKA_RESP_ERR__PURGE_INFLIGHT, otherwise), Code::kCancelled);
    EXPECT_EQ(CodeOf(RD_KAFKA_RESP_ERR__MSG_TIMED_OUT, otherwise), Code::kDeadlineExceeded);
  }
}

TEST(ErrorStatus, LeavesAnUnnamedCodeToTheCaller) {
  EXPECT_EQ(CodeOf(RD_KAFKA_RESP_ERR__TRANSPORT, Code::kUnavailable), Code::kUnavailable);
  EXPECT_EQ(CodeOf(RD_KAFKA_RESP_ERR__INVALID_ARG, Code::kInvalidArgument), Code::kInvalidArgument);
}

TEST(ErrorStatus, IsOkForNoErrorAndKeepsTheMessageOtherwise) {
  EXPECT_TRUE(ErrorStatus(RD_KAFKA_RESP_ERR_NO_ERROR, "m", Code::kUnavailable).ok());
  EXPECT_EQ(
      ErrorStatus(RD_KAFKA_RESP_ERR__FATAL, "Kafka produce: fatal", Code::kUnavailable).message(),
      "Kafka produce: fatal");
}

}  // namespace
}  // namespace outboxd::kafka::internal
