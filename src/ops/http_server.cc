#include "ops/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/log.h"

namespace outboxd::ops {
namespace {

const char* Reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 404:
      return "Not Found";
    case 503:
      return "Service Unavailable";
    default:
      return "Error";
  }
}

void WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n <= 0) return;
    data.remove_prefix(static_cast<size_t>(n));
  }
}

}  // namespace

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Handle(std::string path, Handler handler) {
  handlers_[std::move(path)] = std::move(handler);
}

absl::Status HttpServer::Start(const std::string& address) {
  size_t colon = address.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port) ||
      port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics \"", address, "\": expected HOST:PORT, e.g. 127.0.0.1:9187"));
  }
  std::string host = address.substr(0, colon);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (host.empty() || host == "0.0.0.0") {
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
  } else if (host == "localhost") {
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  } else if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics \"", address, "\": host must be an IPv4 address"));
  }
  listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(listen_fd_, 16) != 0) {
    std::string error = std::strerror(errno);
    close(listen_fd_);
    listen_fd_ = -1;
    return absl::FailedPreconditionError(
        absl::StrCat("cannot listen on ", address, " for metrics: ", error,
                     "; pick another address with --metrics or OUTBOXD_METRICS"));
  }
  socklen_t len = sizeof(addr);
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  // Tests and scripts find a port-0 server's port in this line.
  spdlog::info("metrics on http://{}:{}/metrics, health on /healthz", host, port_);
  thread_ = std::thread([this] { Serve(); });
  return absl::OkStatus();
}

void HttpServer::Stop() {
  stopping_ = true;
  if (thread_.joinable()) thread_.join();
  if (listen_fd_ >= 0) close(listen_fd_);
  listen_fd_ = -1;
}

void HttpServer::Serve() {
  while (!stopping_) {
    pollfd p{.fd = listen_fd_, .events = POLLIN};
    if (poll(&p, 1, 200) <= 0) continue;
    int client = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) continue;
    Answer(client);
    close(client);
  }
}

void HttpServer::Answer(int client) {
  timeval tv{.tv_sec = 2, .tv_usec = 0};
  setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  std::string request;
  char buf[2048];
  while (request.find("\r\n") == std::string::npos && request.size() < 8192) {
    ssize_t n = recv(client, buf, sizeof(buf), 0);
    if (n <= 0) return;
    request.append(buf, static_cast<size_t>(n));
  }
  // "GET /path HTTP/1.1"
  size_t sp1 = request.find(' ');
  size_t sp2 = sp1 == std::string::npos ? sp1 : request.find(' ', sp1 + 1);
  std::string path = sp2 == std::string::npos ? "" : request.substr(sp1 + 1, sp2 - sp1 - 1);
  path = path.substr(0, path.find('?'));
  HttpResponse response{404, "text/plain; charset=utf-8", "not found\n"};
  if (auto it = handlers_.find(path); it != handlers_.end()) response = it->second();
  WriteAll(client, absl::StrCat("HTTP/1.0 ", response.status, " ", Reason(response.status),
                                "\r\nContent-Type: ", response.content_type,
                                "\r\nContent-Length: ", response.body.size(),
                                "\r\nConnection: close\r\n\r\n", response.body));
}

}  // namespace outboxd::ops
