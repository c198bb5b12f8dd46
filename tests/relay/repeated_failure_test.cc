// RepeatedFailure (relay/repeated_failure.h): sessions that fail again and again at
// one position make the relay stuck, with the reason and the stuck transaction's
// commit time; a session that fails elsewhere, or a confirmation past it, does not.
#include "relay/repeated_failure.h"

#include "gtest/gtest.h"

namespace outboxd::relay {
namespace {

const absl::Status kIndexTooSmall = absl::ResourceExhaustedError(
    "index row size 4528 exceeds btree version 4 maximum 2704 (SQLSTATE 54000)");

TEST(RepeatedFailure, ThreeSessionsFailingAtOnePositionAreStuckUntilItIsConfirmedPast) {
  RepeatedFailure failures;
  const FailurePoint at{.position = 0x16B3748, .commit_us = 1796299200000000};
  EXPECT_FALSE(failures.SessionFailed(at, kIndexTooSmall));
  EXPECT_FALSE(failures.SessionFailed(at, kIndexTooSmall));
  EXPECT_FALSE(failures.stuck());
  EXPECT_EQ(failures.reason(), "");
  // failed before reading it
  EXPECT_TRUE(failures.SessionFailed({.position = at.position}, kIndexTooSmall));
  ASSERT_TRUE(failures.stuck());
  EXPECT_EQ(failures.stuck_commit_us(), at.commit_us);
  EXPECT_EQ(failures.reason(),
            "stuck: 3 sessions in a row failed at 0/16B3748, the transaction committed at "
            "2026-12-03T12:00:00Z; last error: RESOURCE_EXHAUSTED: index row size 4528 exceeds "
            "btree version 4 maximum 2704 (SQLSTATE 54000) (nothing after it is published until "
            "that is fixed)");
  EXPECT_FALSE(failures.Confirmed(at.position));
  EXPECT_TRUE(failures.stuck());
  EXPECT_TRUE(failures.Confirmed(at.position + 1));
  EXPECT_FALSE(failures.stuck());
  EXPECT_EQ(failures.stuck_commit_us(), std::nullopt);
}

TEST(RepeatedFailure, FailuresThatMoveOnAreNoStall) {
  RepeatedFailure failures;
  for (pg::Lsn at = 100; at < 110; ++at) {
    EXPECT_FALSE(failures.SessionFailed({.position = at}, kIndexTooSmall));
  }
  EXPECT_FALSE(failures.stuck());
  EXPECT_FALSE(failures.SessionFailed({.position = 109}, kIndexTooSmall));
  EXPECT_TRUE(failures.SessionFailed({.position = 109}, kIndexTooSmall));
  EXPECT_TRUE(failures.stuck());
}

// Seen in CI: stuck at one position, the watermark moved a little (an empty
// transaction confirmed) and the next session failed there, then the one after
// succeeded. The failure elsewhere must say the stuck state changed, or /healthz keeps
// the old reason and the stall alert never resolves.
TEST(RepeatedFailure, AFailureAtANewPositionEndsTheStuckStateAndSaysSo) {
  RepeatedFailure failures;
  for (int i = 0; i < RepeatedFailure::kStuckAfter; ++i) {
    (void)failures.SessionFailed({.position = 0x54C767F8, .commit_us = 1}, kIndexTooSmall);
  }
  ASSERT_TRUE(failures.stuck());
  EXPECT_TRUE(failures.SessionFailed({.position = 0x54C76898}, kIndexTooSmall));
  EXPECT_FALSE(failures.stuck());
  EXPECT_EQ(failures.reason(), "");
  EXPECT_EQ(failures.stuck_commit_us(), std::nullopt);
  EXPECT_FALSE(failures.Confirmed(0x54C77120));  // nothing left to end
}

TEST(RepeatedFailure, TheReasonIsOneLineWhateverTheErrorQuotes) {
  RepeatedFailure failures;
  for (int i = 0; i < 3; ++i) {
    (void)failures.SessionFailed({.position = 1}, absl::InternalError("row a\nFORGED line"));
  }
  EXPECT_EQ(failures.reason().find('\n'), std::string::npos) << failures.reason();
}

}  // namespace
}  // namespace outboxd::relay
