#include "ops/health.h"

#include "absl/strings/str_cat.h"

namespace outboxd::ops {

void HealthState::SetInFlight(uint64_t in_flight, absl::Time now) {
  uint64_t before = in_flight_.exchange(in_flight, std::memory_order_relaxed);
  // Events that just went in flight have had no chance to be acknowledged yet: an
  // acknowledgement from an idle hour ago must not make them look stalled.
  if (before == 0 && in_flight > 0) Acknowledged(now);
}

HealthInputs HealthState::Snapshot() const {
  int64_t progress = last_progress_us_.load(std::memory_order_relaxed);
  return {.connected = connected_.load(std::memory_order_relaxed),
          .standing_by = standing_by_.load(std::memory_order_relaxed),
          .in_flight = in_flight_.load(std::memory_order_relaxed),
          .last_progress = progress == 0 ? absl::InfinitePast() : absl::FromUnixMicros(progress)};
}

HealthVerdict CheckHealth(const HealthInputs& inputs, absl::Duration stall_threshold,
                          absl::Time now, const std::string& disconnected_reason) {
  if (!inputs.connected) return {false, disconnected_reason};
  if (inputs.in_flight == 0) return {true, "ok"};
  absl::Duration quiet = now - inputs.last_progress;
  if (quiet <= stall_threshold) return {true, "ok"};
  std::string since = inputs.last_progress == absl::InfinitePast()
                          ? "since start"
                          : absl::StrCat("for ", absl::ToInt64Seconds(quiet), "s");
  return {false, absl::StrCat("no broker acknowledgement ", since, " with ", inputs.in_flight,
                              " events in flight")};
}

HealthVerdict CheckReadiness(const HealthInputs& inputs, absl::Duration stall_threshold,
                             absl::Time now, const std::string& disconnected_reason) {
  // A standby is not connected by definition; it proved PostgreSQL answers within the
  // last standby poll, which is all it needs to take over.
  if (!inputs.connected && inputs.standing_by) {
    return {true, "standing by: another relay holds the slot"};
  }
  return CheckHealth(inputs, stall_threshold, now, disconnected_reason);
}

}  // namespace outboxd::ops
