// A child process for tests that run the real binaries (outboxd, the mock broker):
// started with its output in a log file, signalled, killed, waited for.
//
//   auto relay = ChildProcess::Start({BinPath("outboxd"), "run", "--pg", conninfo, ...});
//   relay->Signal(SIGTERM);
//   EXPECT_EQ(relay->Wait(absl::Seconds(30)), 0);
#ifndef OUTBOXD_TESTS_SUPPORT_CHILD_PROCESS_H_
#define OUTBOXD_TESTS_SUPPORT_CHILD_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace outboxd::test {

// build/bin/<name>
std::string BinPath(const std::string& name);

// The non-empty lines a shell command prints (its stdout), and (when asked) its exit
// status.
std::vector<std::string> CommandLines(const std::string& command, int* exit_status = nullptr);

// The lines with which an `outboxd run` session begins reading its slot: streaming, or
// through SQL when the backlog is over --bulk-catch-up. On the shared test cluster a
// fresh slot's backlog holds the WAL other tests wrote meanwhile, so either can come.
inline const std::vector<std::string> kRelayReadsSlot = {"streaming slot",
                                                         "catching up through SQL (bulk) on slot"};

// Whether `log` contains one of `texts`.
bool ContainsAny(const std::string& log, const std::vector<std::string>& texts);

class ChildProcess {
 public:
  // Starts argv[0] with the given arguments; stdout and stderr go to a temp log file.
  static std::unique_ptr<ChildProcess> Start(const std::vector<std::string>& argv,
                                             const std::vector<std::string>& extra_env = {});
  ~ChildProcess();  // SIGKILLs a child still running

  void Signal(int signal);
  // Exit code, 128+signal for a signal death, std::nullopt on timeout.
  std::optional<int> Wait(absl::Duration timeout);
  bool Running();
  std::string Log() const;  // everything the child printed so far
  // Waits until the log contains `text`.
  bool WaitForLog(const std::string& text, absl::Duration timeout) const;
  // Waits until the log contains one of `texts`.
  bool WaitForAnyLog(const std::vector<std::string>& texts, absl::Duration timeout) const;
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  std::optional<int> exit_code_;
  std::string log_path_;
};

}  // namespace outboxd::test

#endif  // OUTBOXD_TESTS_SUPPORT_CHILD_PROCESS_H_
