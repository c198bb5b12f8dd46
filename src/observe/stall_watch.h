// StallWatch: the log side of "no silent stall". Events in flight with no broker
// acknowledgement for longer than the threshold (a broker outage, a stuck producer)
// give one warning when the stall starts and one line when acknowledgements resume,
// not a line per check. Its own thread reads the relay's HealthState, so a relay
// stuck anywhere, even inside a call, is still reported.
//
//   StallWatch watch(stats.health, absl::Seconds(30));   // ~StallWatch stops it
//   watch.Start();
//   // warn  stalled: no broker acknowledgement for 31s with 40 events in flight
//   // info  stall over: the broker acknowledges again (stalled 75s)
#ifndef OUTBOXD_OBSERVE_STALL_WATCH_H_
#define OUTBOXD_OBSERVE_STALL_WATCH_H_

#include "absl/time/time.h"
#include "base/periodic_thread.h"
#include "observe/health.h"

namespace outboxd::observe {

class StallWatch {
 public:
  StallWatch(const HealthState& health, absl::Duration threshold,
             absl::Duration check_interval = absl::Seconds(1));
  StallWatch(const StallWatch&) = delete;
  StallWatch& operator=(const StallWatch&) = delete;

  void Start();
  // One check at `now`: logs when the stall state changes (the thread calls it every
  // check_interval; tests call it directly). Returns whether it is stalled.
  bool Check(absl::Time now);

 private:
  const HealthState& health_;
  absl::Duration threshold_;
  absl::Duration check_interval_;
  bool stalled_ = false;
  absl::Time stalled_since_;
  PeriodicThread thread_;  // last: destroyed, so stopped, before the members Check reads
};

}  // namespace outboxd::observe

#endif  // OUTBOXD_OBSERVE_STALL_WATCH_H_
