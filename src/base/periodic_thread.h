// PeriodicThread: a thread that calls a function at once, then again each `interval`
// after the previous call ended, until Stop() or destruction. Stop() wakes the wait at
// once (an hour's interval never holds up shutdown) and joins; a call in progress
// finishes first, and a long one can poll Stopping() to end early. The machinery
// behind the stall watch, the query sampler and the cleanup job.
//
//   PeriodicThread sampler;   // declared after what `tick` uses, so destroyed (stopped) first
//   sampler.Start(absl::Seconds(5), [&] { gauge.Set(QueryLag()); });
//   ...
//   sampler.Stop();           // or leave it to ~PeriodicThread
//
//   // A long call that ends early when asked:
//   job.Start(absl::Hours(1), [&] { while (!job.Stopping() && DeleteBatch() > 0) {} });
#ifndef OUTBOXD_BASE_PERIODIC_THREAD_H_
#define OUTBOXD_BASE_PERIODIC_THREAD_H_

#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace outboxd {

class PeriodicThread {
 public:
  PeriodicThread() = default;
  ~PeriodicThread();  // Stop()
  PeriodicThread(const PeriodicThread&) = delete;
  PeriodicThread& operator=(const PeriodicThread&) = delete;

  // Starts the thread. Once per PeriodicThread, and not after Stop().
  void Start(absl::Duration interval, std::function<void()> tick);

  // Wakes the thread, waits for a call in progress and joins. Idempotent, fine before
  // Start(); never from inside `tick` (it would join itself).
  void Stop();

  // True once Stop() began: for a long `tick` to return early.
  bool Stopping() const;

 private:
  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace outboxd

#endif  // OUTBOXD_BASE_PERIODIC_THREAD_H_
