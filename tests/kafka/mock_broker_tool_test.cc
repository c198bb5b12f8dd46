// Runs build/bin/outboxd-mock-broker as the demo and the fault tests do (a separate
// process, driven through stdin and a control FIFO) and checks what it hosts with
// kcat, an independent Kafka client.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kafka/publisher.h"
#include "support/tcp.h"
#include "support/wait_until.h"

namespace outboxd::kafka {
namespace {

using test::Accepts;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr char kTool[] = OUTBOXD_BIN_DIR "/outboxd-mock-broker";

// A child process with its stdin and stdout on pipes; killed if still running when
// destroyed.
class Child {
 public:
  explicit Child(const std::vector<std::string>& args) {
    int in[2];
    int out[2];
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(in[0], STDIN_FILENO);
      dup2(out[1], STDOUT_FILENO);
      std::vector<char*> argv;
      for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(in[0]);
    close(out[1]);
    stdin_ = in[1];
    stdout_ = out[0];
  }
  ~Child() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    CloseStdin();
    if (stdout_ >= 0) close(stdout_);
  }

  bool started() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }

  void Send(std::string_view line) {
    const std::string text = absl::StrCat(absl::string_view(line.data(), line.size()), "\n");
    ASSERT_EQ(write(stdin_, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  }

  void CloseStdin() {
    if (stdin_ >= 0) close(stdin_);
    stdin_ = -1;
  }

  // Next stdout line, or nullopt after the timeout or at EOF.
  std::optional<std::string> ReadLine(absl::Duration timeout = absl::Seconds(10)) {
    const absl::Time deadline = absl::Now() + timeout;
    for (;;) {
      if (size_t eol = buffer_.find('\n'); eol != std::string::npos) {
        std::string line = buffer_.substr(0, eol);
        buffer_.erase(0, eol + 1);
        return line;
      }
      const int left = static_cast<int>(absl::ToInt64Milliseconds(deadline - absl::Now()));
      pollfd p{stdout_, POLLIN, 0};
      if (left <= 0 || poll(&p, 1, left) <= 0) return std::nullopt;
      char chunk[1024];
      const ssize_t n = read(stdout_, chunk, sizeof(chunk));
      if (n <= 0) return std::nullopt;
      buffer_.append(chunk, static_cast<size_t>(n));
    }
  }

  std::string Command(std::string_view line) {
    Send(line);
    return ReadLine().value_or("<no reply>");
  }

  bool Running() {
    if (exited_) return false;
    exited_ = waitpid(pid_, &status_, WNOHANG) == pid_;
    return !exited_;
  }

  // Exit code after `signal`, or -1 if it did not exit normally within the timeout.
  int Stop(int signal, absl::Duration timeout) {
    if (Running()) kill(pid_, signal);
    return Wait(timeout);
  }

  // Exit code, or -1 if it did not exit normally within the timeout.
  int Wait(absl::Duration timeout) {
    test::WaitUntil(
        timeout, [&] { return !Running(); }, absl::Milliseconds(10));
    if (!exited_) return -1;
    return WIFEXITED(status_) ? WEXITSTATUS(status_) : -1;
  }

 private:
  pid_t pid_ = -1;
  int stdin_ = -1;
  int stdout_ = -1;
  bool exited_ = false;
  int status_ = 0;
  std::string buffer_;
};

std::string RunShell(const std::string& command) {
  std::unique_ptr<FILE, decltype(&pclose)> pipe(popen(command.c_str(), "r"), &pclose);
  std::string out;
  if (pipe == nullptr) return out;
  char chunk[4096];
  while (size_t n = fread(chunk, 1, sizeof(chunk), pipe.get())) out.append(chunk, n);
  return out;
}

// TCP_NODELAY of each connected TCP socket the process `pid` holds (listening ones
// left out), read through duplicates of its descriptors (pidfd_getfd).
std::vector<int> NodelayOfConnections(pid_t pid) {
  std::vector<int> nodelay;
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (pidfd < 0) return nodelay;
  for (const auto& entry :
       std::filesystem::directory_iterator(absl::StrCat("/proc/", pid, "/fd"))) {
    int target = 0;
    if (!absl::SimpleAtoi(entry.path().filename().string(), &target)) continue;
    const int fd = static_cast<int>(syscall(SYS_pidfd_getfd, pidfd, target, 0));
    if (fd < 0) continue;
    int protocol = 0, listening = 0, value = 0;
    socklen_t len = sizeof(int);
    if (getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &protocol, &len) == 0 && protocol == IPPROTO_TCP &&
        getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) == 0 && !listening &&
        getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &value, &len) == 0) {
      nodelay.push_back(value);
    }
    close(fd);
  }
  close(pidfd);
  return nodelay;
}

class MockBrokerToolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/outboxd-mock-broker-test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string dir_;
};

TEST_F(MockBrokerToolTest, PrintsBootstrapAndObeysControlCommands) {
  const std::string bootstrap_file = dir_ + "/bootstrap";
  Child broker({kTool, "--brokers", "2", "--topic", "tool.topic", "--partitions", "3",
                "--bootstrap-file", bootstrap_file});
  ASSERT_TRUE(broker.started());
  const std::optional<std::string> first = broker.ReadLine();
  ASSERT_TRUE(first.has_value());
  ASSERT_THAT(*first, StartsWith("bootstrap.servers="));
  const std::string bootstraps(absl::StripPrefix(*first, "bootstrap.servers="));
  const std::vector<std::string> brokers = absl::StrSplit(bootstraps, ',');
  ASSERT_EQ(brokers.size(), 2u);
  std::ifstream file(bootstrap_file);
  std::string from_file;
  std::getline(file, from_file);
  EXPECT_EQ(from_file, bootstraps);

  EXPECT_EQ(broker.Command("down all"), "ok");
  for (const std::string& b : brokers) EXPECT_FALSE(Accepts(b)) << b;
  EXPECT_EQ(broker.Command("up all"), "ok");
  for (const std::string& b : brokers) EXPECT_TRUE(Accepts(b)) << b;
  EXPECT_EQ(broker.Command("down 2"), "ok");
  EXPECT_EQ(broker.Command("up 2"), "ok");
  EXPECT_EQ(broker.Command("rtt all 0"), "ok");
  EXPECT_EQ(broker.Command("topic extra 2"), "ok");
  EXPECT_EQ(broker.Command("leader extra 0 2"), "ok");  // both on broker 2, whatever the
  EXPECT_EQ(broker.Command("leader extra 1 2"), "ok");  // mock chose at creation
  EXPECT_THAT(broker.Command("leader extra 1 all"), StartsWith("error: "));
  EXPECT_THAT(broker.Command("topic extra 2"), StartsWith("error: "));
  EXPECT_THAT(broker.Command("down 7"), StartsWith("error: "));
  EXPECT_THAT(broker.Command("fly away"), StartsWith("error: "));
  EXPECT_EQ(broker.Command("produce-errors 19 2"), "ok");  // NOT_ENOUGH_REPLICAS, retried

  int acked = 0;
  auto publisher = Publisher::Create({.brokers = bootstraps}, [&](const DeliveryReport& r) {
    EXPECT_TRUE(r.status.ok()) << r.status;
    ++acked;
  });
  ASSERT_TRUE(publisher.ok()) << publisher.status();
  const Header headers[] = {{"id", "abc"}};
  ASSERT_TRUE(
      (*publisher)
          ->Produce({.topic = "tool.topic", .key = "77", .value = "hello", .headers = headers})
          .ok());
  ASSERT_TRUE((*publisher)->Flush(absl::Seconds(20)).ok());
  EXPECT_EQ(acked, 1);
  publisher->reset();  // before the broker goes away, or it logs the disconnects

  const std::string listing = RunShell(absl::StrCat("timeout 20 kcat -b ", bootstraps, " -L"));
  EXPECT_THAT(listing, HasSubstr("topic \"tool.topic\" with 3 partitions"));
  EXPECT_THAT(listing, HasSubstr("topic \"extra\" with 2 partitions"));
  const std::string extra = listing.substr(listing.find("topic \"extra\""));
  const std::string extra_partitions = extra.substr(0, extra.find("topic \"", 1));
  EXPECT_THAT(extra_partitions, HasSubstr("partition 0, leader 2"));
  EXPECT_THAT(extra_partitions, HasSubstr("partition 1, leader 2"));
  const std::string consumed = RunShell(absl::StrCat(
      "timeout 20 kcat -b ", bootstraps, " -C -t tool.topic -o beginning -e -q -f '%k|%s|%h\\n'"));
  EXPECT_EQ(consumed, "77|hello|id=abc\n");

  EXPECT_EQ(broker.Stop(SIGTERM, absl::Seconds(5)), 0);
}

// Kafka brokers set TCP_NODELAY; librdkafka's mock leaves Nagle on, which held a
// pipelined response for the client's delayed ACK (~40 ms). The tool turns it off.
TEST_F(MockBrokerToolTest, ConnectionsHaveNagleOff) {
  Child broker({kTool, "--brokers", "1", "--topic", "t", "--partitions", "2"});
  ASSERT_TRUE(broker.started());
  const std::string first = broker.ReadLine().value_or("");
  ASSERT_THAT(first, StartsWith("bootstrap.servers="));
  auto publisher =
      Publisher::Create({.brokers = std::string(absl::StripPrefix(first, "bootstrap.servers="))},
                        [](const DeliveryReport& r) { EXPECT_TRUE(r.status.ok()) << r.status; });
  ASSERT_TRUE(publisher.ok()) << publisher.status();
  ASSERT_TRUE((*publisher)->Produce({.topic = "t", .key = "k", .value = "v"}).ok());
  ASSERT_TRUE((*publisher)->Flush(absl::Seconds(20)).ok());

  const std::vector<int> nodelay = NodelayOfConnections(broker.pid());  // publisher connected
  ASSERT_FALSE(nodelay.empty()) << "no accepted connection found in the broker's descriptors";
  for (int value : nodelay) EXPECT_EQ(value, 1);
  publisher->reset();
  EXPECT_EQ(broker.Stop(SIGTERM, absl::Seconds(5)), 0);
}

TEST_F(MockBrokerToolTest, KeepsRunningAfterStdinEofAndListensOnTheControlFifo) {
  const std::string fifo = dir_ + "/control";
  Child broker({kTool, "--brokers", "1", "--control", fifo});
  ASSERT_TRUE(broker.started());
  ASSERT_THAT(broker.ReadLine().value_or(""), StartsWith("bootstrap.servers="));
  broker.CloseStdin();  // as when started in the background with stdin=/dev/null

  // One poll loop serves both: by the second reply the EOF, pending since before the
  // first command, has been read, and the tool still answers.
  for (const char* command : {"down 1", "up 1"}) {
    std::ofstream(fifo) << command << "\n";  // each client opens, writes, closes
    EXPECT_EQ(broker.ReadLine().value_or("<no reply>"), "ok") << command;
  }
  EXPECT_TRUE(broker.Running());
  EXPECT_EQ(broker.Stop(SIGINT, absl::Seconds(5)), 0);
}

TEST_F(MockBrokerToolTest, BadFlagsExitWithCodeTwo) {
  Child broker({kTool, "--brokers", "0"});
  ASSERT_TRUE(broker.started());
  EXPECT_EQ(broker.Wait(absl::Seconds(10)), 2);
}

}  // namespace
}  // namespace outboxd::kafka
