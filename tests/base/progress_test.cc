// Progress: the arithmetic behind the line (rate over the recent window, time left,
// percentage), how often it is drawn and the summary, on a clock the test moves.
#include "base/progress.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace outboxd {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// A clock the test moves, and the lines a Progress drew.
struct Harness {
  absl::Time now = absl::FromUnixSeconds(1'700'000'000);
  std::vector<std::string> lines;

  Progress::Options Options(std::string what, std::optional<int64_t> total) {
    return {.what = std::move(what),
            .total = total,
            .clock = [this] { return now; },
            .draw = [this](std::string_view line) { lines.emplace_back(line); }};
  }
};

TEST(Progress, RateIsDoneOverElapsedAndTimeLeftFollowsFromIt) {
  Harness h;
  Progress p(h.Options("cleanup", 1000));
  EXPECT_FALSE(p.Rate().has_value());  // one sample: no rate yet
  EXPECT_FALSE(p.TimeLeft().has_value());
  h.now += absl::Seconds(2);
  p.Update(200);
  ASSERT_TRUE(p.Rate().has_value());
  EXPECT_DOUBLE_EQ(*p.Rate(), 100.0);
  EXPECT_EQ(p.TimeLeft(), absl::Seconds(8));  // 800 left at 100/s
  EXPECT_EQ(p.Line(), "cleanup: 200/1000 rows (20%), 100 rows/s, 8s left");
}

TEST(Progress, RateFollowsTheRecentWindowNotTheWholeRun) {
  Harness h;
  Progress p(h.Options("replay", std::nullopt));
  // 30 s at 1,000/s, then 30 s at 10/s: the rate says 10/s, not the run's average.
  int64_t done = 0;
  for (int s = 0; s < 30; ++s) {
    h.now += absl::Seconds(1);
    p.Update(done += 1000);
  }
  for (int s = 0; s < 30; ++s) {
    h.now += absl::Seconds(1);
    p.Update(done += 10);
  }
  ASSERT_TRUE(p.Rate().has_value());
  EXPECT_DOUBLE_EQ(*p.Rate(), 10.0);
  EXPECT_FALSE(p.TimeLeft().has_value());  // no total: no time left
  EXPECT_THAT(p.Line(), Not(HasSubstr("left")));
  EXPECT_THAT(p.Line(), Not(HasSubstr("%")));
}

TEST(Progress, NoProgressMeansNoTimeLeftAndDoneMeansZero) {
  Harness h;
  Progress p(h.Options("backfill", 100));
  h.now += absl::Seconds(5);
  p.Update(0);
  EXPECT_FALSE(p.TimeLeft().has_value());  // rate 0: never, not infinity
  p.Update(100);
  EXPECT_EQ(p.TimeLeft(), absl::ZeroDuration());
  p.Update(150);  // more than the estimate (rows written meanwhile): not negative
  EXPECT_EQ(p.TimeLeft(), absl::ZeroDuration());
  EXPECT_EQ(p.Line(), "backfill: 150/100 rows (100%), 30 rows/s, 0s left");
}

TEST(Progress, DrawsAtMostFourTimesASecond) {
  Harness h;
  Progress p(h.Options("cleanup", 100'000));
  for (int i = 1; i <= 100; ++i) {  // one update every 10 ms for one second
    h.now += absl::Milliseconds(10);
    p.Update(i * 100);
  }
  EXPECT_EQ(h.lines.size(), 4u);  // at 10, 260, 510 and 760 ms
  EXPECT_EQ(h.lines.front(), "cleanup: 100/100000 rows (0%), 10000 rows/s, 10s left");
}

TEST(Progress, FinishErasesTheLineOnceAndSummarisesTheWholeRun) {
  Harness h;
  {
    Progress p(h.Options("cleanup", 4000));
    h.now += absl::Seconds(1);
    p.Update(1000);
    h.now += absl::Seconds(3);
    p.Update(4000);
    EXPECT_EQ(p.Summary(), "cleanup done: 4000 rows in 4s (1000 rows/s)");
    p.Finish();
    p.Finish();
  }  // and the destructor does not finish again
  ASSERT_EQ(h.lines.size(), 3u);
  EXPECT_EQ(h.lines.back(), "");  // erased
}

// Issue 28 point 12: a run under a second said "in 0s (777727 rows/s)".
TEST(Progress, AShortRunShowsItsMillisecondsAndARateThatFits) {
  Harness h;
  Progress p(h.Options("cleanup of outbox", 1000));
  h.now += absl::Microseconds(1286);
  p.Update(1000);
  EXPECT_EQ(p.Summary(), "cleanup of outbox done: 1000 rows in 1ms (777605 rows/s)");
  Progress instant(h.Options("cleanup of inbox", 5));
  instant.Update(5);
  EXPECT_EQ(instant.Summary(), "cleanup of inbox done: 5 rows in 0s");
}

TEST(Progress, NothingDrawnMeansNothingErased) {
  Harness h;
  {
    Progress p(h.Options("replay", 0));
    EXPECT_EQ(p.Summary(), "replay done: 0 rows in 0s");
  }
  EXPECT_TRUE(h.lines.empty());
}

TEST(Progress, BytesDoneWithEventsPerSecond) {
  Harness h;
  Progress::Options options = h.Options("catch-up", 64 << 20);
  options.unit = Progress::Unit::kBytes;
  options.rate_unit = Progress::Unit::kEvents;
  Progress p(std::move(options));
  h.now += absl::Seconds(4);
  p.Update(16 << 20, /*items=*/20'000);
  EXPECT_EQ(p.TimeLeft(), absl::Seconds(12));  // 48 MiB at 4 MiB/s
  EXPECT_EQ(p.Line(), "catch-up: 16.0/64.0 MiB (25%), 5000 events/s, 12s left");
  // Short of its total (a session lost): the summary says where it stopped.
  EXPECT_EQ(p.Summary(), "catch-up stopped at 16.0/64.0 MiB, 20000 events in 4s (5000 events/s)");
}

TEST(Progress, TheStderrLineIsOffUnlessTheCliTurnsItOn) {
  EXPECT_FALSE(ProgressLineEnabled());
  EXPECT_FALSE(TakeProgressLine());
}

}  // namespace
}  // namespace outboxd
