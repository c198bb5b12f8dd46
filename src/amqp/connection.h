// The one way outboxd opens a RabbitMQ connection (rabbitmq-c 0.11): the URL, a TCP
// or TLS socket, the login with client properties and a heartbeat, and channel 1
// open. The publisher (amqp/publisher.h), the inbox's queue consumer
// (src/inbox/internal/amqp_source.cc) and the chaos tool's reader
// (tests/chaos/amqp_reader.cc) all start here; what each then does on the channel
// (confirm.select, basic.consume, ...) is its own.
//
// The header names rabbitmq-c's handle and reply by their struct tags only, so
// including it does not pull in rabbitmq-c; a .cc that calls rabbitmq-c on the
// handle includes <amqp.h> and links PkgConfig::RABBITMQ itself.
//
//   OUTBOXD_ASSIGN_OR_RETURN(std::unique_ptr<Connection> c,
//                            Connection::Open({.url = url, .heartbeat = absl::Seconds(60)}));
//   amqp_basic_qos(c->get(), kChannel, 0, 100, 0);
//   OUTBOXD_RETURN_IF_ERROR(c->LastReply("basic.qos"));
//   c->Close();
#ifndef OUTBOXD_AMQP_CONNECTION_H_
#define OUTBOXD_AMQP_CONNECTION_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

// rabbitmq-c's amqp_connection_state_t is `amqp_connection_state_t_*`, its
// amqp_rpc_reply_t is `amqp_rpc_reply_t_`, its amqp_bytes_t `amqp_bytes_t_`.
struct amqp_connection_state_t_;
struct amqp_rpc_reply_t_;
struct amqp_bytes_t_;

namespace outboxd::amqp {

// The channel every outboxd connection opens and works on.
inline constexpr uint16_t kChannel = 1;

enum class ExchangeMode {
  kDeclare,  // exchange.declare: creates the durable topic exchange if missing
  kPassive,  // passive declare: the exchange must exist already
};

// For amqps:// URLs (rabbitmq-c built with OpenSSL). rabbitmq-c does not load the
// system's CA store, so verify_peer needs ca_file; verify_hostname checks the
// certificate's DNS names and CN only (rabbitmq-c 0.11), so name the host in the URL,
// not its IP address.
struct TlsOptions {
  std::string ca_file;
  std::string cert_file;  // client certificate, with key_file
  std::string key_file;
  bool verify_peer = true;
  bool verify_hostname = true;
};

struct ConnectionOptions {
  std::string url;  // amqp://user:pass@host:port/vhost or amqps://...; "/" alone = vhost "/"
  TlsOptions tls;
  // Bounds the TCP (and TLS) connect, the handshake and each synchronous method.
  absl::Duration connect_timeout = absl::Seconds(10);
  // Negotiated heartbeat; 0 turns heartbeats off. rabbitmq-c sends and checks them
  // only while the caller reads frames, so it must read more often than this/2.
  absl::Duration heartbeat = absl::Seconds(30);
  // Shown by `rabbitmqctl list_connections client_properties` and the management UI.
  std::string connection_name = "outboxd";
};

// The host, port and vhost of an amqp:// URL, never its password (for logs/errors).
// InvalidArgument for what rabbitmq-c cannot parse.
absl::StatusOr<std::string> RedactedUrl(std::string_view url);

// rabbitmq-c's byte strings from and to a view, without a copy: Bytes(s) lives as
// long as s does.
amqp_bytes_t_ Bytes(std::string_view s);
absl::string_view View(const amqp_bytes_t_& b);

// The reply of a synchronous method (or of amqp_consume_message, amqp_read_message)
// as a Status prefixed with `what`: OK; for a refusal by the broker, its reply code's
// status (403, 530: PermissionDenied; 404: NotFound; 406: FailedPrecondition) with
// its text; Unavailable otherwise.
absl::Status ReplyStatus(const amqp_rpc_reply_t_& reply, absl::string_view what);

// Destroying it releases the connection without a handshake (the broker sees the
// socket close): Close() first for a clean end.
class Connection {
 public:
  // Connects, logs in and opens kChannel. Errors name the redacted URL: Unavailable
  // (no broker there, or it went away), Unauthenticated (login refused),
  // PermissionDenied (vhost access), InvalidArgument (the URL, a TLS file).
  static absl::StatusOr<std::unique_ptr<Connection>> Open(const ConnectionOptions& options);
  // rabbitmq-c's handle, for the calls the user makes on it.
  amqp_connection_state_t_* get() const { return state_.get(); }
  // The redacted URL, for errors: "amqp://127.0.0.1:5672/".
  const std::string& where() const { return where_; }
  // The relays' exchange, a durable topic exchange: declared, or with kPassive
  // checked. NotFound (passive, missing) with the fix; FailedPrecondition when it
  // exists with another type.
  absl::Status DeclareExchange(std::string_view exchange, ExchangeMode mode);
  // A durable queue, bound to `exchange` with each of `binding_keys`.
  absl::Status DeclareBoundQueue(std::string_view exchange, std::string_view queue,
                                 std::span<const std::string> binding_keys);
  // basic.qos with `prefetch` unacked messages, then basic.consume with manual acks:
  // read them with amqp_consume_message, ack each with amqp_basic_ack.
  absl::Status Consume(std::string_view queue, uint16_t prefetch);
  // ReplyStatus of the last synchronous method called on get().
  absl::Status LastReply(absl::string_view what) const;
  // channel.close and connection.close, each bounded by connect_timeout; the handle
  // stays usable for nothing but destruction.
  void Close();

 private:
  // Owns rabbitmq-c's handle; the deleter is amqp_destroy_connection.
  using State = std::unique_ptr<amqp_connection_state_t_, int (*)(amqp_connection_state_t_*)>;
  Connection(State state, std::string where) : state_(std::move(state)), where_(std::move(where)) {}
  State state_;
  std::string where_;
};

}  // namespace outboxd::amqp

#endif  // OUTBOXD_AMQP_CONNECTION_H_
