#include "chaos/broker.h"

#include <fcntl.h>
#include <unistd.h>

#include <csignal>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

namespace outboxd::chaos {

absl::StatusOr<std::unique_ptr<MockBroker>> MockBroker::Start(
    const std::string& dir, const std::vector<std::string>& topics, int partitions) {
  const std::string fifo = absl::StrCat(dir, "/broker.ctl");
  std::vector<std::string> argv = {test::BinPath("outboxd-mock-broker"), "--partitions",
                                   absl::StrCat(partitions), "--control", fifo};
  for (const std::string& t : topics) argv.insert(argv.end(), {"--topic", t});
  auto process = test::ChildProcess::Start(argv);
  const std::string marker = "bootstrap.servers=";
  if (!process->WaitForLog(marker, absl::Seconds(30))) {
    return absl::UnavailableError(absl::StrCat("mock broker did not start: ", process->Log()));
  }
  const std::string log = process->Log();
  const size_t at = log.find(marker) + marker.size();
  std::string bootstraps = log.substr(at, log.find('\n', at) - at);
  return std::unique_ptr<MockBroker>(new MockBroker(std::move(process), fifo, bootstraps));
}

MockBroker::MockBroker(std::unique_ptr<test::ChildProcess> process, std::string fifo,
                       std::string bootstraps)
    : process_(std::move(process)), fifo_(std::move(fifo)), bootstraps_(std::move(bootstraps)) {}

MockBroker::~MockBroker() {
  process_->Signal(SIGTERM);
  process_->Wait(absl::Seconds(10));
  unlink(fifo_.c_str());
}

int MockBroker::Answers(std::string* last) const {
  int n = 0;
  for (absl::string_view line : absl::StrSplit(process_->Log(), '\n')) {
    if (line == "ok" || absl::StartsWith(line, "error: ")) {
      ++n;
      *last = std::string(line);
    }
  }
  return n;
}

absl::Status MockBroker::Command(const std::string& command) {
  std::string last;
  const int before = Answers(&last);
  const int fd = open(fifo_.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("cannot open ", fifo_));
  const std::string line = command + "\n";
  const bool written = write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  close(fd);
  if (!written) return absl::UnavailableError(absl::StrCat("cannot write to ", fifo_));
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (Answers(&last) == before) {
    if (absl::Now() > deadline) return absl::DeadlineExceededError("mock broker did not answer");
    absl::SleepFor(absl::Milliseconds(10));
  }
  if (last != "ok") return absl::InternalError(absl::StrCat(command, ": ", last));
  return absl::OkStatus();
}

}  // namespace outboxd::chaos
