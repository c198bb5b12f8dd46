// Load: a background writer of outbox rows for the fault tests, whatever the broker.
#ifndef OUTBOXD_TESTS_SUPPORT_OUTBOX_LOAD_H_
#define OUTBOXD_TESTS_SUPPORT_OUTBOX_LOAD_H_

#include <atomic>
#include <string>
#include <thread>

#include "absl/time/time.h"

namespace outboxd::test {

// Inserts outbox rows (single and multi-row transactions, 13 aggregates) on its own
// connection until stopped, reconnecting when the server goes away. What counts as
// committed is what the table holds afterwards: a COMMIT cut by a crash may or may not
// have happened.
//   Load load(h.db().conninfo());  ...fault...;  load.Stop();
class Load {
 public:
  explicit Load(std::string conninfo);
  ~Load() { Stop(); }
  void Stop();
  int transactions() const { return transactions_; }
  // Waits until `n` more transactions have committed: the load has run on through
  // whatever the test just did (a kill, a crash, a restart).
  bool WaitForMore(int n, absl::Duration timeout = absl::Seconds(60));

 private:
  void Run();

  std::string conninfo_;
  std::atomic<bool> stop_{false};
  std::atomic<int> transactions_{0};
  std::thread thread_;
};

}  // namespace outboxd::test

#endif  // OUTBOXD_TESTS_SUPPORT_OUTBOX_LOAD_H_
