// RetryWhileTransient: a PostgreSQL that is not up yet (Unavailable, ResourceExhausted)
// is tried again after a backoff; what only a person can fix ends the start at once; a
// stop ends the wait.
#include "base/startup_retry.h"

#include <functional>
#include <thread>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/stop_signal.h"
#include "gtest/gtest.h"

namespace outboxd {
namespace {

// RetryWhileTransient with no stop and 1-2 ms backoffs; `attempt` is given its number
// (1, 2, ...) and `attempts` counts the calls.
absl::Status RetryQuickly(const std::function<absl::Status(int)>& attempt, int* attempts) {
  StopSignal stop;
  return RetryWhileTransient(
      stop, [&] { return attempt(++*attempts); }, absl::Milliseconds(1), absl::Milliseconds(2));
}

TEST(RetryWhileTransient, TriesAgainUntilTheServerIsUp) {
  int attempts = 0;
  absl::Status s = RetryQuickly(
      [](int attempt) {
        if (attempt == 1) return absl::UnavailableError("connection refused");
        if (attempt == 2) return absl::ResourceExhaustedError("too many connections");
        return absl::OkStatus();
      },
      &attempts);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(attempts, 3);
}

TEST(RetryWhileTransient, EndsAtOnceOnAnErrorOnlyAPersonCanFix) {
  int attempts = 0;
  absl::Status s = RetryQuickly(
      [](int) { return absl::PermissionDeniedError("password authentication failed"); }, &attempts);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(attempts, 1);
}

TEST(RetryWhileTransient, AStopEndsTheWaitWithTheLastError) {
  StopSignal stop;
  std::thread stopper;
  int attempts = 0;
  absl::Status s = RetryWhileTransient(
      stop,
      [&] {
        if (++attempts == 1) {
          stopper = std::thread([&] { stop.Notify(); });
          return absl::UnavailableError("the database system is starting up");
        }
        return absl::OkStatus();  // a retry after the stop: the test fails, but ends
      },
      absl::Hours(1), absl::Hours(1));  // without the stop, the wait would last an hour
  stopper.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(attempts, 1);
}

TEST(IsTransientDatabaseError, NamesWhatARetryCanFix) {
  EXPECT_TRUE(IsTransientDatabaseError(absl::UnavailableError("refused")));
  EXPECT_TRUE(IsTransientDatabaseError(absl::ResourceExhaustedError("53300")));
  EXPECT_FALSE(IsTransientDatabaseError(absl::NotFoundError("database \"app\" does not exist")));
  EXPECT_FALSE(IsTransientDatabaseError(absl::OkStatus()));
}

}  // namespace
}  // namespace outboxd
