#include "relay/position_recorder.h"

#include <utility>

#include "absl/time/clock.h"
#include "base/log.h"
#include "base/status_macros.h"

namespace outboxd::relay {

PositionRecorder::PositionRecorder(const std::string& table, std::string slot,
                                   absl::Duration interval)
    : store_(table), slot_(std::move(slot)), interval_(interval) {}

absl::Status PositionRecorder::Tick(pg::Connection& conn, pg::Lsn watermark) {
  if (!Due()) return absl::OkStatus();
  next_ = absl::Now() + interval_;
  if (candidate_ && watermark >= candidate_->lsn) {
    absl::Status recorded = store_.RecordAcked(conn, slot_, *candidate_);
    if (!recorded.ok()) return Disable(recorded);
    candidate_.reset();
  }
  if (!candidate_) {
    absl::StatusOr<outbox::XidHorizon> horizon = store_.TakeHorizon(conn);
    if (!horizon.ok()) return horizon.status();
    candidate_ = *std::move(horizon);
  }
  return absl::OkStatus();
}

absl::Status PositionRecorder::Disable(const absl::Status& error) {
  if (error.code() != absl::StatusCode::kNotFound &&
      error.code() != absl::StatusCode::kPermissionDenied) {
    return error;
  }
  disabled_ = true;
  spdlog::warn(
      "cannot record the acknowledged position in {} ({}): cleanup will keep the outbox "
      "rows this relay publishes; run outboxd setup, or GRANT INSERT, UPDATE ON it to the "
      "relay's role",
      store_.table(), error);
  return absl::OkStatus();
}

}  // namespace outboxd::relay
