#include "relay/repeated_failure.h"

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/log_escape.h"

namespace outboxd::relay {

bool RepeatedFailure::SessionFailed(const FailurePoint& at, const absl::Status& error) {
  const bool was_stuck = stuck();
  failures_ = failures_ > 0 && at.position == at_.position ? failures_ + 1 : 1;
  // The first failure there knows the transaction best: a later session may fail
  // before it has read that far.
  if (failures_ == 1 || !at_.commit_us) at_ = at;
  last_error_ = error;
  return was_stuck || stuck();
}

bool RepeatedFailure::Confirmed(pg::Lsn watermark) {
  if (failures_ == 0 || watermark <= at_.position) return false;
  const bool was_stuck = stuck();
  failures_ = 0;
  return was_stuck;
}

std::string RepeatedFailure::reason() const {
  if (!stuck()) return "";
  std::string committed = at_.commit_us
                              ? absl::StrCat(", the transaction committed at ",
                                             absl::FormatTime("%Y-%m-%dT%H:%M:%SZ",
                                                              absl::FromUnixMicros(*at_.commit_us),
                                                              absl::UTCTimeZone()))
                              : "";
  // The error may quote a row's value: one line whatever it holds.
  return absl::StrCat("stuck: ", failures_, " sessions in a row failed at ",
                      pg::FormatLsn(at_.position), committed,
                      "; last error: ", EscapeForLog(last_error_.ToString()),
                      " (nothing after it is published until that is fixed)");
}

}  // namespace outboxd::relay
