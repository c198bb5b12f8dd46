// Annotate (base/annotate.h): the one way to reword an error on its way up.
#include "base/annotate.h"

#include <gtest/gtest.h>

#include "absl/strings/cord.h"

namespace outboxd {
namespace {

constexpr char kSqlState[] = "type.googleapis.com/outboxd.SqlState";  // pg/connection.cc

absl::Status ServerError() {
  absl::Status status = absl::NotFoundError("relation \"outbox\" does not exist");
  status.SetPayload(kSqlState, absl::Cord("42P01"));
  return status;
}

TEST(Annotate, KeepsTheCodeAndEveryPayloadUnderTheNewWording) {
  const absl::Status out =
      Annotate(ServerError(), "cannot add the event to outbox: ", " (run setup)");
  EXPECT_EQ(out.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(out.message(),
            "cannot add the event to outbox: relation \"outbox\" does not exist (run setup)");
  ASSERT_TRUE(out.GetPayload(kSqlState).has_value());
  EXPECT_EQ(std::string(*out.GetPayload(kSqlState)), "42P01");
}

TEST(Annotate, ChangesTheCodeOnlyWhenAsked) {
  const absl::Status out =
      Annotate(ServerError(), "--expect query failed: ", "", absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(out.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(out.GetPayload(kSqlState).has_value());
}

TEST(Annotate, LeavesOkAsOk) { EXPECT_TRUE(Annotate(absl::OkStatus(), "never shown: ").ok()); }

}  // namespace
}  // namespace outboxd
