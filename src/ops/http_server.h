// The HTTP server behind /metrics and /healthz: CivetWeb (libcivetweb, the embedded
// server prometheus-cpp's own exposer uses) with a fixed set of GET paths.
//
// A probe must answer while other clients misbehave (issue 13: one client sending a
// byte every 1.5 s held /healthz for 11.5 s under the hand-written server this
// replaces), so: a pool of worker threads serves connections at once, every request
// has a deadline from its first byte to its last, keep-alive is off, and nothing but
// GET and HEAD is served (405 with an Allow header otherwise; 404 for other paths).
// IPv6 addresses work where the library has IPv6 (Debian bookworm's has not: Start()
// then says so in one line).
//
//   HttpServer server;
//   server.Handle("/healthz", [] { return HttpResponse{200, "text/plain", "ok\n"}; });
//   OUTBOXD_RETURN_IF_ERROR(server.Start("127.0.0.1:9187"));  // or "[::1]:9187"
#ifndef OUTBOXD_OPS_HTTP_SERVER_H_
#define OUTBOXD_OPS_HTTP_SERVER_H_

#include <functional>
#include <map>
#include <mutex>
#include <string>

#include "absl/status/status.h"

struct mg_connection;
struct mg_context;

namespace outboxd::ops {

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

class HttpServer {
 public:
  using Handler = std::function<HttpResponse()>;
  HttpServer() = default;
  ~HttpServer();  // stops the server
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Register before Start(). Handlers run on the worker threads, several at once.
  void Handle(std::string path, Handler handler);
  // Listens on HOST:PORT and serves on CivetWeb's threads. HOST: an IPv4 address, an
  // IPv6 address in brackets ("[::1]:9187", see above), "localhost", or empty for
  // every IPv4 interface; PORT 0 picks a free port (see port()). Logs the address.
  absl::Status Start(const std::string& address);
  int port() const { return port_; }
  // Closes the listener and waits for the threads: up to about 2 s, the length of
  // CivetWeb's polls between two checks for a stop.
  void Stop();

 private:
  // CivetWeb's callbacks (user data: this server).
  static int OnRequest(mg_connection* conn);
  static int OnLog(const mg_connection* conn, const char* message);

  std::map<std::string, Handler, std::less<>> handlers_;
  mg_context* context_ = nullptr;
  int port_ = 0;
  std::mutex log_mutex_;
  std::string last_error_;  // CivetWeb's last message: Start()'s error names the cause
};

}  // namespace outboxd::ops

#endif  // OUTBOXD_OPS_HTTP_SERVER_H_
