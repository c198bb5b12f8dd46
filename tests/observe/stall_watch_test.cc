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
#include "spdlog/sinks/base_sink.h"
#include "spdlog/spdlog.h"
#include "support/wait_until.h"

namespace outboxd::observe {
namespace {

using ::testing::HasSubstr;

// A string the watch's own thread may log into while the test reads it.
class StringSink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  std::string Take() {
    std::lock_guard lock(mutex_);
    return std::exchange(text_, "");
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t line;
    formatter_->format(msg, line);
    text_.append(line.data(), line.size());
  }
  void flush_() override {}

 private:
  std::string text_;
};

// Routes the default logger into a string for the test's duration.
class CapturedLog {
 public:
  CapturedLog() : previous_(spdlog::default_logger()) {
    auto logger = std::make_shared<spdlog::logger>("captured", sink_);
    logger->set_pattern("%l %v");
    spdlog::set_default_logger(logger);
  }
  ~CapturedLog() { spdlog::set_default_logger(previous_); }
  std::string Take() { return sink_->Take(); }

 private:
  std::shared_ptr<StringSink> sink_ = std::make_shared<StringSink>();
  std::shared_ptr<spdlog::logger> previous_;
};

// Issue 16: a transaction held for a --standby-slot stalls before the broker; the
// warning names the slot and sends the reader to the standbys.
TEST(StallWatch, NamesTheStandbySlotPublishingWaitsFor) {
  CapturedLog log;
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
  CapturedLog log;
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
  CapturedLog log;
  HealthState health;
  StallWatch watch(health, absl::Seconds(1));
  EXPECT_FALSE(watch.Check(absl::Now() + absl::Hours(1)));
  EXPECT_EQ(log.Take(), "");
}

TEST(StallWatch, ItsThreadReportsAStallWithoutAnyoneCallingIt) {
  CapturedLog log;
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
