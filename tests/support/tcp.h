// Whether something listens on a TCP address: for tests of brokers and servers that
// are started, stopped and set down.
//
//   EXPECT_TRUE(Accepts(cluster->bootstraps()));  // "127.0.0.1:39741"
#ifndef OUTBOXD_TESTS_SUPPORT_TCP_H_
#define OUTBOXD_TESTS_SUPPORT_TCP_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace outboxd::test {

// Whether a TCP connection to HOST:PORT (IPv4) is accepted.
inline bool Accepts(const std::string& host_port) {
  std::vector<std::string> parts = absl::StrSplit(host_port, ':');
  int port = 0;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[1], &port)) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, parts[0].c_str(), &addr.sin_addr);
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return ok;
}

}  // namespace outboxd::test

#endif  // OUTBOXD_TESTS_SUPPORT_TCP_H_
