#include "support/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/time/clock.h"
#include "support/wait_until.h"

namespace outboxd::test {

std::string BinPath(const std::string& name) { return std::string(OUTBOXD_BIN_DIR) + "/" + name; }

std::unique_ptr<ChildProcess> ChildProcess::Start(const std::vector<std::string>& argv,
                                                  const std::vector<std::string>& extra_env) {
  auto child = std::unique_ptr<ChildProcess>(new ChildProcess());
  char path[] = "/tmp/outboxd-child-XXXXXX";
  int log_fd = mkstemp(path);
  child->log_path_ = path;
  pid_t pid = fork();
  if (pid == 0) {
    dup2(log_fd, STDOUT_FILENO);
    dup2(log_fd, STDERR_FILENO);
    int devnull = open("/dev/null", O_RDONLY);
    dup2(devnull, STDIN_FILENO);
    for (const std::string& kv : extra_env) putenv(const_cast<char*>(kv.c_str()));
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(log_fd);
  child->pid_ = pid;
  return child;
}

ChildProcess::~ChildProcess() {
  if (Running()) {
    kill(pid_, SIGKILL);
    Wait(absl::Seconds(10));
  }
  unlink(log_path_.c_str());
}

void ChildProcess::Signal(int signal) {
  if (!exit_code_) kill(pid_, signal);
}

std::optional<int> ChildProcess::Wait(absl::Duration timeout) {
  WaitUntil(
      timeout,
      [&] {
        int status = 0;
        if (!exit_code_ && waitpid(pid_, &status, WNOHANG) == pid_) {
          exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        }
        return exit_code_.has_value();
      },
      absl::Milliseconds(20));
  return exit_code_;
}

bool ChildProcess::Running() { return !Wait(absl::ZeroDuration()).has_value(); }

std::string ChildProcess::Log() const {
  std::ifstream in(log_path_);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool ContainsAny(const std::string& log, const std::vector<std::string>& texts) {
  for (const std::string& text : texts) {
    if (log.find(text) != std::string::npos) return true;
  }
  return false;
}

bool ChildProcess::WaitForLog(const std::string& text, absl::Duration timeout) const {
  return WaitForAnyLog({text}, timeout);
}

bool ChildProcess::WaitForAnyLog(const std::vector<std::string>& texts,
                                 absl::Duration timeout) const {
  return WaitUntil(
      timeout, [&] { return ContainsAny(Log(), texts); }, absl::Milliseconds(50));
}

std::vector<std::string> CommandLines(const std::string& command, int* exit_status) {
  std::vector<std::string> lines;
  FILE* p = popen(command.c_str(), "r");
  if (p == nullptr) return lines;
  std::string line;
  for (int c = fgetc(p); c != EOF; c = fgetc(p)) {
    if (c != '\n') {
      line.push_back(static_cast<char>(c));
    } else if (!line.empty()) {
      lines.push_back(std::exchange(line, std::string()));
    }
  }
  if (!line.empty()) lines.push_back(line);
  const int status = pclose(p);
  if (exit_status != nullptr) *exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return lines;
}

}  // namespace outboxd::test
