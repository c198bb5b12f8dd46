// PeriodicThread: calls its function at once and then every interval, and Stop() or
// destruction ends it promptly however long the interval: with an hour's interval,
// Stop() returning at all shows it did not wait the interval out.
#include "base/periodic_thread.h"

#include <atomic>

#include "gtest/gtest.h"
#include "support/wait_until.h"

namespace outboxd {
namespace {

// Waits up to 10 s for `done`, checking every millisecond (the tests' interval).
template <typename Predicate>
bool WaitFor(Predicate done) {
  return test::WaitUntil(absl::Seconds(10), done, absl::Milliseconds(1));
}

// Lets time pass so that a call that should not come would have come. A check that
// something does NOT happen has no state to wait for; 100 ms is a hundred of the
// 1 ms intervals these tests use.
void LetAHundredIntervalsPass() { absl::SleepFor(absl::Milliseconds(100)); }

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
  LetAHundredIntervalsPass();
  EXPECT_EQ(calls, 1);  // no second call: the interval has not passed
  thread.Stop();
  EXPECT_EQ(calls, 1);
}

TEST(PeriodicThread, DestructionStopsItPromptlyAndForGood) {
  std::atomic<int> calls{0};
  {
    PeriodicThread thread;
    thread.Start(absl::Hours(1), [&] { calls++; });
    ASSERT_TRUE(WaitFor([&] { return calls == 1; }));
  }  // returns although the hour has not passed

  {
    PeriodicThread thread;
    thread.Start(absl::Milliseconds(1), [&] { calls++; });
    ASSERT_TRUE(WaitFor([&] { return calls >= 3; }));
  }
  const int after = calls;
  LetAHundredIntervalsPass();
  EXPECT_EQ(calls, after);
}

TEST(PeriodicThread, ALongCallSeesStoppingAndEndsEarly) {
  std::atomic<bool> in_call{false};
  std::atomic<bool> saw_stopping{false};
  PeriodicThread thread;
  thread.Start(absl::Hours(1), [&] {
    in_call = true;
    saw_stopping = test::WaitUntil(
        absl::Seconds(30), [&] { return thread.Stopping(); }, absl::Milliseconds(1));
  });
  ASSERT_TRUE(WaitFor([&] { return in_call.load(); }));
  EXPECT_FALSE(thread.Stopping());
  thread.Stop();
  EXPECT_TRUE(saw_stopping);  // the call ended on Stopping(), not after its 30 s
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
