// RepeatedFailure: the rule that tells a relay stuck on one position from one that
// only lost a connection. A session that fails is retried from the slot's confirmed
// position; when something there fails every time (a row the relay cannot handle, a
// table it cannot write), each retry fails at the same place, events after it are
// never confirmed, and between the sessions nothing is in flight. Without this rule
// /healthz stayed 200 and the age metric 0 through a reconnect every 1.5 s, forever.
//
// After kStuckAfter sessions in a row that failed without the confirmed position
// moving, the relay is stuck: /healthz and /readyz answer 503 with the reason, the
// oldest unacknowledged event's age counts from the commit of the transaction it is
// stuck on, and one event counts in flight, so the age and stall alerts fire. The
// first confirmation past that position ends it.
//
// A failure at another position ends it too: the watermark moved, so the count starts
// again there. Both calls say when the state shown to health changed:
//
//   RepeatedFailure stuck;
//   if (stuck.SessionFailed({.position = watermark, .commit_us = t}, status))  // each failure
//     health.SetStuck(stuck.reason());
//   if (stuck.Confirmed(watermark)) health.SetStuck(stuck.reason());           // progress
#ifndef OUTBOXD_RELAY_REPEATED_FAILURE_H_
#define OUTBOXD_RELAY_REPEATED_FAILURE_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "pg/lsn.h"

namespace outboxd::relay {

// Where a session was when it failed.
struct FailurePoint {
  pg::Lsn position = 0;              // the confirmed watermark
  std::optional<int64_t> commit_us;  // commit time of the oldest unconfirmed transaction
};

class RepeatedFailure {
 public:
  // Sessions in a row that fail at one position before the relay counts as stuck: a
  // lost connection or a restarting server fails once or twice, and reconnects
  // (200 ms, 400 ms, 800 ms apart) make three within seconds.
  static constexpr int kStuckAfter = 3;

  // A session that had started streaming ended with `error` at `at`: true when that
  // changes reason() (the relay became stuck, is stuck with a newer count or error, or
  // failed at a new position and so is no longer stuck).
  [[nodiscard]] bool SessionFailed(const FailurePoint& at, const absl::Status& error);
  // The confirmed position is now `watermark`: true when that ends a stuck state.
  [[nodiscard]] bool Confirmed(pg::Lsn watermark);

  bool stuck() const { return failures_ >= kStuckAfter; }
  // One line for /healthz ("" when not stuck).
  std::string reason() const;
  // Commit time (Unix µs) of the transaction the relay is stuck on, when stuck.
  std::optional<int64_t> stuck_commit_us() const { return stuck() ? at_.commit_us : std::nullopt; }

 private:
  FailurePoint at_;
  int failures_ = 0;
  absl::Status last_error_;
};

}  // namespace outboxd::relay

#endif  // OUTBOXD_RELAY_REPEATED_FAILURE_H_
