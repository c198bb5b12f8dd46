// CatchUpPlan: streamed or in bulk, and why.
#include "relay/catch_up_plan.h"

#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace outboxd::relay {
namespace {

constexpr char kGiveUpPayload[] = "type.googleapis.com/outboxd.BulkCatchUpGaveUp";

CatchUpPlan::Decision Stream(std::string reason) {
  return {.mode = CatchUpPlan::Mode::kStream, .reason = std::move(reason)};
}
// Streamed though the backlog is large enough: the operator hears why.
CatchUpPlan::Decision Fallback(std::string reason) {
  return {.mode = CatchUpPlan::Mode::kStream, .reason = std::move(reason), .warn = true};
}

}  // namespace

absl::Status GiveUpBulk(absl::Status error) {
  if (!error.ok()) error.SetPayload(kGiveUpPayload, absl::Cord("true"));
  return error;
}

bool GivesUpBulk(const absl::Status& status) {
  return status.GetPayload(kGiveUpPayload).has_value();
}

absl::StatusOr<CatchUpPlan::Decision> CatchUpPlan::Choose(pg::Lsn start,
                                                          const absl::StatusOr<pg::Lsn>& server,
                                                          const Refusal& refusal) const {
  // Best effort: without the server's position there is only no progress to show.
  if (!server.ok()) return Stream("the server's WAL position is unknown");
  if (threshold_ == 0) return Stream("bulk catch-up is off (--bulk-catch-up 0)");
  if (*server <= start || *server - start < threshold_) {
    return Stream(absl::StrCat("the backlog (", *server > start ? *server - start : 0,
                               " bytes of WAL) is below --bulk-catch-up"));
  }
  if (gave_up_) {
    return Fallback("bulk catch-up failed before (logged above): streaming the backlog instead");
  }
  // peek and advance need what START_REPLICATION needs; a role let in some other way
  // (pg_hba, a replication-only grant) streams as before.
  OUTBOXD_ASSIGN_OR_RETURN(const std::string refused, refusal());
  if (!refused.empty()) {
    return Fallback(absl::StrCat(refused, "; streaming the backlog instead"));
  }
  return Decision{.mode = Mode::kBulk,
                  .reason = absl::StrCat("a backlog of ", *server - start,
                                         " bytes of WAL, at least --bulk-catch-up")};
}

absl::Status CatchUpPlan::SessionEnded(absl::Status status) {
  if (!GivesUpBulk(status)) return status;
  gave_up_ = true;
  status.ErasePayload(kGiveUpPayload);
  return status;
}

}  // namespace outboxd::relay
