// Backoff: the wait doubles from the base up to the cap and Reset() starts over; with
// jitter (the relays' reconnects) each wait lies in the upper half of its ceiling, without
// (the inbox consumer's retries) it is the ceiling itself.
#include "base/backoff.h"

#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace outboxd {
namespace {

using absl::Milliseconds;

TEST(Backoff, WithoutJitterDoublesFromTheBaseUpToTheCap) {
  Backoff backoff(Milliseconds(100), Milliseconds(500), Backoff::Jitter::kNone);
  EXPECT_EQ(backoff.Next(), Milliseconds(100));
  EXPECT_EQ(backoff.Next(), Milliseconds(200));
  EXPECT_EQ(backoff.Next(), Milliseconds(400));
  EXPECT_EQ(backoff.Next(), Milliseconds(500));
  EXPECT_EQ(backoff.Next(), Milliseconds(500));
  EXPECT_EQ(backoff.attempts(), 5);
}

TEST(Backoff, ResetStartsOverFromTheBase) {
  Backoff backoff(Milliseconds(100), absl::Seconds(5), Backoff::Jitter::kNone);
  backoff.Next();
  backoff.Next();
  backoff.Reset();
  EXPECT_EQ(backoff.attempts(), 0);
  EXPECT_EQ(backoff.Next(), Milliseconds(100));
}

TEST(Backoff, StaysAtTheCapHoweverManyAttempts) {
  Backoff backoff(Milliseconds(100), absl::Seconds(30), Backoff::Jitter::kNone);
  for (int i = 0; i < 100; ++i) backoff.Next();  // 2^99 * 100 ms would overflow
  EXPECT_EQ(backoff.Next(), absl::Seconds(30));
}

TEST(Backoff, WithJitterEachWaitLiesInTheUpperHalfOfItsCeiling) {
  for (int run = 0; run < 200; ++run) {
    Backoff backoff(Milliseconds(200), absl::Seconds(1));  // Jitter::kHalf by default
    for (absl::Duration ceiling : {Milliseconds(200), Milliseconds(400), Milliseconds(800),
                                   absl::Seconds(1), absl::Seconds(1)}) {
      const absl::Duration wait = backoff.Next();
      ASSERT_GE(wait, ceiling / 2) << "run " << run;
      ASSERT_LE(wait, ceiling) << "run " << run;
    }
  }
}

TEST(Backoff, WithJitterTwoClientsDoNotWaitInLockstep) {
  Backoff a(absl::Seconds(1), absl::Seconds(1));
  Backoff b(absl::Seconds(1), absl::Seconds(1));
  bool differ = false;
  for (int i = 0; i < 10 && !differ; ++i) differ = a.Next() != b.Next();
  EXPECT_TRUE(differ) << "ten equal waits in a row: the two are not seeded apart";
}

}  // namespace
}  // namespace outboxd
