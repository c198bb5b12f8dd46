// A tiny HTTP/1.0 server for /metrics and /healthz on its own thread. GET only, one
// request per connection, no keep-alive: scrapers and probes need nothing more.
//
//   HttpServer server;
//   server.Handle("/healthz", [] { return HttpResponse{200, "text/plain", "ok\n"}; });
//   OUTBOXD_RETURN_IF_ERROR(server.Start("127.0.0.1:9187"));
#ifndef OUTBOXD_OPS_HTTP_SERVER_H_
#define OUTBOXD_OPS_HTTP_SERVER_H_

#include <atomic>
#include <functional>
#include <map>
#include <string>
#include <thread>

#include "absl/status/status.h"

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
  ~HttpServer();  // stops the thread
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Register before Start(). Handlers run on the server thread.
  void Handle(std::string path, Handler handler);
  // Binds HOST:PORT (port 0: any free port), logs the address it serves, and serves
  // on a new thread.
  absl::Status Start(const std::string& address);
  int port() const { return port_; }
  void Stop();

 private:
  void Serve();
  void Answer(int client);

  std::map<std::string, Handler> handlers_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace outboxd::ops

#endif  // OUTBOXD_OPS_HTTP_SERVER_H_
