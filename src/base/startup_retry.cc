#include "base/startup_retry.h"

#include <sys/select.h>

#include <algorithm>

#include "absl/time/clock.h"
#include "base/backoff.h"
#include "base/log.h"

namespace outboxd {

bool IsTransientDatabaseError(const absl::Status& status) {
  return status.code() == absl::StatusCode::kUnavailable ||
         status.code() == absl::StatusCode::kResourceExhausted;
}

void SleepUnlessStopped(StopSignal& stop, absl::Duration duration) {
  const absl::Time until = absl::Now() + duration;
  while (!stop.requested() && absl::Now() < until) {
    fd_set readable;
    FD_ZERO(&readable);
    FD_SET(stop.fd(), &readable);
    timeval tv = absl::ToTimeval(until - absl::Now());
    select(stop.fd() + 1, &readable, nullptr, nullptr, &tv);
  }
}

absl::Status RetryWhileTransient(StopSignal& stop, absl::FunctionRef<absl::Status()> attempt,
                                 absl::Duration base, absl::Duration cap) {
  Backoff backoff(base, cap);
  while (true) {
    absl::Status status = attempt();
    if (status.ok() || !IsTransientDatabaseError(status) || stop.requested()) return status;
    const absl::Duration wait = backoff.Next();
    spdlog::warn("PostgreSQL is not available yet: {}; retrying in {} (attempt {})",
                 status.message(), absl::FormatDuration(absl::Trunc(wait, absl::Milliseconds(1))),
                 backoff.attempts());
    SleepUnlessStopped(stop, wait);
    if (stop.requested()) return status;
  }
}

}  // namespace outboxd
