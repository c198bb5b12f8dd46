// Two `outboxd run` instances on one slot, as a supervisor (systemd, Kubernetes) would
// keep them: one streams, the other stands by; whichever exits is started again. The
// chaos driver kills them (kill -9), and restarts both to change their Kafka settings
// (one produce request in flight while produce errors are injected).
//
//   RelayPair relays({.conninfo = db, .sink_args = {"--brokers", b}, .slot = "outboxd", .log_dir =
//   dir}); relays.StartBoth(/*single_in_flight=*/false); relays.KillActive();
#ifndef OUTBOXD_TESTS_CHAOS_RELAYS_H_
#define OUTBOXD_TESTS_CHAOS_RELAYS_H_

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "support/child_process.h"

namespace outboxd::chaos {

struct RelayConfig {
  std::string conninfo;  // the database
  // The relays' own --pg when their path differs (--network: through a fault proxy);
  // "" for `conninfo`. The driver's checks always go straight.
  std::string relay_conninfo;
  // The sink's flags: {"--brokers", B} or {"--sink", "rabbitmq", "--amqp-url", U, ...}.
  std::vector<std::string> sink_args;
  std::string slot;
  std::string log_dir;  // relay-a.log, relay-b.log: every instance's output, appended
  // More flags for the PostgreSQL side (--replica: --recreate-missing-slot, --standby-slot).
  std::vector<std::string> pg_args;
};

// An exit nobody asked for (not our kill -9, not our SIGTERM). One before the relay
// reached its slot is a start refused (PostgreSQL was down: exit 2 by design, the
// supervisor tries again); one after it streamed or stood by is a failure.
struct UnexpectedExit {
  std::string relay;
  int code;
  bool reached_slot;
  std::string last_line;
};

class RelayPair {
 public:
  explicit RelayPair(RelayConfig config);
  ~RelayPair();  // kills whatever still runs

  // Starts both instances (and the supervisor thread on first use).
  void StartBoth(bool single_in_flight);
  // SIGTERM to both, waits for their clean exit (0); false if one did not stop cleanly.
  bool StopBoth(absl::Duration timeout);
  // kill -9 of the instance that holds the slot (or of the other one); the supervisor
  // starts it again. Returns the instance's name, or "" if none was running.
  std::string Kill(bool standby);
  // The PostgreSQL flags of the instances started from now on (a failover names
  // another standby slot).
  void SetPgArgs(std::vector<std::string> pg_args);
  // True once one instance streams the slot.
  bool WaitForActive(absl::Duration timeout);
  // "relay-a", "relay-b" or "" (nobody holds the slot).
  std::string Active();

  std::vector<UnexpectedExit> UnexpectedExits() const;
  int Starts() const { return starts_; }

 private:
  struct Instance {
    std::string name;
    std::unique_ptr<test::ChildProcess> process;
    bool expect_exit = false;  // we killed or stopped it
    absl::Time restart_at;     // after an unexpected exit, like systemd's RestartSec
  };
  void StartLocked(Instance& instance);
  // Appends the process's output to its log file and forgets it.
  void ReapLocked(Instance& instance, int code);
  void Supervise();

  const RelayConfig config_;
  mutable std::mutex mu_;
  std::array<Instance, 2> instances_;       // guarded by mu_
  bool single_in_flight_ = false;           // guarded by mu_
  std::vector<std::string> pg_args_;        // guarded by mu_
  bool supervising_ = false;                // guarded by mu_: restart exited instances
  std::vector<UnexpectedExit> unexpected_;  // guarded by mu_
  std::atomic<int> starts_{0};
  std::atomic<bool> stop_{false};
  std::thread supervisor_;
};

}  // namespace outboxd::chaos

#endif  // OUTBOXD_TESTS_CHAOS_RELAYS_H_
