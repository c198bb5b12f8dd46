// StallWatch: one warning when events in flight go unacknowledged past the
// threshold, one line when it recovers, nothing in between (logs are not flooded).
#include "observe/stall_watch.h"

#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "spdlog/spdlog.h"
#include "support/captured_log.h"
#include "support/wait_until.h"

namespace outboxd::observe {
namespace {

using ::testing::HasSubstr;

// Issue 16: a transaction held for a --standby-slot stalls before the broker; the
// warning names the slot and sends the reader to the standbys.
TEST(StallWatch, NamesTheStandbySlotPublishingWaitsFor) {
  test::CapturedLog log;
  HealthState health;
  StallWatch watch(health, absl::Seconds(30));
  const absl::Time t0 = absl::FromUnixSeconds(1'800'000'000);
  health.SetInFlight(1, t0);
  health.SetHeldBy("node_b");
  EXPECT_TRUE(watch.Check(t0 + absl::Seconds(31)));
  EXPECT_EQ(log.Take(),
            "warning stalled: publishing held for 31s: waiting for --standby-slot node_b to flush "
            "a committed transaction (is its standby down or its WAL receiver stuck?); the slot "
            "is not confirmed past them (check the standbys)\n");
}

TEST(StallWatch, LogsOnceWhenAStallStartsAndOnceWhenItEnds) {
  test::CapturedLog log;
  HealthState health;
  StallWatch watch(health, absl::Seconds(30));
  const absl::Time t0 = absl::FromUnixSeconds(1'800'000'000);
  health.SetInFlight(40, t0);  // events go in flight: the clock starts

  EXPECT_FALSE(watch.Check(t0 + absl::Seconds(29)));
  EXPECT_EQ(log.Take(), "");

  EXPECT_TRUE(watch.Check(t0 + absl::Seconds(31)));
  EXPECT_EQ(log.Take(),
            "warning stalled: no broker acknowledgement for 31s with 40 events in flight; the "
            "slot is not confirmed past them (check the brokers)\n");
  EXPECT_TRUE(watch.Check(t0 + absl::Seconds(60)));  // still stalled: no second line
  EXPECT_EQ(log.Take(), "");

  health.Acknowledged(t0 + absl::Seconds(75));
  EXPECT_FALSE(watch.Check(t0 + absl::Seconds(76)));
  EXPECT_EQ(log.Take(), "info stall over: the broker acknowledges again (stalled 76s)\n");
  EXPECT_FALSE(watch.Check(t0 + absl::Seconds(80)));
  EXPECT_EQ(log.Take(), "");
}

TEST(StallWatch, NothingInFlightIsNeverAStall) {
  test::CapturedLog log;
  HealthState health;
  StallWatch watch(health, absl::Seconds(1));
  EXPECT_FALSE(watch.Check(absl::Now() + absl::Hours(1)));
  EXPECT_EQ(log.Take(), "");
}

TEST(StallWatch, ItsThreadReportsAStallWithoutAnyoneCallingIt) {
  test::CapturedLog log;
  HealthState health;
  health.SetInFlight(3, absl::Now() - absl::Seconds(10));
  StallWatch watch(health, absl::Seconds(1), absl::Milliseconds(10));
  watch.Start();
  std::string seen;
  EXPECT_TRUE(test::WaitUntil(
      absl::Seconds(30),
      [&] {
        seen += log.Take();
        return absl::StrContains(seen, "stalled: no broker acknowledgement for 10s with 3 events");
      },
      absl::Milliseconds(10)))
      << seen;
}

}  // namespace
}  // namespace outboxd::observe
