#include "observe/health.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace outboxd::observe {

void HealthState::SetInFlight(uint64_t in_flight, absl::Time now) {
  uint64_t before = in_flight_.exchange(in_flight, std::memory_order_relaxed);
  // Events that just went in flight have had no chance to be acknowledged yet: an
  // acknowledgement from an idle hour ago must not make them look stalled.
  if (before == 0 && in_flight > 0 && failed_attempts_.load(std::memory_order_relaxed) == 0) {
    Acknowledged(now);
  }
}

void HealthState::SetFailedAttempts(uint64_t failed, absl::Time now) {
  uint64_t before = failed_attempts_.exchange(failed, std::memory_order_relaxed);
  if (before == 0 && failed > 0 && in_flight_.load(std::memory_order_relaxed) == 0) {
    Acknowledged(now);
  }
}

void HealthState::SetSlotProblem(std::string problem) {
  absl::MutexLock lock(&slot_mutex_);
  slot_problem_ = std::move(problem);
}

void HealthState::SetHeldBy(std::string slots) {
  absl::MutexLock lock(&slot_mutex_);
  held_by_ = std::move(slots);
}

void HealthState::SetStuck(std::string reason) {
  absl::MutexLock lock(&slot_mutex_);
  stuck_ = std::move(reason);
}

HealthInputs HealthState::Snapshot() const {
  int64_t progress = last_progress_us_.load(std::memory_order_relaxed);
  HealthInputs inputs{
      .connected = connected_.load(std::memory_order_relaxed),
      .standing_by = standing_by_.load(std::memory_order_relaxed),
      .in_flight = in_flight_.load(std::memory_order_relaxed),
      .failed_attempts = failed_attempts_.load(std::memory_order_relaxed),
      .last_progress = progress == 0 ? absl::InfinitePast() : absl::FromUnixMicros(progress)};
  absl::MutexLock lock(&slot_mutex_);
  inputs.slot_problem = slot_problem_;
  inputs.held_by = held_by_;
  inputs.stuck = stuck_;
  return inputs;
}

HealthVerdict CheckHealth(const HealthInputs& inputs, absl::Duration stall_threshold,
                          absl::Time now, const std::string& disconnected_reason) {
  // First: between its failing sessions the relay is briefly connected, briefly not,
  // and has nothing in flight, so no other input shows it.
  if (!inputs.stuck.empty()) return {false, inputs.stuck};
  if (!inputs.connected) return {false, disconnected_reason};
  // Before the stall: a slot about to lose WAL needs a person sooner than a slow broker.
  if (!inputs.slot_problem.empty()) return {false, inputs.slot_problem};
  if (inputs.in_flight == 0 && inputs.failed_attempts == 0) return {true, "ok"};
  absl::Duration quiet = now - inputs.last_progress;
  if (quiet <= stall_threshold) return {true, "ok"};
  std::string since = inputs.last_progress == absl::InfinitePast()
                          ? "since start"
                          : absl::StrCat("for ", absl::ToInt64Seconds(quiet), "s");
  if (!inputs.held_by.empty()) {
    // Nothing reaches the broker at all: the transaction waits before the sink.
    return {false,
            absl::StrCat("publishing held ", since, ": waiting for --standby-slot ", inputs.held_by,
                         " to flush a committed transaction (is its standby down or its "
                         "WAL receiver stuck?)")};
  }
  std::string reason = absl::StrCat("no broker acknowledgement ", since, " with ", inputs.in_flight,
                                    " events in flight");
  if (inputs.failed_attempts > 0) {
    absl::StrAppend(&reason, " and ", inputs.failed_attempts, " failed attempt",
                    inputs.failed_attempts == 1 ? "" : "s");
  }
  return {false, std::move(reason)};
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

}  // namespace outboxd::observe
