// PeriodicThread: calls its function at once and then every interval, and Stop() or
// destruction ends it promptly however long the interval. The bounds are generous
// (seconds where milliseconds are expected) so a loaded machine does not fail them.
#include "base/periodic_thread.h"

#include <atomic>

#include "gtest/gtest.h"

namespace outboxd {
namespace {

// Waits up to 10 s for `done`; whether it came true.
template <typename Predicate>
bool WaitFor(Predicate done) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!done() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(1));
  return done();
}

TEST(PeriodicThread, CallsTheFunctionAgainEachInterval) {
  std::atomic<int> calls{0};
  PeriodicThread thread;
  thread.Start(absl::Milliseconds(1), [&] { calls++; });
  EXPECT_TRUE(WaitFor([&] { return calls >= 5; })) << calls;
  thread.Stop();
}

TEST(PeriodicThread, CallsAtOnceThenStopsPromptlyDespiteALongInterval) {
  std::atomic<int> calls{0};
  PeriodicThread thread;
  thread.Start(absl::Hours(1), [&] { calls++; });
  EXPECT_TRUE(WaitFor([&] { return calls == 1; }));  // the first call does not wait
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_EQ(calls, 1);  // no second call: the interval has not passed
  const absl::Time stop = absl::Now();
  thread.Stop();
  EXPECT_LT(absl::Now() - stop, absl::Seconds(1));
  EXPECT_EQ(calls, 1);
}

TEST(PeriodicThread, DestructionStopsItPromptlyAndForGood) {
  std::atomic<int> calls{0};
  absl::Time destroyed;
  {
    PeriodicThread thread;
    thread.Start(absl::Hours(1), [&] { calls++; });
    ASSERT_TRUE(WaitFor([&] { return calls == 1; }));
    destroyed = absl::Now();
  }
  EXPECT_LT(absl::Now() - destroyed, absl::Seconds(1));

  {
    PeriodicThread thread;
    thread.Start(absl::Milliseconds(1), [&] { calls++; });
    ASSERT_TRUE(WaitFor([&] { return calls >= 3; }));
  }
  const int after = calls;
  absl::SleepFor(absl::Milliseconds(100));  // a hundred intervals
  EXPECT_EQ(calls, after);
}

TEST(PeriodicThread, ALongCallSeesStoppingAndEndsEarly) {
  std::atomic<bool> in_call{false};
  std::atomic<bool> saw_stopping{false};
  PeriodicThread thread;
  thread.Start(absl::Hours(1), [&] {
    in_call = true;
    const absl::Time give_up = absl::Now() + absl::Seconds(30);
    while (!thread.Stopping() && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(1));
    saw_stopping = thread.Stopping();
  });
  ASSERT_TRUE(WaitFor([&] { return in_call.load(); }));
  EXPECT_FALSE(thread.Stopping());
  const absl::Time stop = absl::Now();
  thread.Stop();
  EXPECT_LT(absl::Now() - stop, absl::Seconds(1));
  EXPECT_TRUE(saw_stopping);
}

TEST(PeriodicThread, StopIsFineBeforeStartAndTwice) {
  std::atomic<int> calls{0};
  PeriodicThread never_started;
  never_started.Stop();
  EXPECT_TRUE(never_started.Stopping());

  PeriodicThread thread;
  thread.Start(absl::Milliseconds(1), [&] { calls++; });
  thread.Stop();
  thread.Stop();
  EXPECT_TRUE(thread.Stopping());
}

}  // namespace
}  // namespace outboxd
