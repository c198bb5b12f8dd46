// Connection over rabbitmq-c 0.11: the URL parsed, a TCP or TLS socket opened within
// the connect timeout, the login with the client properties RabbitMQ needs to say
// why it refuses one, and channel 1 opened; and the one mapping of a method's reply
// to a status.
#include "amqp/connection.h"

#include <amqp.h>
#include <amqp_framing.h>
#include <amqp_ssl_socket.h>
#include <amqp_tcp_socket.h>
#include <sys/time.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "base/status_macros.h"

namespace outboxd::amqp {
namespace {

// AMQP reply codes (the AMQP 0-9-1 specification, "Constants").
constexpr int kAccessRefused = 403;
constexpr int kNotFound = 404;
constexpr int kPreconditionFailed = 406;
constexpr int kNotAllowed = 530;

absl::Status StatusForReplyCode(int code, std::string message) {
  switch (code) {
    case kAccessRefused:
    case kNotAllowed:
      return absl::PermissionDeniedError(std::move(message));
    case kNotFound:
      return absl::NotFoundError(std::move(message));
    case kPreconditionFailed:
      return absl::FailedPreconditionError(std::move(message));
    default:
      return absl::UnavailableError(std::move(message));
  }
}

// The URL's parts; the char pointers point into `buffer`, which amqp_parse_url edits.
struct ParsedUrl {
  std::string buffer;
  amqp_connection_info info{};
  std::string vhost;
};

absl::StatusOr<std::unique_ptr<ParsedUrl>> ParseUrl(std::string_view url) {
  auto parsed = std::make_unique<ParsedUrl>();
  parsed->buffer = std::string(url);
  amqp_default_connection_info(&parsed->info);
  if (amqp_parse_url(parsed->buffer.data(), &parsed->info) != AMQP_STATUS_OK) {
    return absl::InvalidArgumentError(
        "--amqp-url is not an AMQP URL: expected amqp://user:pass@host:port/vhost or amqps://...");
  }
  // "amqp://host/" names the empty vhost by the URI spec, which RabbitMQ has not got;
  // like pika we read it as the default vhost "/".
  parsed->vhost = *parsed->info.vhost == '\0' ? "/" : parsed->info.vhost;
  return parsed;
}

std::string Redacted(const ParsedUrl& url) {
  return absl::StrCat(url.info.ssl ? "amqps://" : "amqp://", url.info.host, ":", url.info.port, "/",
                      url.vhost == "/" ? "" : url.vhost);
}

// Client properties: the capabilities without which RabbitMQ never sends
// connection.blocked, nor says ACCESS_REFUSED before closing on a wrong password
// (otherwise the socket just closes, which reads as a broker outage and is retried),
// and the name shown by `rabbitmqctl list_connections`.
struct ClientProperties {
  amqp_table_entry_t capabilities[3];
  amqp_table_entry_t entries[2];
  amqp_table_t table;

  explicit ClientProperties(const std::string& connection_name) {
    capabilities[0] = {.key = Bytes("connection.blocked"),
                       .value = {.kind = AMQP_FIELD_KIND_BOOLEAN, .value = {.boolean = 1}}};
    capabilities[1] = {.key = Bytes("publisher_confirms"),
                       .value = {.kind = AMQP_FIELD_KIND_BOOLEAN, .value = {.boolean = 1}}};
    capabilities[2] = {.key = Bytes("authentication_failure_close"),
                       .value = {.kind = AMQP_FIELD_KIND_BOOLEAN, .value = {.boolean = 1}}};
    entries[0] = {.key = Bytes("capabilities"),
                  .value = {.kind = AMQP_FIELD_KIND_TABLE,
                            .value = {.table = {.num_entries = 3, .entries = capabilities}}}};
    entries[1] = {
        .key = Bytes("connection_name"),
        .value = {.kind = AMQP_FIELD_KIND_UTF8, .value = {.bytes = Bytes(connection_name)}}};
    table = {.num_entries = 2, .entries = entries};
  }
};

absl::StatusOr<amqp_socket_t*> NewSocket(amqp_connection_state_t state, bool ssl,
                                         const TlsOptions& tls) {
  if (!ssl) {
    amqp_socket_t* socket = amqp_tcp_socket_new(state);
    if (socket == nullptr) return absl::InternalError("amqp_tcp_socket_new failed");
    return socket;
  }
  amqp_socket_t* socket = amqp_ssl_socket_new(state);
  if (socket == nullptr) return absl::InternalError("amqp_ssl_socket_new failed");
  if (!tls.ca_file.empty() && amqp_ssl_socket_set_cacert(socket, tls.ca_file.c_str()) != 0) {
    return absl::InvalidArgumentError("cannot load the TLS CA file " + tls.ca_file);
  }
  if (!tls.cert_file.empty() &&
      amqp_ssl_socket_set_key(socket, tls.cert_file.c_str(), tls.key_file.c_str()) != 0) {
    return absl::InvalidArgumentError("cannot load the TLS client certificate " + tls.cert_file +
                                      " with key " + tls.key_file);
  }
  amqp_ssl_socket_set_verify_peer(socket, tls.verify_peer);
  amqp_ssl_socket_set_verify_hostname(socket, tls.verify_hostname);
  return socket;
}

absl::Status Login(amqp_connection_state_t state, const ParsedUrl& url,
                   const ConnectionOptions& options, const std::string& where) {
  ClientProperties properties(options.connection_name);
  int heartbeat = static_cast<int>(absl::ToInt64Seconds(options.heartbeat));
  amqp_rpc_reply_t login = amqp_login_with_properties(
      state, url.vhost.c_str(), /*channel_max=*/0, AMQP_DEFAULT_FRAME_SIZE, heartbeat,
      &properties.table, AMQP_SASL_METHOD_PLAIN, url.info.user, url.info.password);
  absl::Status s = ReplyStatus(login, absl::StrCat("AMQP login to ", where));
  if (s.code() == absl::StatusCode::kPermissionDenied &&
      login.reply.id == AMQP_CONNECTION_CLOSE_METHOD &&
      static_cast<amqp_connection_close_t*>(login.reply.decoded)->reply_code == kAccessRefused) {
    return absl::UnauthenticatedError(absl::StrCat(s.message(), "; check the user and password"));
  }
  return s;
}

}  // namespace

amqp_bytes_t Bytes(std::string_view s) {
  return amqp_bytes_t{.len = s.size(), .bytes = const_cast<char*>(s.data())};
}

absl::string_view View(const amqp_bytes_t& b) {
  return absl::string_view(static_cast<const char*>(b.bytes), b.len);
}

absl::StatusOr<std::string> RedactedUrl(std::string_view url) {
  OUTBOXD_ASSIGN_OR_RETURN(auto parsed, ParseUrl(url));
  return Redacted(*parsed);
}

absl::Status ReplyStatus(const amqp_rpc_reply_t& reply, absl::string_view what) {
  switch (reply.reply_type) {
    case AMQP_RESPONSE_NORMAL:
      return absl::OkStatus();
    case AMQP_RESPONSE_NONE:
      return absl::UnavailableError(absl::StrCat(what, ": no reply from the broker"));
    case AMQP_RESPONSE_LIBRARY_EXCEPTION:
      return absl::UnavailableError(
          absl::StrCat(what, ": ", amqp_error_string2(reply.library_error)));
    case AMQP_RESPONSE_SERVER_EXCEPTION:
      break;
  }
  int code = 0;
  absl::string_view text;
  if (reply.reply.id == AMQP_CONNECTION_CLOSE_METHOD) {
    auto* m = static_cast<amqp_connection_close_t*>(reply.reply.decoded);
    code = m->reply_code;
    text = View(m->reply_text);
  } else if (reply.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
    auto* m = static_cast<amqp_channel_close_t*>(reply.reply.decoded);
    code = m->reply_code;
    text = View(m->reply_text);
  }
  return StatusForReplyCode(code, absl::StrCat(what, ": ", text));
}

absl::StatusOr<std::unique_ptr<Connection>> Connection::Open(const ConnectionOptions& options) {
  OUTBOXD_ASSIGN_OR_RETURN(std::unique_ptr<ParsedUrl> url, ParseUrl(options.url));
  std::string where = Redacted(*url);
  Connection::State state(amqp_new_connection(), &amqp_destroy_connection);
  if (state == nullptr) return absl::ResourceExhaustedError("amqp_new_connection failed");
  OUTBOXD_ASSIGN_OR_RETURN(amqp_socket_t * socket,
                           NewSocket(state.get(), url->info.ssl, options.tls));
  timeval timeout = absl::ToTimeval(std::max(options.connect_timeout, absl::ZeroDuration()));
  amqp_set_handshake_timeout(state.get(), &timeout);
  amqp_set_rpc_timeout(state.get(), &timeout);
  int rc = amqp_socket_open_noblock(socket, url->info.host, url->info.port, &timeout);
  if (rc != AMQP_STATUS_OK) {
    return absl::UnavailableError(
        absl::StrCat("cannot connect to the AMQP broker at ", where, ": ", amqp_error_string2(rc)));
  }
  OUTBOXD_RETURN_IF_ERROR(Login(state.get(), *url, options, where));
  amqp_channel_open(state.get(), kChannel);
  OUTBOXD_RETURN_IF_ERROR(ReplyStatus(amqp_get_rpc_reply(state.get()), "channel.open"));
  return std::unique_ptr<Connection>(new Connection(std::move(state), std::move(where)));
}

absl::Status Connection::LastReply(absl::string_view what) const {
  return ReplyStatus(amqp_get_rpc_reply(state_.get()), what);
}

absl::Status Connection::DeclareExchange(std::string_view exchange, ExchangeMode mode) {
  const bool passive = mode == ExchangeMode::kPassive;
  amqp_exchange_declare(state_.get(), kChannel, Bytes(exchange), Bytes("topic"), passive,
                        /*durable=*/1, /*auto_delete=*/0, /*internal=*/0, amqp_empty_table);
  absl::Status s = LastReply(
      absl::StrCat(passive ? "checking" : "declaring", " exchange ", std::string(exchange)));
  if (s.code() == absl::StatusCode::kNotFound) {
    return absl::NotFoundError(absl::StrCat(s.message(),
                                            "; declare it as a durable topic exchange "
                                            "or let outboxd declare it"));
  }
  return s;
}

absl::Status Connection::DeclareBoundQueue(std::string_view exchange, std::string_view queue,
                                           std::span<const std::string> binding_keys) {
  amqp_queue_declare(state_.get(), kChannel, Bytes(queue), /*passive=*/0, /*durable=*/1,
                     /*exclusive=*/0, /*auto_delete=*/0, amqp_empty_table);
  OUTBOXD_RETURN_IF_ERROR(LastReply("queue.declare"));
  for (const std::string& key : binding_keys) {
    amqp_queue_bind(state_.get(), kChannel, Bytes(queue), Bytes(exchange), Bytes(key),
                    amqp_empty_table);
    OUTBOXD_RETURN_IF_ERROR(LastReply("queue.bind"));
  }
  return absl::OkStatus();
}

absl::Status Connection::Consume(std::string_view queue, uint16_t prefetch) {
  amqp_basic_qos(state_.get(), kChannel, /*prefetch_size=*/0, prefetch, /*global=*/0);
  OUTBOXD_RETURN_IF_ERROR(LastReply("basic.qos"));
  amqp_basic_consume(state_.get(), kChannel, Bytes(queue), amqp_empty_bytes, /*no_local=*/0,
                     /*no_ack=*/0, /*exclusive=*/0, amqp_empty_table);
  return LastReply("basic.consume");
}

void Connection::Close() {
  amqp_channel_close(state_.get(), kChannel, AMQP_REPLY_SUCCESS);
  amqp_connection_close(state_.get(), AMQP_REPLY_SUCCESS);
}

}  // namespace outboxd::amqp
