#include "base/periodic_thread.h"

#include <cassert>
#include <utility>

namespace outboxd {

PeriodicThread::~PeriodicThread() { Stop(); }

void PeriodicThread::Start(absl::Duration interval, std::function<void()> tick) {
  assert(!thread_.joinable() && !Stopping() && "PeriodicThread::Start: once, and before Stop");
  thread_ = std::thread([this, interval, tick = std::move(tick)] {
    while (!Stopping()) {
      tick();
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&stopping_), interval);
    }
  });
}

void PeriodicThread::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;  // absl::Mutex re-checks the waiting Condition on unlock
  }
  if (thread_.joinable()) thread_.join();
}

bool PeriodicThread::Stopping() const {
  absl::MutexLock lock(&mu_);
  return stopping_;
}

}  // namespace outboxd
