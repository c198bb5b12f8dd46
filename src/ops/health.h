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
#ifndef OUTBOXD_OPS_HEALTH_H_
#define OUTBOXD_OPS_HEALTH_H_

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/time/time.h"

namespace outboxd::ops {

// What the relay last reported.
struct HealthInputs {
  bool connected = false;
  // The last connection attempt found the slot held by another relay.
  bool standing_by = false;
  uint64_t in_flight = 0;
  // The last acknowledgement, or when events went in flight after none were
  // (whichever is later): the stall clock starts there.
  absl::Time last_progress = absl::InfinitePast();
};

// Written by the relay thread, read by the HTTP thread.
class HealthState {
 public:
  void SetConnected(bool connected) { connected_.store(connected, std::memory_order_relaxed); }
  void SetStandingBy(bool standing_by) {
    standing_by_.store(standing_by, std::memory_order_relaxed);
  }
  // Call with the current in-flight count; starts the stall clock on 0 -> n.
  void SetInFlight(uint64_t in_flight, absl::Time now);
  void Acknowledged(absl::Time now) {
    last_progress_us_.store(absl::ToUnixMicros(now), std::memory_order_relaxed);
  }
  HealthInputs Snapshot() const;

 private:
  std::atomic<bool> connected_{false};
  std::atomic<bool> standing_by_{false};
  std::atomic<uint64_t> in_flight_{0};
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

}  // namespace outboxd::ops

#endif  // OUTBOXD_OPS_HEALTH_H_
