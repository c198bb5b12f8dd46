// CatchUp (relay/catch_up.h) on a clock the test moves: a backlog over 1 MiB is
// measured, outboxd_catchup_eta_seconds follows the reading pace and is 0 once the
// confirmed position passes the server's position taken at connect.
#include "relay/catch_up.h"

#include <cmath>
#include <optional>
#include <string>

#include "gtest/gtest.h"
#include "observe/metrics.h"

namespace outboxd::relay {
namespace {

constexpr pg::Lsn kStart = 0x10000000;
constexpr pg::Lsn kMiB = 1 << 20;

double Eta(const observe::Metrics& metrics) {
  const std::string text = metrics.Render();
  const std::string name = "\noutboxd_catchup_eta_seconds ";
  const size_t at = text.find(name);
  if (at == std::string::npos) return -1;
  return std::strtod(text.c_str() + at + name.size(), nullptr);
}

struct Harness {
  absl::Time now = absl::FromUnixSeconds(1'700'000'000);
  observe::Metrics metrics{observe::RelayMode::kCdc};
  CatchUp catch_up{&metrics, [this] { return now; }};
};

TEST(CatchUp, EtaFollowsTheReadingPaceAndIsZeroOnceConfirmedPassesTheTarget) {
  Harness h;
  h.catch_up.Begin(kStart, kStart + 64 * kMiB);
  ASSERT_TRUE(h.catch_up.active());
  EXPECT_TRUE(std::isnan(Eta(h.metrics)));  // no pace yet
  h.now += absl::Seconds(4);
  // One large transaction: read a quarter of it, nothing confirmed yet.
  h.catch_up.Observe(kStart + 16 * kMiB, kStart);
  EXPECT_DOUBLE_EQ(Eta(h.metrics), 12);  // 48 MiB at 4 MiB/s
  h.now += absl::Seconds(4);
  h.catch_up.Observe(kStart + 64 * kMiB, kStart);  // all read, not yet acknowledged
  EXPECT_DOUBLE_EQ(Eta(h.metrics), 0);
  EXPECT_TRUE(h.catch_up.active());  // caught up only once confirmed
  h.now += absl::Seconds(1);
  h.catch_up.Observe(kStart + 65 * kMiB, kStart + 65 * kMiB);
  EXPECT_FALSE(h.catch_up.active());
  EXPECT_DOUBLE_EQ(Eta(h.metrics), 0);
}

TEST(CatchUp, LessThanOneMibWaitingIsNoBacklog) {
  Harness h;
  h.catch_up.Begin(kStart, kStart + kMiB - 1);
  EXPECT_FALSE(h.catch_up.active());
  EXPECT_DOUBLE_EQ(Eta(h.metrics), 0);
  h.catch_up.Begin(kStart, kStart - 8);  // a server behind the slot (after a failover)
  EXPECT_FALSE(h.catch_up.active());
}

TEST(CatchUp, ALostSessionLeavesTheEtaUnknown) {
  Harness h;
  h.catch_up.Begin(kStart, kStart + 8 * kMiB);
  h.now += absl::Seconds(1);
  h.catch_up.Observe(kStart + kMiB, kStart + kMiB);
  EXPECT_DOUBLE_EQ(Eta(h.metrics), 7);
  h.catch_up.End();
  EXPECT_FALSE(h.catch_up.active());
  EXPECT_TRUE(std::isnan(Eta(h.metrics)));
}

}  // namespace
}  // namespace outboxd::relay
