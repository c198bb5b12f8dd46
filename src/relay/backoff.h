// Capped exponential backoff with full jitter, for reconnecting to PostgreSQL: many
// relays restarting after one outage should not reconnect in lockstep.
//
//   Backoff backoff(absl::Milliseconds(200), absl::Seconds(30));
//   absl::Duration wait = backoff.Next();   // in [100ms, 200ms], then [200ms, 400ms], ...
//   backoff.Reset();                        // after a successful connection
#ifndef OUTBOXD_RELAY_BACKOFF_H_
#define OUTBOXD_RELAY_BACKOFF_H_

#include <algorithm>
#include <random>

#include "absl/time/time.h"

namespace outboxd::relay {

class Backoff {
 public:
  Backoff(absl::Duration base, absl::Duration cap) : base_(base), cap_(cap) {}

  absl::Duration Next() {
    absl::Duration ceiling = std::min(cap_, base_ * (int64_t{1} << std::min(attempt_, 20)));
    ++attempt_;
    std::uniform_real_distribution<double> jitter(0.5, 1.0);  // never a zero wait
    return ceiling * jitter(rng_);
  }
  void Reset() { attempt_ = 0; }
  int attempts() const { return attempt_; }

 private:
  absl::Duration base_;
  absl::Duration cap_;
  int attempt_ = 0;
  std::mt19937 rng_{std::random_device{}()};
};

}  // namespace outboxd::relay

#endif  // OUTBOXD_RELAY_BACKOFF_H_
