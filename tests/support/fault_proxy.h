// FaultProxy: a TCP forwarder on a free loopback port, in front of one target
// (PostgreSQL, a broker), that makes the faults real networks make: added latency
// (steady, or a stall of seconds: a spike), a bandwidth cap, a blackhole (nothing
// forwarded either way while every socket stays open: the half-open peer a dead host
// or NAT box leaves), resets (RST), and refused connections. Heal() ends them all.
// One thread forwards for every connection; the controls may be called from any
// thread. Used in process by the tests (tests/integration/network_fault_test.cc) and
// by the chaos run (outboxd-chaos --network, tests/chaos/chaos_main.cc).
//
//   FaultProxy proxy("127.0.0.1", pg_port);
//   ASSERT_TRUE(proxy.Start().ok());
//   std::string conninfo = absl::StrCat("host=127.0.0.1 port=", proxy.port(), " ...");
//   proxy.Blackhole();   // the relay hears nothing, and its sockets stay open
//   proxy.Heal();
#ifndef OUTBOXD_TESTS_SUPPORT_FAULT_PROXY_H_
#define OUTBOXD_TESTS_SUPPORT_FAULT_PROXY_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace outboxd::test {

class FaultProxy {
 public:
  // Forwards to target_host:target_port (IPv4). `port` 0: a free port.
  FaultProxy(std::string target_host, int target_port, int port = 0);
  ~FaultProxy();
  FaultProxy(const FaultProxy&) = delete;
  FaultProxy& operator=(const FaultProxy&) = delete;

  // Listens on 127.0.0.1 and starts forwarding.
  absl::Status Start();
  int port() const { return port_; }
  std::string address() const;  // "127.0.0.1:PORT"

  // Every byte waits `latency` before it is sent on (both directions).
  void SetLatency(absl::Duration latency);
  // Nothing is sent on for `duration` from now, then all of it at once: a spike.
  void Stall(absl::Duration duration);
  // At most this many bytes per second in each direction of each connection (0: no cap).
  void SetBandwidth(int64_t bytes_per_second);
  // Stops forwarding in both directions, new connections included (accepted, never
  // answered), without closing any socket.
  void Blackhole();
  // Closes every connection, both sides, with RST (SO_LINGER 0).
  void ResetAll();
  // New connections are refused (the listener is closed); open ones go on.
  void RefuseNew();
  // Ends every fault: forwarding resumes where it stopped, nothing is lost.
  void Heal();

  // Connections open now (client sides).
  int connections() const;
  // Connections accepted since Start().
  int accepted() const { return accepted_.load(); }

 private:
  struct Connection;
  struct Faults {
    absl::Duration latency;
    absl::Time stalled_until = absl::InfinitePast();
    int64_t bytes_per_second = 0;
    bool blackhole = false;
    bool refuse = false;
    bool reset = false;  // a ResetAll() for the loop to carry out
  };

  void Loop();
  void Turn(const Faults& faults);
  absl::Status Listen();
  void Accept();
  void Wake();
  Faults TakeFaults();        // and clears the one-shot reset
  Faults PeekFaults() const;  // as they are

  const std::string target_host_;
  const int target_port_;
  int port_;
  int listener_ = -1;
  int wake_[2] = {-1, -1};
  std::atomic<bool> stop_{false};
  std::atomic<int> accepted_{0};
  std::atomic<int> open_{0};
  std::atomic<bool> listening_{false};
  mutable absl::Mutex mu_;
  Faults faults_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Connection>> connections_;  // the loop thread's
  std::thread thread_;
};

}  // namespace outboxd::test

#endif  // OUTBOXD_TESTS_SUPPORT_FAULT_PROXY_H_
