// FaultProxy in front of an echo server: each fault does what it says, and Heal()
// brings the bytes held meanwhile.
#include "support/fault_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "support/wait_until.h"

namespace outboxd::test {
namespace {

// Echoes every byte back, one thread per connection, until the test ends.
class EchoServer {
 public:
  EchoServer() {
    listener_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t size = sizeof(addr);
    bind(listener_, reinterpret_cast<sockaddr*>(&addr), size);
    listen(listener_, 16);
    getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &size);
    port_ = ntohs(addr.sin_port);
    accepter_ = std::thread([this] {
      int fd;
      while ((fd = accept(listener_, nullptr, nullptr)) >= 0) {
        echoes_.emplace_back([fd] {
          char bytes[4096];
          ssize_t n;
          while ((n = recv(fd, bytes, sizeof(bytes), 0)) > 0) send(fd, bytes, n, MSG_NOSIGNAL);
          close(fd);
        });
      }
    });
  }
  ~EchoServer() {
    shutdown(listener_, SHUT_RDWR);
    accepter_.join();
    close(listener_);
    for (auto& echo : echoes_) echo.join();
  }
  int port() const { return port_; }

 private:
  int listener_;
  int port_ = 0;
  std::thread accepter_;
  std::vector<std::thread> echoes_;
};

// A client socket to the proxy; -1 when refused.
int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// What arrives on `fd` within `timeout` (up to `want` bytes); errno in *error.
std::string Receive(int fd, size_t want, absl::Duration timeout, int* error = nullptr) {
  std::string got;
  const absl::Time deadline = absl::Now() + timeout;
  while (got.size() < want) {
    pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
    const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (ms <= 0 || poll(&p, 1, static_cast<int>(ms)) <= 0) break;
    char bytes[65536];
    const ssize_t n = recv(fd, bytes, std::min(sizeof(bytes), want - got.size()), 0);
    if (n <= 0) {
      if (error) *error = n < 0 ? errno : 0;
      break;
    }
    got.append(bytes, static_cast<size_t>(n));
  }
  return got;
}

struct ProxyTest : ::testing::Test {
  void SetUp() override { ASSERT_TRUE(proxy.Start().ok()); }
  EchoServer echo;
  FaultProxy proxy{"127.0.0.1", echo.port()};
};

TEST_F(ProxyTest, ForwardsBytesBothWays) {
  const int fd = Connect(proxy.port());
  ASSERT_GE(fd, 0);
  ASSERT_EQ(send(fd, "hello", 5, 0), 5);
  EXPECT_EQ(Receive(fd, 5, absl::Seconds(10)), "hello");
  EXPECT_EQ(proxy.connections(), 1);
  close(fd);
  EXPECT_TRUE(WaitUntil(absl::Seconds(10), [&] { return proxy.connections() == 0; }));
}

TEST_F(ProxyTest, BlackholeHoldsEveryByteWithTheConnectionOpenUntilHealed) {
  const int fd = Connect(proxy.port());
  ASSERT_GE(fd, 0);
  proxy.Blackhole();
  ASSERT_EQ(send(fd, "held", 4, 0), 4);
  int error = -1;
  EXPECT_EQ(Receive(fd, 4, absl::Milliseconds(300), &error), "");
  EXPECT_EQ(error, -1) << "the connection must stay open, neither closed nor reset";
  EXPECT_EQ(proxy.connections(), 1);
  proxy.Heal();
  EXPECT_EQ(Receive(fd, 4, absl::Seconds(10)), "held");
  close(fd);
}

TEST_F(ProxyTest, ResetAllResetsEveryConnection) {
  const int fd = Connect(proxy.port());
  ASSERT_GE(fd, 0);
  ASSERT_EQ(send(fd, "x", 1, 0), 1);
  ASSERT_EQ(Receive(fd, 1, absl::Seconds(10)), "x");
  proxy.ResetAll();
  int error = 0;
  EXPECT_EQ(Receive(fd, 1, absl::Seconds(10), &error), "");
  EXPECT_EQ(error, ECONNRESET);
  close(fd);
}

TEST_F(ProxyTest, RefuseNewRefusesConnectionsUntilHealed) {
  proxy.RefuseNew();
  EXPECT_EQ(Connect(proxy.port()), -1);
  proxy.Heal();
  int fd = -1;
  ASSERT_TRUE(WaitUntil(
      absl::Seconds(10), [&] { return (fd = Connect(proxy.port())) >= 0; },
      absl::Milliseconds(10)));
  ASSERT_EQ(send(fd, "again", 5, 0), 5);
  EXPECT_EQ(Receive(fd, 5, absl::Seconds(10)), "again");
  close(fd);
}

TEST_F(ProxyTest, LatencyAndStallsDelayEveryByte) {
  const int fd = Connect(proxy.port());
  ASSERT_GE(fd, 0);
  proxy.SetLatency(absl::Milliseconds(200));  // each way: 400 ms for the echo
  absl::Time sent = absl::Now();
  ASSERT_EQ(send(fd, "slow", 4, 0), 4);
  EXPECT_EQ(Receive(fd, 4, absl::Seconds(10)), "slow");
  EXPECT_GE(absl::Now() - sent, absl::Milliseconds(400));
  proxy.Heal();
  proxy.Stall(absl::Milliseconds(500));
  sent = absl::Now();
  ASSERT_EQ(send(fd, "spike", 5, 0), 5);
  EXPECT_EQ(Receive(fd, 5, absl::Seconds(10)), "spike");
  EXPECT_GE(absl::Now() - sent, absl::Milliseconds(500));
  close(fd);
}

TEST_F(ProxyTest, BandwidthCapPacesTheBytes) {
  const int fd = Connect(proxy.port());
  ASSERT_GE(fd, 0);
  proxy.SetBandwidth(64 << 10);
  const std::string payload(64 << 10, 'b');
  const absl::Time sent = absl::Now();
  std::thread writer([&] { send(fd, payload.data(), payload.size(), MSG_NOSIGNAL); });
  EXPECT_EQ(Receive(fd, payload.size(), absl::Seconds(20)).size(), payload.size());
  writer.join();
  // 64 KiB at 64 KiB/s, less the 100 ms burst the bucket starts with.
  EXPECT_GE(absl::Now() - sent, absl::Milliseconds(800));
  close(fd);
}

}  // namespace
}  // namespace outboxd::test
