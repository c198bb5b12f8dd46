#include "support/http_client.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "support/wait_until.h"

namespace outboxd::test {
namespace {

int MillisUntil(absl::Time deadline) {
  return static_cast<int>(std::max<int64_t>(0, absl::ToInt64Milliseconds(deadline - absl::Now())));
}

// Waits for `events` on `fd` until `deadline`; false on timeout.
bool WaitFor(int fd, short events, absl::Time deadline) {
  pollfd p{.fd = fd, .events = events};
  while (true) {
    int n = poll(&p, 1, MillisUntil(deadline));
    if (n > 0) return true;
    if (n == 0 || errno != EINTR) return false;
  }
}

// ip:port as a sockaddr for either family.
bool MakeAddress(const std::string& ip, int port, sockaddr_storage* out, socklen_t* len) {
  *out = {};
  auto* v4 = reinterpret_cast<sockaddr_in*>(out);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(out);
  if (inet_pton(AF_INET, ip.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port));
    *len = sizeof(*v4);
    return true;
  }
  if (inet_pton(AF_INET6, ip.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(port));
    *len = sizeof(*v6);
    return true;
  }
  return false;
}

}  // namespace

RawClient RawClient::Connect(const std::string& ip, int port, absl::Time deadline,
                             const std::string& from) {
  sockaddr_storage addr;
  socklen_t len = 0;
  if (!MakeAddress(ip, port, &addr, &len)) return RawClient(-1);
  RawClient client(socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!client.connected()) return client;
  int fd = client.fd_;
  if (!from.empty()) {
    sockaddr_storage local;
    socklen_t local_len = 0;
    if (!MakeAddress(from, 0, &local, &local_len) ||
        bind(fd, reinterpret_cast<sockaddr*>(&local), local_len) != 0) {
      return RawClient(-1);
    }
  }
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    int error = 0;
    socklen_t error_len = sizeof(error);
    if (errno != EINPROGRESS || !WaitFor(fd, POLLOUT, deadline) ||
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &error_len) != 0 || error != 0) {
      return RawClient(-1);  // `client` closes the socket
    }
  }
  return client;
}

RawClient& RawClient::operator=(RawClient&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

RawClient::~RawClient() {
  if (fd_ >= 0) close(fd_);
}

bool RawClient::Send(std::string_view data) {
  while (!data.empty()) {
    if (!WaitFor(fd_, POLLOUT, absl::Now() + absl::Seconds(5))) return false;
    ssize_t n = send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

std::string RawClient::ReadUntilClosed(absl::Time deadline, bool* closed) {
  std::string out;
  *closed = false;
  char buf[4096];
  while (WaitFor(fd_, POLLIN, deadline)) {
    ssize_t n = recv(fd_, buf, sizeof(buf), 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n <= 0) {  // orderly close, or a reset: either way the server is done with us
      *closed = true;
      break;
    }
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

std::string HttpReply::Header(std::string_view name) const {
  for (absl::string_view line : absl::StrSplit(head, "\r\n")) {
    size_t colon = line.find(':');
    if (colon != absl::string_view::npos &&
        absl::EqualsIgnoreCase(line.substr(0, colon),
                               absl::string_view(name.data(), name.size()))) {
      return std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
    }
  }
  return "";
}

namespace {

HttpReply ExchangeOver(const std::string& from, const std::string& ip, int port,
                       const std::string& request_line, absl::Duration timeout,
                       const std::string& extra_headers) {
  absl::Time deadline = absl::Now() + timeout;
  HttpReply reply;
  RawClient client = RawClient::Connect(ip, port, deadline, from);
  if (!client.connected()) return reply;
  if (!client.Send(absl::StrCat(request_line, " HTTP/1.1\r\nHost: test\r\n", extra_headers,
                                "Connection: close\r\n\r\n"))) {
    return reply;
  }
  bool closed = false;
  std::string raw = client.ReadUntilClosed(deadline, &closed);
  size_t end = raw.find("\r\n\r\n");
  if (!closed || end == std::string::npos || !absl::StartsWith(raw, "HTTP/1.")) return reply;
  reply.head = raw.substr(0, end);
  reply.body = raw.substr(end + 4);
  size_t space = reply.head.find(' ');
  reply.status = space == std::string::npos ? -1 : std::atoi(reply.head.c_str() + space + 1);
  return reply;
}

}  // namespace

HttpReply Exchange(const std::string& ip, int port, const std::string& request_line,
                   absl::Duration timeout, const std::string& extra_headers) {
  return ExchangeOver("", ip, port, request_line, timeout, extra_headers);
}

HttpReply ExchangeFrom(const std::string& from, const std::string& ip, int port,
                       const std::string& request_line, absl::Duration timeout) {
  return ExchangeOver(from, ip, port, request_line, timeout, "");
}

SlowLoris::SlowLoris(const std::string& ip, int port, absl::Duration interval)
    : thread_([this, ip, port, interval] { Run(ip, port, interval); }) {}

SlowLoris::~SlowLoris() {
  stop_ = true;
  thread_.join();
}

void SlowLoris::Run(std::string ip, int port, absl::Duration interval) {
  // A query string of 'z's: a request line that never ends, so no server answers it
  // before its deadline or its size limit (8 KiB: over two hours at a byte a second).
  const std::string start = "GET /healthz?slow=";
  while (!stop_) {
    RawClient client = RawClient::Connect(ip, port, absl::Now() + interval);
    for (size_t i = 0; !stop_; ++i) {
      char byte = i < start.size() ? start[i] : 'z';
      bool closed = !client.connected() || !client.Send(std::string_view(&byte, 1));
      if (!closed) {
        ++sent_;
        // Until the next byte is due, watch for the server closing the connection.
        client.ReadUntilClosed(absl::Now() + interval, &closed);
      }
      if (closed) {
        ++cut_offs_;
        if (!client.connected()) absl::SleepFor(interval);  // not listening: try later
        break;
      }
    }
  }
}

IdleCrowd::IdleCrowd(const std::string& ip, int port, int n, std::vector<std::string> from)
    : target_(n),
      thread_([this, ip, port, n, from = std::move(from)] { Run(ip, port, n, from); }) {}

IdleCrowd::~IdleCrowd() {
  stop_ = true;
  thread_.join();
}

bool IdleCrowd::WaitUntilAllOpen(absl::Duration timeout) const {
  return WaitUntil(
      timeout, [&] { return open_ >= target_; }, absl::Milliseconds(10));
}

void IdleCrowd::Run(std::string ip, int port, int n, std::vector<std::string> from) {
  std::vector<RawClient> clients(n);
  const std::string kernels_choice;
  auto local = [&](size_t i) -> const std::string& {
    return from.empty() ? kernels_choice : from[i % from.size()];
  };
  while (!stop_) {
    std::vector<pollfd> fds;
    std::vector<size_t> which;
    for (size_t i = 0; i < clients.size() && !stop_; ++i) {
      if (!clients[i].connected()) {
        clients[i] = RawClient::Connect(ip, port, absl::Now() + absl::Seconds(1), local(i));
      }
      if (clients[i].connected()) {
        fds.push_back({.fd = clients[i].fd(), .events = POLLIN});
        which.push_back(i);
      }
      open_ = std::max(open_.load(), static_cast<int>(fds.size()));
    }
    open_ = static_cast<int>(fds.size());
    if (poll(fds.data(), fds.size(), 50) <= 0) continue;
    for (size_t k = 0; k < fds.size(); ++k) {
      if (fds[k].revents == 0) continue;
      bool closed = false;
      clients[which[k]].ReadUntilClosed(absl::Now(), &closed);  // a 408 or so, then EOF
      if (closed) clients[which[k]] = RawClient();
    }
  }
}

}  // namespace outboxd::test
