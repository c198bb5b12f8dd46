// Waiting for a state instead of sleeping for a time: tests poll a condition with a
// generous deadline (the machine may be loaded), so they are as fast as the code
// allows and never flaky because a sleep was too short.
//
//   ASSERT_TRUE(WaitUntil(absl::Seconds(30), [&] { return env.Pending() == 0; }));
//
// Between two checks it sleeps `pause` (a duration), or calls it when `pause` is a
// function: the client's own wait, which is what moves the state on.
//
//   ASSERT_TRUE(WaitUntil(absl::Seconds(60), [&] { return done.size() >= n; },
//                         [&] { publisher.Poll(absl::Milliseconds(100)); }));
#ifndef OUTBOXD_TESTS_SUPPORT_WAIT_UNTIL_H_
#define OUTBOXD_TESTS_SUPPORT_WAIT_UNTIL_H_

#include <type_traits>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace outboxd::test {

// True as soon as check() is; false if it still is not after `timeout`.
template <typename Check, typename Pause = absl::Duration>
bool WaitUntil(absl::Duration timeout, Check check, Pause pause = absl::Milliseconds(100)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!check()) {
    if (absl::Now() > deadline) return false;
    if constexpr (std::is_invocable_v<Pause&>) {
      pause();
    } else {
      absl::SleepFor(pause);
    }
  }
  return true;
}

}  // namespace outboxd::test

#endif  // OUTBOXD_TESTS_SUPPORT_WAIT_UNTIL_H_
