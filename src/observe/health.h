// /healthz: healthy only while the relay streams AND the broker keeps acknowledging.
// A relay that is connected but whose events sit unacknowledged (broker outage,
// stuck producer) is as useless as one that is down, and a probe must say so.
// /readyz: the same, or standing by (PostgreSQL answered that another relay holds the
// slot): a Kubernetes pair counts its standby as ready, so a PodDisruptionBudget lets
// one pod go while the other streams or can take over.
//
//   HealthState state;                       // updated by the relay thread
//   state.connected = true;
//   HealthVerdict v = CheckHealth(state.Snapshot(), absl::Seconds(30), absl::Now());
//   // v.healthy == false, v.reason == "no broker acknowledgement for 12s with 40
//   // events in flight"
//
// "In flight" means one thing everywhere, the outboxd_events_in_flight gauge's: handed
// to the producer, no delivery report yet. The polling relay also reports its failed
// attempts since the last acknowledgement (a refusal, a timeout, a payload that fails
// the check): between batches nothing is in flight, yet nothing is getting through.
#ifndef OUTBOXD_OBSERVE_HEALTH_H_
#define OUTBOXD_OBSERVE_HEALTH_H_

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace outboxd::observe {

// What the relay last reported.
struct HealthInputs {
  bool connected = false;
  // The last connection attempt found the slot held by another relay.
  bool standing_by = false;
  uint64_t in_flight = 0;
  // Failed publish attempts since the last acknowledgement (`outboxd poll` only).
  uint64_t failed_attempts = 0;
  // The last acknowledgement, or when events went in flight or attempts failed after
  // none were (whichever is later): the stall clock starts there.
  absl::Time last_progress = absl::InfinitePast();
  // Why the replication slot is in danger ("" when it is not): `run` answers 503
  // with it while the slot is `unreserved`, about to lose WAL it still needs.
  std::string slot_problem;
  // --standby-slot: the named standbys a committed transaction waits for ("" when
  // none): a stall then names them instead of the broker.
  std::string held_by;
  // Sessions fail again and again at one position (relay/repeated_failure.h), with
  // the reason ("" when not): unhealthy whatever else holds, connected or not.
  std::string stuck;
};

// Written by the relay thread, read by the HTTP thread.
class HealthState {
 public:
  void SetConnected(bool connected) { connected_.store(connected, std::memory_order_relaxed); }
  void SetStandingBy(bool standing_by) {
    standing_by_.store(standing_by, std::memory_order_relaxed);
  }
  // Call with the current in-flight count; starts the stall clock when events go in
  // flight while none were and no attempt had failed.
  void SetInFlight(uint64_t in_flight, absl::Time now);
  // Failed attempts since the last acknowledgement (0 after one); starts the stall
  // clock like SetInFlight.
  void SetFailedAttempts(uint64_t failed, absl::Time now);
  void Acknowledged(absl::Time now) {
    last_progress_us_.store(absl::ToUnixMicros(now), std::memory_order_relaxed);
  }
  void SetSlotProblem(std::string problem);
  // The standby slots publishing waits for, comma-separated ("" when none).
  void SetHeldBy(std::string slots);
  // Why the relay is stuck on one position ("" when it is not).
  void SetStuck(std::string reason);
  HealthInputs Snapshot() const;

 private:
  mutable absl::Mutex slot_mutex_;
  std::string slot_problem_ ABSL_GUARDED_BY(slot_mutex_);
  std::string held_by_ ABSL_GUARDED_BY(slot_mutex_);
  std::string stuck_ ABSL_GUARDED_BY(slot_mutex_);
  std::atomic<bool> connected_{false};
  std::atomic<bool> standing_by_{false};
  std::atomic<uint64_t> in_flight_{0};
  std::atomic<uint64_t> failed_attempts_{0};
  std::atomic<int64_t> last_progress_us_{0};
};

struct HealthVerdict {
  bool healthy = false;
  std::string reason;  // one line; "ok" when healthy
};

// `disconnected_reason`: what a probe reads while not connected ("not connected to
// PostgreSQL").
HealthVerdict CheckHealth(const HealthInputs& inputs, absl::Duration stall_threshold,
                          absl::Time now,
                          const std::string& disconnected_reason = "not connected to PostgreSQL");

// /readyz: healthy as above, or a standby ("standing by: another relay holds the slot").
//   CheckReadiness({.standing_by = true}, absl::Seconds(30), absl::Now()).healthy  // true
HealthVerdict CheckReadiness(
    const HealthInputs& inputs, absl::Duration stall_threshold, absl::Time now,
    const std::string& disconnected_reason = "not connected to PostgreSQL");

}  // namespace outboxd::observe

#endif  // OUTBOXD_OBSERVE_HEALTH_H_
