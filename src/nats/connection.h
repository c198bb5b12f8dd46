// The one way outboxd opens a NATS connection (libnats 3.4): the URL(s), TLS for a
// tls:// URL, the credentials (a .creds file, a user and password, or ones inside
// the URL), the reconnect policy, and a first attempt that fails fast on a refused
// login. The relays' sink (nats/sink.h) and the inbox's JetStream consumer
// (src/inbox/internal/nats_source.cc) both start here; what each then does on the
// connection (asynchronous publish, a pull consumer) is its own.
//
// The header names libnats' handle by its struct tag only, so including it does not
// pull in libnats; a .cc that calls libnats on the handle includes <nats/nats.h> and
// links PkgConfig::NATS itself.
//
//   OUTBOXD_ASSIGN_OR_RETURN(std::unique_ptr<Connection> c,
//                            Connection::Open({.url = "nats://127.0.0.1:4222"}));
//   jsCtx* js = nullptr;
//   natsConnection_JetStream(&js, c->get(), nullptr);
//   spdlog::info("connected to {}", c->where());   // never a password
#ifndef OUTBOXD_NATS_CONNECTION_H_
#define OUTBOXD_NATS_CONNECTION_H_

#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/statusor.h"

// libnats' natsConnection, as nats.h declares it.
typedef struct __natsConnection natsConnection;

namespace outboxd::nats {

// libnats' natsConnectionHandler: called on libnats' own thread.
using ConnectionHandler = void (*)(natsConnection* nc, void* closure);

// What the connection reports while it lives, on libnats' threads. `closure` must
// outlive the connection and any callback libnats may still be running after it is
// destroyed (libnats does not join its callback thread).
struct ConnectionEvents {
  ConnectionHandler disconnected = nullptr;
  // Also called once a first connection made in the background (kRetryInBackground)
  // succeeds.
  ConnectionHandler reconnected = nullptr;
  ConnectionHandler closed = nullptr;  // for good: no more reconnects
  void* closure = nullptr;
};

enum class Unreachable {
  kRetryInBackground,  // Open succeeds disconnected; libnats keeps trying (the sink)
  kFail,               // Open returns Unavailable (the inbox: it must bind its consumer)
};

struct ConnectionOptions {
  // nats://host:port, several comma-separated; user:password@ allowed (never logged).
  // tls://host:port makes TLS required (libnats verifies the server's certificate
  // against the system's CA store, or the file in OpenSSL's SSL_CERT_FILE).
  std::string url;
  std::string creds_file;  // a NATS .creds file (JWT and NKey seed), or empty
  std::string user;        // with password, or empty
  std::string password;
  // Shown by the server's /connz and `nats server report connections`.
  std::string name = "outboxd";
  Unreachable unreachable = Unreachable::kRetryInBackground;
  ConnectionEvents events;
};

// The URL(s) with any user information replaced by "***": what messages may name.
//   RedactedUrl("nats://u:p@h:4222,nats://h2:4222") == "nats://***@h:4222,nats://h2:4222"
std::string RedactedUrl(std::string_view url);

// Destroying it closes the connection (pending writes flushed, subscriptions gone; a
// durable JetStream consumer stays on the server) and frees it.
class Connection {
 public:
  // One attempt that never reconnects first: InvalidArgument (a bad URL or option, a
  // TLS failure), Unauthenticated (credentials refused) end here, naming the redacted
  // URL and the fix. An unreachable server is Unavailable with kFail; with
  // kRetryInBackground the connection starts disconnected and connects when it can.
  // Once made, it reconnects without limit, 100 ms between rounds over the servers.
  static absl::StatusOr<std::unique_ptr<Connection>> Open(const ConnectionOptions& options);
  // libnats' handle, for the calls the user makes on it.
  natsConnection* get() const { return nc_.get(); }
  // The redacted URL, for messages: "nats://***@127.0.0.1:4222".
  const std::string& where() const { return where_; }
  bool connected() const;

 private:
  struct Closer {
    void operator()(natsConnection* nc) const;  // natsConnection_Close, then _Destroy
  };
  Connection(natsConnection* nc, std::string where) : nc_(nc), where_(std::move(where)) {}
  std::unique_ptr<natsConnection, Closer> nc_;
  std::string where_;
};

}  // namespace outboxd::nats

#endif  // OUTBOXD_NATS_CONNECTION_H_
