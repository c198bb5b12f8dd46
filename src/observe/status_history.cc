#include "observe/status_history.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"

namespace outboxd::observe {

StatusHistory::StatusHistory(const Metrics& metrics, absl::Duration interval, size_t keep)
    : metrics_(metrics), interval_(interval), keep_(keep) {}

void StatusHistory::Start() {
  thread_.Start(interval_, [this] { Sample(absl::Now()); });
}

void StatusHistory::Sample(absl::Time now) {
  Entry entry{now, metrics_.ReadTotals()};
  absl::MutexLock lock(&mu_);
  samples_.push_back(entry);
  while (samples_.size() > keep_) samples_.pop_front();
}

std::string StatusHistory::Json() const {
  absl::MutexLock lock(&mu_);
  std::string out =
      absl::StrCat("{\"interval_s\":", absl::ToDoubleSeconds(interval_), ",\"samples\":[");
  for (size_t i = 0; i < samples_.size(); ++i) {
    const Entry& e = samples_[i];
    // %.17g keeps a double exact, and JSON has no NaN to worry about here: sums of
    // finite latencies.
    absl::StrAppend(&out, i == 0 ? "" : ",", "[", absl::ToUnixMillis(e.at), ",",
                    absl::StrFormat("%.17g", e.totals.published), ",",
                    absl::StrFormat("%.17g", e.totals.latency_sum), ",", e.totals.latency_count,
                    "]");
  }
  out += "]}";
  return out;
}

}  // namespace outboxd::observe
