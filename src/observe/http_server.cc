#include "observe/http_server.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <optional>
#include <string_view>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/log.h"

namespace outboxd::observe {
namespace {

using Clock = std::chrono::steady_clock;

// Connections open at once. Each costs a descriptor and libmicrohttpd's memory pool
// (32 KiB, touched only as far as used), no thread. At the limit libmicrohttpd stops
// accepting until one closes: newcomers wait in the kernel's backlog, and the deadline
// below frees a place within 2 s. 500 is two and a half times the issue-13 test's
// crowd (tests/observe/http_server_test.cc) and half the usual soft limit of 1024
// descriptors, so a crowd on the metrics port cannot take the descriptors the relay
// needs to reconnect to PostgreSQL or a broker.
constexpr unsigned kMaxConnections = 500;
// Connections open at once from one client address. Without it one client took the
// whole budget above: 1,500 slow connections from one address made 4 of 5 /readyz
// probes from elsewhere time out at 3 s (issue 27). A scrape or probe holds one
// connection for milliseconds, so 64 leaves a Prometheus, the kubelet's probes and a
// person with curl far from the limit, even behind one NAT or docker-proxy address, and
// it takes eight addresses to fill the budget. libmicrohttpd closes a connection over
// the limit as soon as it accepts it.
constexpr unsigned kMaxConnectionsPerAddress = 64;
// The deadline of a whole connection, from its accept to the response's last byte
// (keep-alive is off, so a connection is one request). A scrape or probe on loopback or
// a LAN takes milliseconds; 2 s cuts a slow-loris client off in time for the next
// probe and is still under the Docker HEALTHCHECK's 3 s.
constexpr std::chrono::milliseconds kRequestDeadline{2000};
// libmicrohttpd's own timeout, in whole seconds without a byte either way: it ends
// idle connections on the poll thread; the deadline above ends the ones that trickle.
constexpr unsigned kInactivityTimeoutSeconds = 2;
// How late the reaper may cut a connection off: it sweeps at most this often, so a
// crowd whose deadlines fall one after another costs ten wake-ups a second, not one
// per connection.
constexpr std::chrono::milliseconds kSweepSlack{100};

// A parsed --metrics address, as libmicrohttpd's MHD_OPTION_SOCK_ADDR takes it.
struct ListenAddress {
  sockaddr_storage storage{};
  bool ipv6 = false;
  uint16_t port = 0;
  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&storage); }
};

// `host`, a literal address of `family` in inet_pton's form (no name lookup), with
// `port`; nullopt when it is not one. One builder for both families: they differ only
// in which sockaddr type holds the address.
std::optional<ListenAddress> Literal(int family, const std::string& host, uint16_t port) {
  ListenAddress out;
  out.ipv6 = family == AF_INET6;
  out.port = port;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&out.storage);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&out.storage);
  void* addr = out.ipv6 ? static_cast<void*>(&v6->sin6_addr) : &v4->sin_addr;
  if (inet_pton(family, host.c_str(), addr) != 1) return std::nullopt;
  out.storage.ss_family = static_cast<sa_family_t>(family);
  (out.ipv6 ? v6->sin6_port : v4->sin_port) = htons(port);
  return out;
}

// HOST:PORT as a socket address, or an error naming --metrics. Only literal addresses
// (plus "localhost" and an empty host) are taken: a name resolving elsewhere than the
// operator meant would expose the endpoints.
absl::StatusOr<ListenAddress> ParseAddress(const std::string& address) {
  auto invalid = [&address](const char* why) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics \"", address, "\": ", why, ", e.g. 127.0.0.1:9187 or [::1]:9187"));
  };
  size_t colon = address.rfind(':');
  int port = 0;
  if (colon == std::string::npos || colon + 1 == address.size() ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return invalid("expected HOST:PORT");
  }
  const auto port16 = static_cast<uint16_t>(port);
  std::string host = address.substr(0, colon);
  if (host.empty()) host = "0.0.0.0";
  if (host == "localhost") host = "127.0.0.1";
  if (std::optional<ListenAddress> v4 = Literal(AF_INET, host, port16)) return *v4;
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    if (std::optional<ListenAddress> v6 =
            Literal(AF_INET6, host.substr(1, host.size() - 2), port16))
      return *v6;
  }
  if (host.find(':') != std::string::npos) {
    return invalid("an IPv6 host goes in brackets");
  }
  return invalid("HOST must be an IPv4 address, an IPv6 address in brackets, or localhost");
}

// libmicrohttpd's failures read "Failed to bind to port 9187: Address already in use":
// the part after the last ": " is the cause; any other message is kept whole.
std::string Cause(const std::string& message) {
  size_t colon = message.rfind(": ");
  if (colon != std::string::npos && colon + 2 < message.size()) return message.substr(colon + 2);
  return message.empty() ? "unknown error" : message;
}

// epoll where the library has it (Debian's has), poll otherwise: both watch any
// number of descriptors, unlike select's 1024.
unsigned PollingFlag() {
  return MHD_is_feature_supported(MHD_FEATURE_EPOLL) == MHD_YES ? MHD_USE_EPOLL : MHD_USE_POLL;
}

}  // namespace

// Ends every connection older than kRequestDeadline. libmicrohttpd's own timeout
// counts inactivity only, so a client sending a byte a second would never meet it, and
// the library has no deadline per request. The reaper learns each connection's socket
// when libmicrohttpd announces it (MHD_CONNECTION_NOTIFY_STARTED) and, past the
// deadline, shuts the socket down: libmicrohttpd's next read sees the end of the
// stream and closes the connection as it closes any client that left. The socket
// cannot be a reused descriptor by then: libmicrohttpd announces the close
// (MHD_CONNECTION_NOTIFY_CLOSED, Closed()) before it closes the socket, and Closed()
// waits for the mutex a shutdown is made under.
class HttpServer::DeadlineReaper {
 public:
  DeadlineReaper() : thread_([this] { Run(); }) {}
  ~DeadlineReaper() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_one();
    thread_.join();
  }
  DeadlineReaper(const DeadlineReaper&) = delete;
  DeadlineReaper& operator=(const DeadlineReaper&) = delete;

  void Started(const MHD_Connection* connection, int fd) {
    bool was_idle = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      was_idle = open_.empty();
      open_[connection] = Open{fd, Clock::now() + kRequestDeadline};
    }
    if (was_idle) wake_.notify_one();
  }
  void Closed(const MHD_Connection* connection) {
    std::lock_guard<std::mutex> lock(mutex_);
    open_.erase(connection);
  }

 private:
  struct Open {
    int fd = -1;
    Clock::time_point deadline;
    bool cut = false;  // shut down, waiting for libmicrohttpd to notice
  };

  void Run() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stop_) {
      const Clock::time_point now = Clock::now();
      Clock::time_point next = Clock::time_point::max();
      for (auto& [connection, open] : open_) {
        if (open.cut) continue;
        if (open.deadline <= now) {
          shutdown(open.fd, SHUT_RDWR);
          open.cut = true;
        } else {
          next = std::min(next, open.deadline);
        }
      }
      if (next == Clock::time_point::max()) {
        wake_.wait(lock);  // until a connection opens, or Stop()
      } else {
        wake_.wait_until(lock, std::max(next, now + kSweepSlack));
      }
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  absl::flat_hash_map<const MHD_Connection*, Open> open_;
  bool stop_ = false;
  std::thread thread_;  // last: starts once the members it uses exist
};

struct HttpServer::Callbacks {
  // Sends `response`; libmicrohttpd leaves the body out for HEAD by itself.
  static MHD_Result Reply(MHD_Connection* connection, const HttpResponse& response,
                          const char* allow = nullptr) {
    MHD_Response* reply = MHD_create_response_from_buffer(
        response.body.size(), const_cast<char*>(response.body.data()), MHD_RESPMEM_MUST_COPY);
    if (reply == nullptr) return MHD_NO;  // out of memory: libmicrohttpd closes the connection
    MHD_add_response_header(reply, MHD_HTTP_HEADER_CONTENT_TYPE, response.content_type.c_str());
    // One request per connection, so the deadline above is the request's.
    MHD_add_response_header(reply, MHD_HTTP_HEADER_CONNECTION, "close");
    if (allow != nullptr) MHD_add_response_header(reply, MHD_HTTP_HEADER_ALLOW, allow);
    MHD_Result queued =
        MHD_queue_response(connection, static_cast<unsigned>(response.status), reply);
    MHD_destroy_response(reply);  // libmicrohttpd keeps its own reference until sent
    return queued;
  }

  // Called once the request line and headers are in: `url` is the path without the
  // query string.
  static MHD_Result OnRequest(void* cls, MHD_Connection* connection, const char* url,
                              const char* method, const char* /*version*/,
                              const char* /*upload_data*/, size_t* /*upload_data_size*/,
                              void** /*request_context*/) {
    const auto* self = static_cast<const HttpServer*>(cls);
    const std::string_view verb = method;
    auto handler = self->handlers_.find(std::string_view(url));
    if (handler == self->handlers_.end()) {
      return Reply(connection, {404, "text/plain; charset=utf-8", "not found\n"});
    }
    if (verb != MHD_HTTP_METHOD_GET && verb != MHD_HTTP_METHOD_HEAD) {
      return Reply(connection, {405, "text/plain; charset=utf-8", "only GET and HEAD\n"},
                   "GET, HEAD");
    }
    return Reply(connection, handler->second());
  }

  static void OnConnection(void* cls, MHD_Connection* connection, void** /*socket_context*/,
                           MHD_ConnectionNotificationCode code) {
    auto* reaper = static_cast<DeadlineReaper*>(cls);
    if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
      reaper->Closed(connection);
      return;
    }
    const MHD_ConnectionInfo* info =
        MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (info != nullptr) reaper->Started(connection, info->connect_fd);
  }

  static void OnLog(void* cls, const char* format, va_list args) {
    char text[512];
    vsnprintf(text, sizeof(text), format, args);
    const std::string message(absl::StripTrailingAsciiWhitespace(text));
    // The last message before a failed start is Start()'s error; later ones are about
    // a client's bad request or the connection limit, not the operator's problem.
    spdlog::debug("metrics server: {}", message);
    auto* self = static_cast<HttpServer*>(cls);
    std::lock_guard<std::mutex> lock(self->log_mutex_);
    self->last_message_ = message;
  }
};

HttpServer::HttpServer() = default;

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Handle(std::string path, Handler handler) {
  handlers_[std::move(path)] = std::move(handler);
}

absl::Status HttpServer::Start(const std::string& address) {
  absl::StatusOr<ListenAddress> listen = ParseAddress(address);
  if (!listen.ok()) return listen.status();
  reaper_ = std::make_unique<DeadlineReaper>();
  const unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | PollingFlag() | MHD_USE_ERROR_LOG |
                         (listen->ipv6 ? MHD_USE_IPv6 : 0);
  daemon_ = MHD_start_daemon(
      flags, listen->port, nullptr, nullptr, &Callbacks::OnRequest, this,  //
      // First, or libmicrohttpd warns on stderr that it might have missed messages.
      MHD_OPTION_EXTERNAL_LOGGER, &Callbacks::OnLog, this,                    //
      MHD_OPTION_SOCK_ADDR, listen->get(),                                    //
      MHD_OPTION_CONNECTION_LIMIT, kMaxConnections,                           //
      MHD_OPTION_PER_IP_CONNECTION_LIMIT, kMaxConnectionsPerAddress,          //
      MHD_OPTION_CONNECTION_TIMEOUT, kInactivityTimeoutSeconds,               //
      MHD_OPTION_NOTIFY_CONNECTION, &Callbacks::OnConnection, reaper_.get(),  //
      MHD_OPTION_END);
  if (daemon_ == nullptr) {
    reaper_.reset();
    std::lock_guard<std::mutex> lock(log_mutex_);
    return absl::FailedPreconditionError(
        absl::StrCat("cannot listen on ", address, " for metrics: ", Cause(last_message_),
                     "; pick another address with --metrics or OUTBOXD_METRICS"));
  }
  const MHD_DaemonInfo* bound = MHD_get_daemon_info(daemon_, MHD_DAEMON_INFO_BIND_PORT);
  port_ = bound != nullptr ? bound->port : listen->port;
  std::string host = address.substr(0, address.rfind(':'));
  // Tests and scripts find a port-0 server's port in this line.
  spdlog::info("metrics on http://{}:{}/metrics, health on /healthz", host, port_);
  return absl::OkStatus();
}

void HttpServer::Stop() {
  // The daemon first: closing its connections calls the reaper's Closed().
  if (daemon_ != nullptr) MHD_stop_daemon(daemon_);
  daemon_ = nullptr;
  reaper_.reset();
}

}  // namespace outboxd::observe
