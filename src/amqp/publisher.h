// AMQP 0-9-1 publisher with publisher confirms (RabbitMQ), over rabbitmq-c.
//
//   Produce ──basic.publish(mandatory, persistent)──▶ exchange (durable topic)
//   Poll    ◀──basic.ack/nack, basic.return, connection.blocked, close── broker
//                 └─▶ on_completion(tag, outcome) once per produced message
//
// One connection, one channel in confirm mode: the broker numbers the messages of a
// channel 1, 2, 3, ... in publish order (delivery tags) and confirms each exactly
// once, possibly several at a time (basic.ack with `multiple`) and not necessarily in
// order across queues. A message no queue is bound for comes back first as
// basic.return and is then acked: it completes as kUnroutable. Frames are read only
// in Poll()/Flush() on the caller's thread, with a timeout; rabbitmq-c answers
// heartbeats there too, so the caller polls at least every heartbeat/2.
//
// A lost connection (socket error, connection.close, or a channel.close, e.g. a
// message over the broker's max_message_size) completes every outstanding message at
// once, in publish order, as kConnectionLost (the one the broker refused, when it can
// be told apart, as kRejected). Nothing else is retried here: the caller calls
// Reconnect() and publishes those messages again in the same order, which keeps
// per-key order at the price of duplicates of what the broker took but never
// confirmed (at least once).
//
//   PublisherOptions opts{.url = "amqp://guest:guest@127.0.0.1:5672/", .exchange = "outboxd"};
//   OUTBOXD_ASSIGN_OR_RETURN(auto pub, Publisher::Connect(opts, [&](const Completion& c) {
//     if (c.outcome == Outcome::kAcked) tracker.Ack(c.tag);
//     else if (c.outcome == Outcome::kConnectionLost) resend.push_back(c.tag);  // in order
//     else dead_letter(c.tag, c.reason);  // kUnroutable, kRejected; kNacked: retry later
//   }));
//   Header headers[] = {{"aggregate_id", "77"}};
//   OUTBOXD_RETURN_IF_ERROR(pub->Produce({.routing_key = "order.confirmed", .body = "{...}",
//                                         .properties = {.message_id = "42", .type =
//                                         "order.confirmed"}, .headers = headers, .tag = 42}));
//   pub->Poll(absl::Milliseconds(100));   // completions arrive here
//   if (!pub->Health().ok()) { pub->Reconnect(); /* then Produce the resend list */ }
//   if (pub->Blocked()) { /* stop reading new work until it clears (keep polling) */ }
#ifndef OUTBOXD_AMQP_PUBLISHER_H_
#define OUTBOXD_AMQP_PUBLISHER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "amqp/connection.h"

namespace outboxd::amqp {

// A string-valued entry of the message's header table.
struct Header {
  std::string_view name;
  std::string_view value;
};

// The basic properties outboxd sets; delivery mode is always 2 (persistent).
struct MessageProperties {
  std::string_view message_id;
  std::string_view type;
  std::string_view content_type;
  std::optional<absl::Time> timestamp;  // AMQP carries whole seconds since the epoch
};

struct OutgoingMessage {
  std::string_view routing_key;
  std::string_view body;
  MessageProperties properties;
  std::span<const Header> headers;
  uint64_t tag = 0;  // the caller's, handed back in the Completion
};

enum class Outcome {
  kAcked,           // the broker took responsibility (basic.ack)
  kUnroutable,      // basic.return: no queue is bound for the routing key
  kNacked,          // basic.nack: the broker could not take it now (e.g. reject-publish)
  kRejected,        // the broker closed the channel on this message (e.g. too large)
  kConnectionLost,  // the connection or channel ended first: publish it again
};

struct Completion {
  uint64_t tag = 0;
  Outcome outcome = Outcome::kAcked;
  // Empty for kAcked; otherwise one line, e.g.
  // "unroutable: no queue bound for routing key order.confirmed". Valid during the call.
  std::string_view reason;
};

using CompletionHandler = std::function<void(const Completion&)>;

struct PublisherOptions {
  std::string url;  // amqp://user:pass@host:port/vhost or amqps://...; "/" alone = vhost "/"
  std::string exchange = "outboxd";
  ExchangeMode exchange_mode = ExchangeMode::kDeclare;
  // As in ConnectionOptions (amqp/connection.h); rabbitmq-c answers heartbeats only
  // inside Poll()/Produce(), so the caller must poll more often than heartbeat/2.
  TlsOptions tls;
  absl::Duration connect_timeout = absl::Seconds(10);
  absl::Duration heartbeat = absl::Seconds(30);
  std::string connection_name = "outboxd";
};

class Publisher {
 public:
  // Connects, opens channel 1, confirm.select, declares the exchange. Errors name the
  // redacted URL: Unavailable (no broker there), Unauthenticated (login refused),
  // PermissionDenied (vhost access), NotFound (passive exchange missing),
  // FailedPrecondition (the exchange exists with another type), InvalidArgument (URL).
  static absl::StatusOr<std::unique_ptr<Publisher>> Connect(const PublisherOptions& options,
                                                            CompletionHandler on_completion);
  // Close(): outstanding messages complete as kConnectionLost. Flush() first to wait.
  ~Publisher();
  Publisher(const Publisher&) = delete;
  Publisher& operator=(const Publisher&) = delete;

  // Sends one message (a socket write: it can block only while the kernel's socket
  // buffer is full). Unavailable when the connection is lost (Reconnect() first);
  // ResourceExhausted while Blocked(); InvalidArgument for a message AMQP cannot carry
  // (a routing key, id, type, content type or header name over 255 bytes, headers
  // over one frame), with the connection left as it was. A message Produce refuses
  // gets no Completion; one it accepts gets exactly one.
  absl::Status Produce(const OutgoingMessage& message);

  // Reads and handles what the broker sent, waiting up to `timeout` for the first
  // frame; returns how many completions were delivered.
  int Poll(absl::Duration timeout);

  // Polls until every outstanding message completed. DeadlineExceeded on timeout;
  // Unavailable if the connection was lost meanwhile (completions were delivered).
  absl::Status Flush(absl::Duration timeout);

  // After a loss: a fresh connection and channel (delivery tags start at 1 again).
  absl::Status Reconnect();

  // Sends connection.close (bounded by connect_timeout) and releases the connection.
  // Outstanding messages complete as kConnectionLost. Idempotent.
  void Close();

  // OK while connected; otherwise why the connection ended (Unavailable).
  absl::Status Health() const;
  // True between connection.blocked and connection.unblocked (a memory or disk
  // alarm): the broker is not reading this connection, so stop producing.
  bool Blocked() const;
  std::string_view BlockedReason() const;  // e.g. "low on memory"

  // The connection's socket while connected, else -1: readable when the broker has
  // sent something, for a caller's select()/epoll. Frames rabbitmq-c has already read
  // into its buffer do not make it readable: check HasBufferedFrames() after Poll().
  int socket_fd() const;
  bool HasBufferedFrames() const;

  int InFlight() const;            // produced, not yet completed
  uint64_t InFlightBytes() const;  // their body bytes

 private:
  struct Impl;
  explicit Publisher(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace outboxd::amqp

#endif  // OUTBOXD_AMQP_PUBLISHER_H_
