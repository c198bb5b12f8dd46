#include "relay/position_recorder.h"

#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/log.h"
#include "base/status_macros.h"

namespace outboxd::relay {

PositionRecorder::PositionRecorder(const std::string& table, std::string slot,
                                   absl::Duration interval)
    : store_(table), slot_(std::move(slot)), interval_(interval) {}

absl::Status PositionRecorder::Tick(pg::Connection& conn, const AckTracker::Acknowledged& acked) {
  if (!Due()) return absl::OkStatus();
  next_ = absl::Now() + interval_;
  if (acked.events != events_seen_) {
    events_seen_ = acked.events;
    // Up to date once a horizon taken an interval from now is recorded: by then the
    // acknowledged transactions have long left the server's running set, so its
    // snapshot counts them as ended.
    stale_until_ = next_seq_ + 1;
  }
  std::optional<Candidate> passed;  // the newest horizon the watermark passed
  while (!candidates_.empty() && acked.watermark >= candidates_.front().horizon.lsn) {
    passed = std::move(candidates_.front());
    candidates_.pop_front();
  }
  if (passed) {
    OUTBOXD_RETURN_IF_ERROR(Record(conn, passed->horizon, passed->seq));
  } else if (!candidates_.empty() && stale_until_) {
    // Behind every horizon taken so far (a restart far behind the head): the slot's
    // own may still have moved.
    absl::StatusOr<std::optional<outbox::XidHorizon>> slot = store_.SlotHorizon(conn, slot_);
    if (!slot.ok()) return slot.status();
    if (*slot) OUTBOXD_RETURN_IF_ERROR(Record(conn, **slot, std::nullopt));
  }
  if (disabled_) return absl::OkStatus();
  absl::StatusOr<outbox::XidHorizon> horizon = store_.TakeHorizon(conn);
  if (!horizon.ok()) return horizon.status();
  if (candidates_.size() >= kMaxCandidates) {
    // Every other one goes: the same span of WAL at half the resolution.
    std::deque<Candidate> thinned;
    for (size_t i = 1; i < candidates_.size(); i += 2) thinned.push_back(candidates_[i]);
    candidates_ = std::move(thinned);
  }
  candidates_.push_back({.horizon = *std::move(horizon), .seq = next_seq_++});
  return absl::OkStatus();
}

absl::Status PositionRecorder::Record(pg::Connection& conn, const outbox::XidHorizon& horizon,
                                      std::optional<uint64_t> seq) {
  if (!stale_until_) return absl::OkStatus();  // nothing acknowledged since the last record
  uint64_t xid = 0;
  if (!absl::SimpleAtoi(horizon.xid, &xid)) {
    return absl::InternalError(absl::StrCat("unexpected xid8 \"", horizon.xid, "\""));
  }
  if (xid > recorded_xid_) {  // else one as new is recorded already
    absl::Status recorded = store_.RecordAcked(conn, slot_, horizon);
    if (!recorded.ok()) return Disable(recorded);
    recorded_xid_ = xid;
  }
  if (seq && *seq >= *stale_until_) stale_until_.reset();
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
