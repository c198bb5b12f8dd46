#include "observe/stall_watch.h"

#include "base/log.h"

namespace outboxd::observe {

StallWatch::StallWatch(const HealthState& health, absl::Duration threshold,
                       absl::Duration check_interval)
    : health_(health), threshold_(threshold), check_interval_(check_interval) {}

void StallWatch::Start() {
  thread_.Start(check_interval_, [this] { Check(absl::Now()); });
}

bool StallWatch::Check(absl::Time now) {
  // Only the broker side: a lost PostgreSQL connection has its own reconnect lines.
  HealthInputs inputs = health_.Snapshot();
  inputs.connected = true;
  inputs.slot_problem.clear();  // the relay warns about its slot itself
  const HealthVerdict verdict = CheckHealth(inputs, threshold_, now);
  if (!verdict.healthy && !stalled_) {
    stalled_ = true;
    stalled_since_ = inputs.last_progress == absl::InfinitePast() || !inputs.stuck.empty()
                         ? now
                         : inputs.last_progress;
    if (!inputs.stuck.empty()) {
      spdlog::warn("stalled: {}", verdict.reason);  // the reason names the error
    } else {
      spdlog::warn("stalled: {}; the slot is not confirmed past them (check the {})",
                   verdict.reason, inputs.held_by.empty() ? "brokers" : "standbys");
    }
  } else if (verdict.healthy && stalled_) {
    stalled_ = false;
    spdlog::info(
        "stall over: {} (stalled {}s)",
        inputs.in_flight == 0 ? "no events in flight any more" : "the broker acknowledges again",
        absl::ToInt64Seconds(now - stalled_since_));
  }
  return stalled_;
}

}  // namespace outboxd::observe
