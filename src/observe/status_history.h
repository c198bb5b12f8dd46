// The status page's charts need the last few minutes as soon as the page opens, not
// only what the browser sampled since: every 2 s this reads the counters the rates
// come from (Metrics::ReadTotals) on its own thread and keeps the last 5 minutes, and
// /status.json serves them. A few KB at most; the page computes the rates.
//
//   StatusHistory history(metrics);   // after `metrics`, so stopped before it goes
//   history.Start();
//   http.Handle("/status.json", [&] { return HttpResponse{200, "application/json",
//                                                          history.Json()}; });
//   // {"interval_s":2,"samples":[[1796284800000,1200,0.84,1200],...]}
//   //  each sample: [unix ms, published, latency sum (s), latency count]
#ifndef OUTBOXD_OBSERVE_STATUS_HISTORY_H_
#define OUTBOXD_OBSERVE_STATUS_HISTORY_H_

#include <deque>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/periodic_thread.h"
#include "observe/metrics.h"

namespace outboxd::observe {

class StatusHistory {
 public:
  // `metrics` must outlive this.
  explicit StatusHistory(const Metrics& metrics, absl::Duration interval = absl::Seconds(2),
                         size_t keep = 150);
  void Start();
  // Also at destruction.
  void Stop() { thread_.Stop(); }
  // Adds a sample now (what the thread does every `interval`).
  void Sample(absl::Time now);
  std::string Json() const;

 private:
  struct Entry {
    absl::Time at;
    Metrics::Totals totals;
  };
  const Metrics& metrics_;
  const absl::Duration interval_;
  const size_t keep_;
  mutable absl::Mutex mu_;
  std::deque<Entry> samples_ ABSL_GUARDED_BY(mu_);
  PeriodicThread thread_;  // last: stopped before the samples go
};

}  // namespace outboxd::observe

#endif  // OUTBOXD_OBSERVE_STATUS_HISTORY_H_
