#include "ops/http_server.h"

#include <arpa/inet.h>
#include <civetweb.h>
#include <netinet/in.h>

#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/log.h"

namespace outboxd::ops {
namespace {

// Worker threads, one per open connection: CivetWeb hands a connection to a worker
// for its whole life, so a connection beyond this many waits for a free worker, up to
// kRequestTimeoutMs per wave of held connections. 256 keeps a probe answering at once
// with the 200 idle connections plus a slow client of the issue-13 test
// (tests/ops/http_server_test.cc); idle workers wait on a condition variable.
constexpr int kWorkers = 256;
// The deadline of a whole request, from its first byte to the response's last (it
// bounds reads and writes alike). A scrape or probe on loopback or a LAN takes
// milliseconds; 2 s cuts a slow-loris client off in time for the next probe to find
// its worker free, and is still under the Docker HEALTHCHECK's 3 s.
constexpr int kRequestTimeoutMs = 2000;
// Scrapers and probes send a request line and a few headers (Prometheus ~250 bytes).
constexpr int kMaxRequestBytes = 8192;

// HOST:PORT as CivetWeb's `listening_ports` value, or an error naming --metrics.
// Only literal addresses (plus "localhost" and an empty host) are taken: CivetWeb
// would resolve other names, and a name resolving elsewhere than the operator meant
// would expose the endpoints.
absl::StatusOr<std::string> ListeningPorts(const std::string& address) {
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
  std::string host = address.substr(0, colon);
  std::string port_text = std::to_string(port);
  if (host.empty() || host == "0.0.0.0") return absl::StrCat("0.0.0.0:", port_text);
  if (host == "localhost") return absl::StrCat("127.0.0.1:", port_text);
  in_addr v4;
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return absl::StrCat(host, ":", port_text);
  in6_addr v6;
  if (host.size() > 2 && host.front() == '[' && host.back() == ']' &&
      inet_pton(AF_INET6, host.substr(1, host.size() - 2).c_str(), &v6) == 1) {
    // Debian bookworm's libcivetweb1 (1.15) is built without USE_IPV6.
    if (mg_check_feature(MG_FEATURES_IPV6) == 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("--metrics \"", address,
                       "\": the CivetWeb library outboxd uses was built without IPv6; give an IPv4 "
                       "address, e.g. 127.0.0.1:9187"));
    }
    return absl::StrCat(host, ":", port_text);
  }
  if (host.find(':') != std::string::npos) {
    return invalid("an IPv6 host goes in brackets");
  }
  return invalid("HOST must be an IPv4 address, an IPv6 address in brackets, or localhost");
}

// CivetWeb's bind failure reads "cannot bind to ADDR: 98 (Address already in use)":
// the part in parentheses is the cause; any other message is kept whole.
std::string BindCause(const std::string& message) {
  size_t open = message.rfind('(');
  if (absl::StartsWith(message, "cannot bind") && open != std::string::npos &&
      absl::EndsWith(message, ")")) {
    return message.substr(open + 1, message.size() - open - 2);
  }
  return message.empty() ? "unknown error" : message;
}

// Sends the status line, the headers and (except for HEAD) the body; returns the
// status for CivetWeb's bookkeeping.
int Reply(mg_connection* conn, bool head, const HttpResponse& response,
          const char* allow = nullptr) {
  mg_response_header_start(conn, response.status);
  mg_response_header_add(conn, "Content-Type", response.content_type.c_str(), -1);
  std::string length = std::to_string(response.body.size());
  mg_response_header_add(conn, "Content-Length", length.c_str(), -1);
  if (allow != nullptr) mg_response_header_add(conn, "Allow", allow, -1);
  mg_response_header_send(conn);
  if (!head) mg_write(conn, response.body.data(), response.body.size());
  return response.status;
}

void InitCivetWeb() {
  // Once per process, before any server (CivetWeb: "not guaranteed to be thread
  // safe"; a function-local static is). Features 0: no TLS, nothing to set up.
  static const unsigned initialized = mg_init_library(0);
  (void)initialized;
}

}  // namespace

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Handle(std::string path, Handler handler) {
  handlers_[std::move(path)] = std::move(handler);
}

absl::Status HttpServer::Start(const std::string& address) {
  absl::StatusOr<std::string> ports = ListeningPorts(address);
  if (!ports.ok()) return ports.status();
  InitCivetWeb();
  const std::string workers = std::to_string(kWorkers);
  const std::string timeout = std::to_string(kRequestTimeoutMs);
  const std::string max_request = std::to_string(kMaxRequestBytes);
  const char* options[] = {"listening_ports",
                           ports->c_str(),
                           "num_threads",
                           workers.c_str(),
                           "request_timeout_ms",
                           timeout.c_str(),
                           "max_request_size",
                           max_request.c_str(),
                           "enable_keep_alive",
                           "no",
                           "tcp_nodelay",
                           "1",
                           nullptr};
  mg_callbacks callbacks{};
  callbacks.begin_request = &HttpServer::OnRequest;
  callbacks.log_message = &HttpServer::OnLog;
  mg_init_data init{.callbacks = &callbacks, .user_data = this, .configuration_options = options};
  char error_text[256] = "";
  mg_error_data error{.code = nullptr, .text = error_text, .text_buffer_size = sizeof(error_text)};
  context_ = mg_start2(&init, &error);
  if (context_ == nullptr) {
    std::lock_guard<std::mutex> lock(log_mutex_);
    return absl::FailedPreconditionError(
        absl::StrCat("cannot listen on ", address,
                     " for metrics: ", BindCause(last_error_.empty() ? error_text : last_error_),
                     "; pick another address with --metrics or OUTBOXD_METRICS"));
  }
  mg_server_port bound[1]{};
  if (mg_get_server_ports(context_, 1, bound) == 1) port_ = bound[0].port;
  std::string host = address.substr(0, address.rfind(':'));
  // Tests and scripts find a port-0 server's port in this line.
  spdlog::info("metrics on http://{}:{}/metrics, health on /healthz", host, port_);
  return absl::OkStatus();
}

void HttpServer::Stop() {
  if (context_ != nullptr) mg_stop(context_);
  context_ = nullptr;
}

int HttpServer::OnRequest(mg_connection* conn) {
  const mg_request_info* request = mg_get_request_info(conn);
  const auto* self = static_cast<const HttpServer*>(request->user_data);
  const std::string_view method = request->request_method;
  const bool head = method == "HEAD";
  // local_uri: the path without the query string, dot segments resolved; null when the
  // request names another host.
  auto handler = request->local_uri == nullptr ? self->handlers_.end()
                                               : self->handlers_.find(request->local_uri);
  if (handler == self->handlers_.end()) {
    return Reply(conn, head, {404, "text/plain; charset=utf-8", "not found\n"});
  }
  if (method != "GET" && !head) {
    return Reply(conn, false, {405, "text/plain; charset=utf-8", "only GET and HEAD\n"},
                 "GET, HEAD");
  }
  return Reply(conn, head, handler->second());
}

int HttpServer::OnLog(const mg_connection* conn, const char* message) {
  auto* self = static_cast<HttpServer*>(mg_get_user_data(mg_get_context(conn)));
  // While starting, the message is Start()'s error; later ones are about a client's
  // bad request, which is not the operator's problem.
  spdlog::debug("metrics server: {}", message);
  if (self != nullptr) {
    std::lock_guard<std::mutex> lock(self->log_mutex_);
    if (self->last_error_.empty()) self->last_error_ = message;
  }
  return 1;  // handled: CivetWeb writes no log of its own
}

}  // namespace outboxd::ops
