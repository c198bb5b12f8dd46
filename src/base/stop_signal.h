// StopSignal: a flag plus a self-pipe, so a SIGTERM handler can wake a select()
// loop. Notify() is async-signal-safe.
//
//   StopSignal stop;
//   signal handler: stop.Notify();
//   loop: select() on stop.fd() among the others; if (stop.requested()) break;
#ifndef OUTBOXD_BASE_STOP_SIGNAL_H_
#define OUTBOXD_BASE_STOP_SIGNAL_H_

#include <fcntl.h>
#include <unistd.h>

#include <atomic>

namespace outboxd {

class StopSignal {
 public:
  StopSignal() {
    if (pipe2(fds_, O_NONBLOCK | O_CLOEXEC) != 0) fds_[0] = fds_[1] = -1;
  }
  ~StopSignal() {
    if (fds_[0] >= 0) close(fds_[0]);
    if (fds_[1] >= 0) close(fds_[1]);
  }
  StopSignal(const StopSignal&) = delete;
  StopSignal& operator=(const StopSignal&) = delete;

  void Notify() {
    requested_.store(true);
    if (fds_[1] >= 0) {
      [[maybe_unused]] ssize_t n = write(fds_[1], "x", 1);
    }
  }
  bool requested() const { return requested_.load(); }
  int fd() const { return fds_[0]; }

 private:
  std::atomic<bool> requested_{false};
  int fds_[2];
};

}  // namespace outboxd

#endif  // OUTBOXD_BASE_STOP_SIGNAL_H_
