// The HTTP server behind /metrics and /healthz: GNU libmicrohttpd (libmicrohttpd12)
// with a fixed set of GET paths.
//
// A probe must answer while other clients misbehave (issue 13: one client sending a
// byte every 1.5 s held /healthz for 11.5 s under the hand-written server this
// replaces), so: one thread polls every connection with epoll and serves whichever is
// ready (an idle or slow client costs a file descriptor and a small buffer, never a
// thread, and blocks nobody), every connection has a deadline from its accept to its
// last byte, one client address holds at most 64 of the 500 connections (so a flood
// from one client leaves room for the probes), keep-alive is off, and nothing but GET
// and HEAD is served (405 with an Allow header otherwise; 404 for other paths). IPv4
// and IPv6 addresses alike.
//
//   HttpServer server;
//   server.Handle("/healthz", [] { return HttpResponse{200, "text/plain", "ok\n"}; });
//   OUTBOXD_RETURN_IF_ERROR(server.Start("127.0.0.1:9187"));  // or "[::1]:9187"
#ifndef OUTBOXD_OBSERVE_HTTP_SERVER_H_
#define OUTBOXD_OBSERVE_HTTP_SERVER_H_

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/status.h"

struct MHD_Daemon;

namespace outboxd::observe {

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

class HttpServer {
 public:
  using Handler = std::function<HttpResponse()>;
  HttpServer();
  ~HttpServer();  // stops the server
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Register before Start(). Handlers run on the server's one thread, one at a time:
  // keep them quick (a /metrics render takes about a millisecond).
  void Handle(std::string path, Handler handler);
  // Listens on HOST:PORT and serves on libmicrohttpd's thread. HOST: an IPv4 address,
  // an IPv6 address in brackets ("[::1]:9187"), "localhost", or empty for every IPv4
  // interface; PORT 0 picks a free port (see port()). Logs the address.
  absl::Status Start(const std::string& address);
  int port() const { return port_; }
  // Closes the listener and every connection and joins the server's threads: at once
  // (libmicrohttpd wakes its poll by shutting the listener down).
  void Stop();

 private:
  // libmicrohttpd's callbacks (closure: this server), defined in http_server.cc.
  struct Callbacks;
  // Ends connections older than the request deadline, defined in http_server.cc.
  class DeadlineReaper;

  std::map<std::string, Handler, std::less<>> handlers_;
  std::unique_ptr<DeadlineReaper> reaper_;
  MHD_Daemon* daemon_ = nullptr;
  int port_ = 0;
  std::mutex log_mutex_;
  std::string last_message_;  // libmicrohttpd's: Start()'s error names the cause
};

}  // namespace outboxd::observe

#endif  // OUTBOXD_OBSERVE_HTTP_SERVER_H_
