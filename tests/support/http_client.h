// Raw TCP clients for the HTTP server tests: curl cannot hold a connection idle or
// send a request one byte at a time, which is what the slow-client tests need.
//
//   IdleCrowd crowd("127.0.0.1", port, 200);
//   SlowLoris loris("127.0.0.1", port, absl::Seconds(1));
//   ASSERT_TRUE(crowd.WaitUntilAllOpen(absl::Seconds(10)));
//   HttpReply reply = Exchange("127.0.0.1", port, "HEAD /healthz", absl::Seconds(1));
//   EXPECT_EQ(reply.status, 200);
#ifndef OUTBOXD_TESTS_SUPPORT_HTTP_CLIENT_H_
#define OUTBOXD_TESTS_SUPPORT_HTTP_CLIENT_H_

#include <atomic>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/time/time.h"

namespace outboxd::test {

class RawClient {
 public:
  // A non-blocking connect that waits for the handshake until `deadline`; check
  // connected(). The deadline matters against a server whose accept queue is full:
  // there a blocking connect() would hang in SYN retries for minutes. `from`: the
  // local address to connect from (e.g. "127.0.0.2", any of 127/8 on Linux), so one
  // test can play clients at several addresses; empty: the kernel's choice.
  static RawClient Connect(const std::string& ip, int port, absl::Time deadline,
                           const std::string& from = "");
  RawClient() = default;  // not connected
  RawClient(RawClient&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  RawClient& operator=(RawClient&& other) noexcept;
  ~RawClient();

  bool connected() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  bool Send(std::string_view data);
  // Everything the server sends until it closes the connection or `deadline`;
  // `closed` says which.
  std::string ReadUntilClosed(absl::Time deadline, bool* closed);

 private:
  explicit RawClient(int fd) : fd_(fd) {}
  int fd_ = -1;
};

struct HttpReply {
  int status = -1;   // -1: no complete status line before the deadline
  std::string head;  // status line and headers
  std::string body;
  // The value of header `name` (case-insensitive), or "" when absent.
  std::string Header(std::string_view name) const;
};

// Sends "<request_line> HTTP/1.1" with Host and Connection: close headers (plus
// `extra_headers`, each ending in \r\n) and reads the reply, all within `timeout`.
HttpReply Exchange(const std::string& ip, int port, const std::string& request_line,
                   absl::Duration timeout, const std::string& extra_headers = "");
// The same, connecting from the local address `from` (see RawClient::Connect).
HttpReply ExchangeFrom(const std::string& from, const std::string& ip, int port,
                       const std::string& request_line, absl::Duration timeout);

// A slow-loris client: starts a request line and sends one more byte of it every
// `interval`, never the line's end, so only a deadline on the whole request can end
// it. When the server closes the connection it counts a cut-off and starts over, as
// an attacker would, until destroyed.
class SlowLoris {
 public:
  SlowLoris(const std::string& ip, int port, absl::Duration interval);
  ~SlowLoris();
  SlowLoris(const SlowLoris&) = delete;
  SlowLoris& operator=(const SlowLoris&) = delete;

  // Times the server closed the connection (or a send or reconnect failed).
  int cut_offs() const { return cut_offs_; }
  // Bytes sent so far, over every connection.
  int sent() const { return sent_; }

 private:
  void Run(std::string ip, int port, absl::Duration interval);

  std::atomic<bool> stop_{false};
  std::atomic<int> cut_offs_{0};
  std::atomic<int> sent_{0};
  std::thread thread_;
};

// `n` connections that send nothing. Whenever the server closes one, it is opened
// again at once, so the server keeps facing `n` idle clients, whatever its deadline.
// `from`: local addresses the connections are spread over, in turn (empty: the
// kernel's choice), e.g. {"127.0.0.2"} for a flood from one client.
class IdleCrowd {
 public:
  IdleCrowd(const std::string& ip, int port, int n, std::vector<std::string> from = {});
  ~IdleCrowd();
  IdleCrowd(const IdleCrowd&) = delete;
  IdleCrowd& operator=(const IdleCrowd&) = delete;

  // Waits until all `n` are connected at once; false if `timeout` passes first.
  bool WaitUntilAllOpen(absl::Duration timeout) const;
  int open() const { return open_; }

 private:
  void Run(std::string ip, int port, int n, std::vector<std::string> from);

  const int target_;
  std::atomic<bool> stop_{false};
  std::atomic<int> open_{0};
  std::thread thread_;
};

}  // namespace outboxd::test

#endif  // OUTBOXD_TESTS_SUPPORT_HTTP_CLIENT_H_
