// The descriptor a test double (FakeSink, ScriptedStream) hands its caller to wait
// on: a non-blocking pipe, readable from Signal() until the bytes are read back.
//
//   WakePipe wake;
//   wake.Signal();         // poll(wake.fd()) returns at once
//   wake.TakeOne();        // one signal consumed; Drain() consumes them all
#ifndef OUTBOXD_TESTS_SUPPORT_WAKE_PIPE_H_
#define OUTBOXD_TESTS_SUPPORT_WAKE_PIPE_H_

#include <fcntl.h>
#include <unistd.h>

namespace outboxd::test {

class WakePipe {
 public:
  WakePipe() {
    int fds[2];
    if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) == 0) {
      read_ = fds[0];
      write_ = fds[1];
    }
  }
  ~WakePipe() {
    close(read_);
    close(write_);
  }
  WakePipe(const WakePipe&) = delete;
  WakePipe& operator=(const WakePipe&) = delete;

  int fd() const { return read_; }
  void Signal() { (void)!write(write_, "x", 1); }
  void TakeOne() {
    char byte;
    (void)!read(read_, &byte, 1);
  }
  void Drain() {
    char drain[64];
    while (read(read_, drain, sizeof drain) > 0) {
    }
  }

 private:
  int read_ = -1;
  int write_ = -1;
};

}  // namespace outboxd::test

#endif  // OUTBOXD_TESTS_SUPPORT_WAKE_PIPE_H_
