// FaultProxy's loop: one poll() over the listener and both sockets of every
// connection, 10 ms at most, so latency and stalls are released on time. Bytes read
// wait in a per-direction queue stamped with their release time; the queue's limit
// stops reading, so a slow or capped path pushes back on the sender as a real one
// does. A blackhole takes a connection's sockets out of the poll set: the kernel
// still holds them open, and nothing moves.
#include "support/fault_proxy.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <deque>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace outboxd::test {
namespace {

constexpr size_t kMaxQueued = 256 << 10;  // per direction: reading stops above it
constexpr size_t kReadChunk = 16 << 10;
constexpr int kPollMs = 10;

sockaddr_in Address(const std::string& host, int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, host.c_str(), &addr.sin_addr);
  return addr;
}

// Closes with RST instead of FIN: the peer's next read fails with ECONNRESET.
void CloseWithReset(int fd) {
  if (fd < 0) return;
  linger hard{.l_onoff = 1, .l_linger = 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &hard, sizeof(hard));
  close(fd);
}

void SetNonBlocking(int fd) {
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

}  // namespace

// One direction of a connection: bytes read from `from`, waiting to go to `to`.
struct Flow {
  struct Chunk {
    std::string bytes;
    size_t sent = 0;
    absl::Time release;
  };
  int from = -1;
  int to = -1;
  std::deque<Chunk> queue;
  size_t queued = 0;
  bool eof = false;   // `from` closed its side
  bool shut = false;  // and that close was passed on to `to`
  double tokens = 0;  // bandwidth cap's bucket, in bytes
  absl::Time refilled = absl::Now();

  bool WantsRead() const { return !eof && queued < kMaxQueued; }
  // False when the connection broke (the caller resets it).
  bool Read(absl::Time now, absl::Duration latency) {
    std::string bytes(kReadChunk, '\0');
    const ssize_t n = recv(from, bytes.data(), bytes.size(), MSG_DONTWAIT);
    if (n == 0) eof = true;
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    if (n <= 0) return true;
    bytes.resize(static_cast<size_t>(n));
    queued += bytes.size();
    queue.push_back({.bytes = std::move(bytes), .release = now + latency});
    return true;
  }
  size_t Allowance(absl::Time now, int64_t bytes_per_second) {
    if (bytes_per_second <= 0) return SIZE_MAX;
    const double burst = std::max(1.0, bytes_per_second / 10.0);  // 100 ms worth
    tokens = std::min(burst, tokens + bytes_per_second * absl::ToDoubleSeconds(now - refilled));
    refilled = now;
    return static_cast<size_t>(tokens);
  }
  bool Write(absl::Time now, int64_t bytes_per_second) {
    while (!queue.empty() && queue.front().release <= now) {
      Chunk& chunk = queue.front();
      const size_t size =
          std::min(chunk.bytes.size() - chunk.sent, Allowance(now, bytes_per_second));
      if (size == 0) return true;
      const ssize_t n =
          send(to, chunk.bytes.data() + chunk.sent, size, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
      if (bytes_per_second > 0) tokens -= static_cast<double>(n);
      chunk.sent += static_cast<size_t>(n);
      queued -= static_cast<size_t>(n);
      if (chunk.sent == chunk.bytes.size()) queue.pop_front();
    }
    if (eof && queue.empty() && !shut) {
      shutdown(to, SHUT_WR);
      shut = true;
    }
    return true;
  }
};

struct FaultProxy::Connection {
  int client = -1;
  int upstream = -1;
  Flow up;    // client -> target
  Flow down;  // target -> client
  bool broken = false;

  Connection(int client_fd, int upstream_fd) : client(client_fd), upstream(upstream_fd) {
    up.from = down.to = client;
    up.to = down.from = upstream;
  }
  ~Connection() {
    if (broken) {
      CloseWithReset(client);
      CloseWithReset(upstream);
    } else {
      close(client);
      close(upstream);
    }
  }
  bool done() const { return broken || (up.shut && down.shut); }
};

FaultProxy::FaultProxy(std::string target_host, int target_port, int port)
    : target_host_(std::move(target_host)), target_port_(target_port), port_(port) {}

FaultProxy::~FaultProxy() {
  stop_ = true;
  Wake();
  if (thread_.joinable()) thread_.join();
  connections_.clear();
  if (listener_ >= 0) close(listener_);
  for (int fd : wake_) {
    if (fd >= 0) close(fd);
  }
}

absl::Status FaultProxy::Start() {
  if (pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) return absl::InternalError("pipe2 failed");
  if (absl::Status status = Listen(); !status.ok()) return status;
  thread_ = std::thread([this] { Loop(); });
  return absl::OkStatus();
}

std::string FaultProxy::address() const { return absl::StrCat("127.0.0.1:", port_); }

absl::Status FaultProxy::Listen() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr = Address("127.0.0.1", port_);
  socklen_t size = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), size) != 0 || listen(fd, 64) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &size) != 0) {
    close(fd);
    return absl::UnavailableError(
        absl::StrCat("fault proxy cannot listen on 127.0.0.1:", port_, ": ", strerror(errno)));
  }
  port_ = ntohs(addr.sin_port);
  listener_ = fd;
  listening_ = true;
  return absl::OkStatus();
}

void FaultProxy::Wake() {
  if (wake_[1] >= 0) (void)!write(wake_[1], "w", 1);
}

void FaultProxy::SetLatency(absl::Duration latency) {
  absl::MutexLock lock(&mu_);
  faults_.latency = latency;
}

void FaultProxy::Stall(absl::Duration duration) {
  absl::MutexLock lock(&mu_);
  faults_.stalled_until = absl::Now() + duration;
}

void FaultProxy::SetBandwidth(int64_t bytes_per_second) {
  absl::MutexLock lock(&mu_);
  faults_.bytes_per_second = bytes_per_second;
}

void FaultProxy::Blackhole() {
  absl::MutexLock lock(&mu_);
  faults_.blackhole = true;
}

void FaultProxy::ResetAll() {
  {
    absl::MutexLock lock(&mu_);
    faults_.reset = true;
  }
  Wake();
  // Carried out by the loop; the caller may rely on it having happened.
  while (!stop_ && open_.load() > 0) absl::SleepFor(absl::Milliseconds(5));
}

void FaultProxy::RefuseNew() {
  {
    absl::MutexLock lock(&mu_);
    faults_.refuse = true;
  }
  Wake();
  while (!stop_ && listening_.load()) absl::SleepFor(absl::Milliseconds(5));  // the loop closes it
}

void FaultProxy::Heal() {
  {
    absl::MutexLock lock(&mu_);
    faults_ = Faults{};
  }
  Wake();
}

int FaultProxy::connections() const { return open_.load(); }

FaultProxy::Faults FaultProxy::TakeFaults() {
  absl::MutexLock lock(&mu_);
  Faults faults = faults_;
  faults_.reset = false;
  return faults;
}

FaultProxy::Faults FaultProxy::PeekFaults() const {
  absl::MutexLock lock(&mu_);
  return faults_;
}

void FaultProxy::Loop() {
  while (!stop_) Turn(TakeFaults());
}

void FaultProxy::Turn(const Faults& faults) {
  if (faults.reset) {
    for (auto& connection : connections_) connection->broken = true;
    connections_.clear();
    open_ = 0;
  }
  if (faults.refuse && listener_ >= 0) {
    close(listener_);
    listener_ = -1;
    listening_ = false;
  } else if (!faults.refuse && listener_ < 0) {
    (void)Listen();  // the same port; retried next turn if it is taken meanwhile
  }
  std::vector<pollfd> fds = {{.fd = wake_[0], .events = POLLIN, .revents = 0},
                             {.fd = listener_, .events = POLLIN, .revents = 0}};
  for (const auto& c : connections_) {
    if (faults.blackhole) break;
    // A negative fd is skipped: a closed side would report POLLHUP at every turn.
    fds.push_back({.fd = c->up.WantsRead() ? c->client : -1, .events = POLLIN, .revents = 0});
    fds.push_back({.fd = c->down.WantsRead() ? c->upstream : -1, .events = POLLIN, .revents = 0});
  }
  poll(fds.data(), fds.size(), kPollMs);
  char drain[64];
  while (read(wake_[0], drain, sizeof(drain)) > 0) {
  }
  if (fds[1].revents & POLLIN) Accept();
  // The faults as they are after the poll: bytes that arrived during it must get a
  // latency, stall or blackhole set meanwhile (the one taken before the poll is up to
  // kPollMs old, and gave an echo sent right after SetLatency only one way's delay).
  const Faults shaping = PeekFaults();
  if (shaping.blackhole) return;
  const absl::Time now = absl::Now();
  const bool stalled = now < shaping.stalled_until;
  for (size_t i = 0; i < connections_.size() && 2 + 2 * i + 1 < fds.size(); ++i) {
    Connection& c = *connections_[i];
    if (fds[2 + 2 * i].revents) c.broken |= !c.up.Read(now, shaping.latency);
    if (fds[3 + 2 * i].revents) c.broken |= !c.down.Read(now, shaping.latency);
    if (stalled || c.broken) continue;
    c.broken |= !c.up.Write(now, shaping.bytes_per_second);
    c.broken |= !c.down.Write(now, shaping.bytes_per_second);
  }
  std::erase_if(connections_, [](const auto& c) { return c->done(); });
  open_ = static_cast<int>(connections_.size());
}

void FaultProxy::Accept() {
  const int client = accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
  if (client < 0) return;
  ++accepted_;
  const int upstream = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr = Address(target_host_, target_port_);
  if (connect(upstream, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    CloseWithReset(client);  // the target is down: the client sees its connection reset
    close(upstream);
    return;
  }
  SetNonBlocking(client);
  SetNonBlocking(upstream);
  connections_.push_back(std::make_unique<Connection>(client, upstream));
  open_ = static_cast<int>(connections_.size());
}

}  // namespace outboxd::test
