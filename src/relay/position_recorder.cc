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

absl::Status PositionRecorder::Tick(pg::Connection& conn, pg::Lsn watermark) {
  if (!Due()) return absl::OkStatus();
  next_ = absl::Now() + interval_;
  std::optional<outbox::XidHorizon> passed;  // the newest horizon the watermark passed
  while (!candidates_.empty() && watermark >= candidates_.front().lsn) {
    passed = std::move(candidates_.front());
    candidates_.pop_front();
  }
  if (passed) {
    OUTBOXD_RETURN_IF_ERROR(Record(conn, *passed));
  } else if (!candidates_.empty()) {
    // Behind every horizon taken so far (a restart far behind the head): the slot's
    // own may still have moved.
    absl::StatusOr<std::optional<outbox::XidHorizon>> slot = store_.SlotHorizon(conn, slot_);
    if (!slot.ok()) return slot.status();
    if (*slot) OUTBOXD_RETURN_IF_ERROR(Record(conn, **slot));
  }
  if (disabled_) return absl::OkStatus();
  absl::StatusOr<outbox::XidHorizon> horizon = store_.TakeHorizon(conn);
  if (!horizon.ok()) return horizon.status();
  if (candidates_.size() >= kMaxCandidates) {
    // Every other one goes: the same span of WAL at half the resolution.
    std::deque<outbox::XidHorizon> thinned;
    for (size_t i = 1; i < candidates_.size(); i += 2) thinned.push_back(candidates_[i]);
    candidates_ = std::move(thinned);
  }
  candidates_.push_back(*std::move(horizon));
  return absl::OkStatus();
}

absl::Status PositionRecorder::Record(pg::Connection& conn, const outbox::XidHorizon& horizon) {
  uint64_t xid = 0;
  if (!absl::SimpleAtoi(horizon.xid, &xid)) {
    return absl::InternalError(absl::StrCat("unexpected xid8 \"", horizon.xid, "\""));
  }
  if (xid <= recorded_xid_) return absl::OkStatus();
  // Every transaction below `xid` has ended. If the last record's own transaction
  // took the very xid it recorded, the only one between that horizon and this is that
  // transaction: nothing of the outbox's is newly covered.
  if (own_xid_ != 0 && own_xid_ == recorded_xid_ && xid <= own_xid_ + 1) {
    return absl::OkStatus();
  }
  absl::StatusOr<std::optional<uint64_t>> own = store_.RecordAcked(conn, slot_, horizon);
  if (!own.ok()) return Disable(own.status());
  recorded_xid_ = xid;
  own_xid_ = own->value_or(0);
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
