// Capped exponential backoff: the wait before each retry doubles from `base` up to
// `cap`, and Reset() after a success starts over. With Jitter::kHalf (the default)
// each wait is drawn from the upper half of its ceiling, so many relays reconnecting
// after one PostgreSQL outage do not come back in lockstep; Jitter::kNone gives the
// ceiling itself, for a single client whose retries should be predictable (the inbox
// consumer's retries of a failed message).
//
//   Backoff backoff(absl::Milliseconds(200), absl::Seconds(30));
//   absl::Duration wait = backoff.Next();   // in [100ms, 200ms], then [200ms, 400ms], ...
//   backoff.Reset();                        // after a successful connection
//
//   Backoff retry(absl::Milliseconds(100), absl::Seconds(5), Backoff::Jitter::kNone);
//   retry.Next();                           // 100ms, then 200ms, 400ms, ... 5s, 5s
#ifndef OUTBOXD_BASE_BACKOFF_H_
#define OUTBOXD_BASE_BACKOFF_H_

#include <algorithm>
#include <cstdint>
#include <random>

#include "absl/time/time.h"

namespace outboxd {

class Backoff {
 public:
  enum class Jitter {
    kHalf,  // a wait in [ceiling / 2, ceiling]: never zero, never in lockstep
    kNone,  // the ceiling itself
  };

  Backoff(absl::Duration base, absl::Duration cap, Jitter jitter = Jitter::kHalf)
      : base_(base), cap_(cap), jitter_(jitter) {
    if (jitter_ != Jitter::kNone) rng_.seed(std::random_device{}());
  }

  // The wait before the next retry; counts one attempt.
  absl::Duration Next() {
    const absl::Duration ceiling = std::min(cap_, base_ * (int64_t{1} << std::min(attempt_, 20)));
    ++attempt_;
    if (jitter_ == Jitter::kNone) return ceiling;
    std::uniform_real_distribution<double> half(0.5, 1.0);
    return ceiling * half(rng_);
  }
  void Reset() { attempt_ = 0; }
  // Next() calls since the last Reset(): the retries so far.
  int attempts() const { return attempt_; }

 private:
  absl::Duration base_;
  absl::Duration cap_;
  Jitter jitter_;
  int attempt_ = 0;
  std::mt19937 rng_;
};

}  // namespace outboxd

#endif  // OUTBOXD_BASE_BACKOFF_H_
