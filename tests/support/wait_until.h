// Waiting for a state instead of sleeping for a time: tests poll a condition with a
// generous deadline (the machine may be loaded), so they are as fast as the code
// allows and never flaky because a sleep was too short.
//
//   ASSERT_TRUE(WaitUntil(absl::Seconds(30), [&] { return env.Pending() == 0; }));
#ifndef OUTBOXD_TESTS_SUPPORT_WAIT_UNTIL_H_
#define OUTBOXD_TESTS_SUPPORT_WAIT_UNTIL_H_

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace outboxd::test {

// True as soon as check() is; false if it still is not after `timeout`.
template <typename Check>
bool WaitUntil(absl::Duration timeout, Check check,
               absl::Duration every = absl::Milliseconds(100)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!check()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(every);
  }
  return true;
}

}  // namespace outboxd::test

#endif  // OUTBOXD_TESTS_SUPPORT_WAIT_UNTIL_H_
