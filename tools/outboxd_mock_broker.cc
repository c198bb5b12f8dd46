// outboxd-mock-broker: hosts librdkafka's mock cluster (a real Kafka-protocol broker
// set on loopback) in its own process, so the demo, the benchmarks and the fault tests
// can run the relay as a separate process, kill it, and keep the broker's contents.
//
//   $ outboxd-mock-broker --topic pedido.confirmado --partitions 6
//         --bootstrap-file /tmp/bootstrap --control /tmp/broker.ctl &
//   bootstrap.servers=127.0.0.1:41234,127.0.0.1:40021,127.0.0.1:35791
//   $ echo 'down all' > /tmp/broker.ctl      # outage ...
//   $ echo 'up all' > /tmp/broker.ctl        # ... over
//   $ echo 'leader t 0 2' > /tmp/broker.ctl  # partition 0 of t led by broker 2 alone,
//   $ echo 'down 2' > /tmp/broker.ctl        # stalled while the others go on
//
// The first stdout line is always the bootstrap list. Control commands, one per line,
// come from stdin and from the optional --control FIFO; each gets one reply line on
// stdout, "ok" or "error: ...". EOF on stdin is not a stop request (the tool often runs
// in the background with stdin=/dev/null); SIGTERM or SIGINT ends it with exit code 0.
#include <dlfcn.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "kafka/mock_cluster.h"

// librdkafka's mock brokers accept connections with plain accept(2) and leave Nagle's
// algorithm on, so a response written while an earlier one is unacknowledged waits for
// the client's delayed ACK (~40 ms): pipelined produce requests across partitions, and
// a consumer's fetches, would measure the mock. Kafka brokers set TCP_NODELAY on every
// connection (socket.nodelay); this tool's process does too, by interposing accept()
// for librdkafka, which calls it through the dynamic linker.
extern "C" int accept(int fd, sockaddr* __restrict addr, socklen_t* __restrict len) {
  using AcceptFn = int (*)(int, sockaddr*, socklen_t*);
  static const auto real_accept = reinterpret_cast<AcceptFn>(dlsym(RTLD_NEXT, "accept"));
  const int conn = real_accept(fd, addr, len);
  if (conn >= 0) {
    const int one = 1;
    setsockopt(conn, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));  // fails harmlessly off TCP
  }
  return conn;
}

namespace {

using outboxd::kafka::MockCluster;

struct Flags {
  int brokers = 3;
  int partitions = 4;
  std::vector<std::string> topics;
  std::string bootstrap_file;
  std::string control;
};

constexpr char kHelp[] =
    "commands: down ID|all, up ID|all, rtt ID|all MS, produce-errors CODE COUNT, "
    "topic NAME PARTITIONS, leader TOPIC PARTITION ID";

int ReplicationFactor(const MockCluster& cluster) { return std::min(3, cluster.broker_count()); }

// "all" or a broker id; -1 stands for all brokers.
bool ParseBroker(absl::string_view word, int32_t* id) {
  if (word == "all") {
    *id = -1;
    return true;
  }
  return absl::SimpleAtoi(word, id) && *id >= 1;
}

absl::Status RunCommand(MockCluster& cluster, const std::vector<absl::string_view>& w) {
  const absl::string_view verb = w[0];
  int32_t broker = 0;
  int a = 0;
  int b = 0;
  if ((verb == "down" || verb == "up") && w.size() == 2 && ParseBroker(w[1], &broker)) {
    if (verb == "down") {
      return broker < 0 ? cluster.SetAllBrokersDown() : cluster.SetBrokerDown(broker);
    }
    return broker < 0 ? cluster.SetAllBrokersUp() : cluster.SetBrokerUp(broker);
  }
  if (verb == "rtt" && w.size() == 3 && ParseBroker(w[1], &broker) && absl::SimpleAtoi(w[2], &a)) {
    return broker < 0 ? cluster.SetAllBrokersRtt(a) : cluster.SetBrokerRtt(broker, a);
  }
  if (verb == "produce-errors" && w.size() == 3 && absl::SimpleAtoi(w[1], &a) &&
      absl::SimpleAtoi(w[2], &b) && b >= 0) {
    cluster.PushProduceErrors(a, b);
    return absl::OkStatus();
  }
  if (verb == "topic" && w.size() == 3 && absl::SimpleAtoi(w[2], &a)) {
    return cluster.CreateTopic(std::string(w[1]), a, ReplicationFactor(cluster));
  }
  // Stalls one partition (scripts/bench's restart phase): its leader, then `down ID`.
  if (verb == "leader" && w.size() == 4 && absl::SimpleAtoi(w[2], &a) &&
      ParseBroker(w[3], &broker) && broker > 0) {
    return cluster.SetPartitionLeader(std::string(w[1]), a, broker);
  }
  return absl::InvalidArgumentError(absl::StrCat("bad command; ", kHelp));
}

void Reply(absl::string_view text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

void HandleLine(MockCluster& cluster, absl::string_view line) {
  std::vector<absl::string_view> words =
      absl::StrSplit(absl::StripAsciiWhitespace(line), ' ', absl::SkipWhitespace());
  if (words.empty() || words[0][0] == '#') return;
  if (words[0] == "help") return Reply(kHelp);
  const absl::Status status = RunCommand(cluster, words);
  Reply(status.ok() ? "ok" : absl::StrCat("error: ", status.message()));
}

// One input channel (stdin or the FIFO) with its partial-line buffer.
struct Input {
  int fd = -1;
  std::string pending;
};

// Reads what is available and runs every complete line. False once the channel hit
// EOF or failed and should no longer be watched.
bool ServeInput(MockCluster& cluster, Input& in) {
  char buf[4096];
  const ssize_t n = read(in.fd, buf, sizeof(buf));
  if (n < 0) return errno == EAGAIN || errno == EINTR;
  if (n == 0) return false;
  in.pending.append(buf, static_cast<size_t>(n));
  size_t start = 0;
  for (size_t eol; (eol = in.pending.find('\n', start)) != std::string::npos; start = eol + 1) {
    HandleLine(cluster, absl::string_view(in.pending).substr(start, eol - start));
  }
  in.pending.erase(0, start);
  return true;
}

// Writes the list to PATH through a rename, so a reader polling for the file never
// sees it half written.
absl::Status WriteBootstrapFile(const std::string& path, const std::string& bootstraps) {
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  std::unique_ptr<FILE, decltype(&std::fclose)> f(std::fopen(tmp.c_str(), "w"), &std::fclose);
  if (f == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("--bootstrap-file ", path, ": cannot write ",
                                                   tmp, ": ", std::strerror(errno)));
  }
  const bool written = std::fprintf(f.get(), "%s\n", bootstraps.c_str()) > 0;
  if (std::fclose(f.release()) != 0 || !written || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return absl::InvalidArgumentError(
        absl::StrCat("--bootstrap-file ", path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

// Opens (creating if missing) the control FIFO. O_RDWR keeps a writer of our own open,
// so the FIFO never reports EOF between two `echo cmd > fifo` clients.
absl::StatusOr<int> OpenControlFifo(const std::string& path) {
  if (mkfifo(path.c_str(), 0600) != 0 && errno != EEXIST) {
    return absl::InvalidArgumentError(
        absl::StrCat("--control ", path, ": cannot create FIFO: ", std::strerror(errno)));
  }
  struct stat st;
  if (stat(path.c_str(), &st) != 0 || !S_ISFIFO(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--control ", path, ": exists and is not a FIFO; remove it or pick a path"));
  }
  const int fd = open(path.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--control ", path, ": ", std::strerror(errno)));
  }
  return fd;
}

// Serves stdin and the FIFO until SIGTERM/SIGINT arrives on signal_fd.
void ServeUntilSignal(MockCluster& cluster, int signal_fd, int control_fd) {
  std::vector<Input> inputs = {{STDIN_FILENO, {}}};
  if (control_fd >= 0) inputs.push_back({control_fd, {}});
  for (;;) {
    std::vector<pollfd> fds = {{signal_fd, POLLIN, 0}};
    for (const Input& in : inputs) fds.push_back({in.fd, POLLIN, 0});
    if (poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[0].revents != 0) return;
    for (size_t i = inputs.size(); i-- > 0;) {
      const short ev = fds[i + 1].revents;
      if (ev == 0) continue;
      // POLLNVAL: stdin was closed before we started; stop watching it too.
      if ((ev & POLLNVAL) || !ServeInput(cluster, inputs[i])) inputs.erase(inputs.begin() + i);
    }
  }
}

int Run(const Flags& flags) {
  // Block the stop signals before librdkafka starts its threads (they inherit the
  // mask), so they are only ever delivered through the signalfd.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a reader of stdout going away must not kill the broker
  const int signal_fd = signalfd(-1, &stop, SFD_CLOEXEC);

  auto cluster = MockCluster::Create(flags.brokers);
  if (!cluster.ok()) {
    std::fprintf(stderr, "outboxd-mock-broker: %s\n", cluster.status().ToString().c_str());
    return 1;
  }
  for (const std::string& topic : flags.topics) {
    const absl::Status s =
        (*cluster)->CreateTopic(topic, flags.partitions, ReplicationFactor(**cluster));
    if (!s.ok()) {
      std::fprintf(stderr, "outboxd-mock-broker: %s\n", std::string(s.message()).c_str());
      return 2;
    }
  }
  int control_fd = -1;
  if (!flags.control.empty()) {
    absl::StatusOr<int> fd = OpenControlFifo(flags.control);
    if (!fd.ok()) {
      std::fprintf(stderr, "outboxd-mock-broker: %s\n", std::string(fd.status().message()).c_str());
      return 2;
    }
    control_fd = *fd;
  }
  const std::string bootstraps = (*cluster)->bootstraps();
  if (!flags.bootstrap_file.empty()) {
    if (absl::Status s = WriteBootstrapFile(flags.bootstrap_file, bootstraps); !s.ok()) {
      std::fprintf(stderr, "outboxd-mock-broker: %s\n", std::string(s.message()).c_str());
      return 2;
    }
  }
  // Last: whoever waits for this line may rely on the file, topics and FIFO.
  Reply(absl::StrCat("bootstrap.servers=", bootstraps));
  ServeUntilSignal(**cluster, signal_fd, control_fd);
  if (control_fd >= 0) close(control_fd);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Hosts librdkafka's mock Kafka cluster for outboxd's demo, benchmarks and tests"};
  Flags flags;
  app.add_option("--brokers", flags.brokers, "number of brokers")->check(CLI::Range(1, 64));
  app.add_option("--partitions", flags.partitions, "partitions of each --topic")
      ->check(CLI::Range(1, 10000));
  app.add_option("--topic", flags.topics, "topic to create at start (repeatable)");
  app.add_option("--bootstrap-file", flags.bootstrap_file,
                 "write the bootstrap list to this file (atomically) once listening");
  app.add_option("--control", flags.control, "FIFO to read control commands from (created)");
  app.footer(kHelp);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  return Run(flags);
}
