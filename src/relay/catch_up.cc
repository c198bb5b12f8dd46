#include "relay/catch_up.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/log.h"
#include "base/status_macros.h"

namespace outboxd::relay {

absl::StatusOr<pg::Lsn> CurrentWalLsn(pg::Connection& conn) {
  OUTBOXD_ASSIGN_OR_RETURN(pg::Result r, conn.Exec("SELECT pg_current_wal_lsn()::text"));
  return pg::ParseLsn(r.Get(0, 0));
}

CatchUp::CatchUp(observe::Metrics* metrics, Clock clock)
    : metrics_(metrics), clock_(std::move(clock)) {}

void CatchUp::Begin(pg::Lsn start, pg::Lsn server) {
  End();
  if (server <= start || static_cast<int64_t>(server - start) < kMinBacklog) {
    metrics_->SetCatchUpEta(absl::ZeroDuration());
    return;
  }
  start_ = start;
  target_ = server;
  events_at_start_ = metrics_->ReadTotals().published;
  next_look_ = absl::InfinitePast();
  spdlog::info("catching up: {} MiB of WAL between {} and the server's position {}",
               absl::StrFormat("%.1f", static_cast<double>(server - start) / (1 << 20)),
               pg::FormatLsn(start), pg::FormatLsn(server));
  progress_ =
      std::make_unique<Progress>(Progress::Options{.what = "catch-up",
                                                   .unit = Progress::Unit::kBytes,
                                                   .total = static_cast<int64_t>(server - start),
                                                   .rate_unit = Progress::Unit::kEvents,
                                                   .clock = clock_});
  metrics_->SetCatchUpEta(std::nullopt);  // no pace yet
}

// The totals are read through the registry (observe/metrics.h), so at most as often
// as the line is drawn, not every loop turn.
void CatchUp::Observe(pg::Lsn received, pg::Lsn watermark) {
  if (progress_ == nullptr) return;
  const absl::Time now = clock_();
  if (now < next_look_) return;
  next_look_ = now + Progress::kRedraw;
  const pg::Lsn read = std::min(std::max(received, watermark), target_);
  const int64_t done = read > start_ ? static_cast<int64_t>(read - start_) : 0;
  const double events = metrics_->ReadTotals().published - events_at_start_;
  progress_->Update(done, static_cast<int64_t>(events));
  if (watermark >= target_) {
    progress_.reset();  // logs the summary
    metrics_->SetCatchUpEta(absl::ZeroDuration());
    return;
  }
  metrics_->SetCatchUpEta(progress_->TimeLeft());
}

void CatchUp::End() {
  if (progress_ == nullptr) return;
  progress_.reset();
  metrics_->SetCatchUpEta(std::nullopt);  // unknown until the next session measures
}

}  // namespace outboxd::relay
