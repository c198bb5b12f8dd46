// The idempotent consumer: hands each message to inbox::Process (mark + effect in one
// PostgreSQL transaction) and settles it with the broker only after that database
// COMMIT. From Kafka, a consumer-group member that commits the message's offset
// synchronously (enable.auto.commit=false); from RabbitMQ (amqp_url set), a queue
// consumer with manual acks (basic.ack after the COMMIT, at most `prefetch` unacked);
// from NATS JetStream (nats_url set), a durable pull consumer with explicit acks (a
// synchronous ack after the COMMIT, at most `prefetch` unacked). A crash between the
// COMMIT and the offset commit / ack makes the broker redeliver the message (NATS:
// after `ack_wait`), and the inbox mark turns that redelivery into a skipped duplicate.
//
//   ConsumerOptions opts{.brokers = "127.0.0.1:9092", .group_id = "billing",
//                        .topics = {"pedido.confirmado"}};
//   OUTBOXD_ASSIGN_OR_RETURN(auto consumer, Consumer::Create(std::move(conn), opts, bill));
//   // or RabbitMQ: {.amqp_url = "amqp://guest:guest@127.0.0.1:5672/%2f",
//   //              .group_id = "billing" (the queue), .topics = {"pedido.confirmado"}}
//   // or NATS: {.nats_url = "nats://127.0.0.1:4222", .group_id = "billing" (the
//   //           durable consumer), .topics = {"pedido.confirmado"}}
//   while (!stop) {
//     absl::StatusOr<std::optional<Delivery>> d = consumer->PollOnce(absl::Milliseconds(200));
//     if (!d.ok()) return d.status();   // a message without a usable id header
//     if (*d) std::cout << OutcomeName((*d)->outcome) << " " << (*d)->message.id << "\n";
//   }
//
// Failures and retries: a handler or database error rolls back the mark too, seeks
// the partition back to the message (RabbitMQ: basic.nack with requeue, and the
// channel reopened so the prefetched messages behind it keep their places; NATS: a
// nak of it and of the fetched ones behind it, in order) and pauses
// the whole consumer for a backoff (initial_backoff doubling up to max_backoff, reset
// by the next success), then the message is processed again; it is retried until it
// succeeds. A message with no
// `id` header, or one that is not a UUID, cannot be deduplicated: PollOnce returns
// FailedPrecondition naming it, its offset is never committed (it is never acked) and
// it is delivered again, so it is reported again until an operator deals with it (it
// is never silently skipped).
#ifndef OUTBOXD_INBOX_CONSUMER_H_
#define OUTBOXD_INBOX_CONSUMER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/backoff.h"
#include "inbox/inbox.h"
#include "pg/connection.h"

namespace outboxd::inbox {

namespace internal {
class Source;
struct Received;
}  // namespace internal

struct ConsumerOptions {
  std::string brokers;   // Kafka
  // Kafka: the consumer group; RabbitMQ: the queue unless `queue`; NATS: the durable
  // consumer unless `durable`.
  std::string group_id;
  // Kafka: the topics; RabbitMQ: the binding keys of the queue on `exchange` (the
  // routing keys are the relay's --topic, so the same names serve both); NATS: exactly
  // one subject, the durable consumer's filter (wildcards allowed: "pedido.>").
  std::vector<std::string> topics;
  // RabbitMQ instead of Kafka when set: amqp://user:pass@host:port/vhost. The consumer
  // declares the exchange (durable topic, as the relay does), the durable queue and
  // its bindings, then consumes it with manual acks.
  std::string amqp_url;
  std::string exchange = "outboxd";
  std::string queue;  // default: group_id
  // NATS JetStream instead of Kafka when set: nats://host:4222, several
  // comma-separated, tls://host:port for TLS, user:password@ allowed (never logged).
  // The consumer binds the durable pull consumer `durable` on `stream` (creating it:
  // explicit acks, from the stream's first message, filtered by the one topic); a
  // stream that does not exist yet is waited for (`outboxd run --sink nats` makes it).
  std::string nats_url;
  std::string nats_creds_file;  // a NATS .creds file, or empty
  std::string stream = "OUTBOXD";
  std::string durable;  // default: group_id
  // NATS: a message delivered and not acked within this is delivered again (what a
  // killed consumer held). Set when the durable consumer is created; binding an
  // existing one with another value is an error naming both. JetStream's default.
  absl::Duration ack_wait = absl::Seconds(30);
  // basic.qos (NATS: the consumer's MaxAckPending and the fetch batch): unacked
  // messages the broker sends ahead. Bounds the memory and what a crash sends again
  // (duplicates the inbox skips).
  uint16_t prefetch = 100;
  // librdkafka properties applied after ours (they win), e.g. {"session.timeout.ms",
  // "10000"}. enable.auto.commit is forced off: committing early would lose messages.
  std::vector<std::pair<std::string, std::string>> properties;
  InboxOptions inbox;
  std::string id_header = "id";
  absl::Duration initial_backoff = absl::Milliseconds(100);
  absl::Duration max_backoff = absl::Seconds(5);
};

// What PollOnce did with one message.
struct Delivery {
  enum class Result { kProcessed, kDuplicate, kFailed };
  Result result = Result::kFailed;
  Message message;
  absl::Status error;  // kFailed: why; the message will be retried
  int attempt = 1;     // 1 the first time this message was tried, 2 on its first retry...
  // The offset commit (RabbitMQ: the basic.ack) after kProcessed/kDuplicate. Non-OK
  // only logs: the message will be redelivered and skipped as a duplicate.
  absl::Status offset_commit;
};
std::string_view ResultName(Delivery::Result result);  // "processed", "duplicate", "failed"

class Consumer {
 public:
  // Kafka: subscribes to the topics (joining the group happens in PollOnce).
  // RabbitMQ: connects, declares and binds the queue and starts consuming; Unavailable
  // when the broker cannot be reached or refuses. NATS: connects and binds (or
  // creates) the durable consumer; Unavailable when the server cannot be reached,
  // Unauthenticated when it refuses the credentials. InvalidArgument for a bad option
  // or librdkafka property.
  static absl::StatusOr<std::unique_ptr<Consumer>> Create(pg::Connection conn,
                                                          ConsumerOptions options, Handler handler);
  ~Consumer();  // Close()s

  Consumer(const Consumer&) = delete;
  Consumer& operator=(const Consumer&) = delete;

  // Waits up to `timeout` for one message and processes it; std::nullopt when none
  // came (or a backoff is still running). Never blocks much longer than `timeout`.
  // Errors: FailedPrecondition for a message without a usable id (see above),
  // Internal for a fatal consumer error.
  absl::StatusOr<std::optional<Delivery>> PollOnce(absl::Duration timeout);

  // Leaves the group (a peer takes the partitions over at once); RabbitMQ: closes the
  // connection (unacked messages go back to the queue); NATS: naks the fetched
  // messages not yet processed and closes (the durable consumer stays). Idempotent.
  void Close();

  pg::Connection& connection() { return conn_; }

 private:
  Consumer(pg::Connection conn, ConsumerOptions options, Handler handler,
           std::unique_ptr<internal::Source> source);
  absl::StatusOr<std::optional<Delivery>> Handle(const internal::Received& received);
  // Has the message delivered again and starts the backoff before its retry.
  std::optional<Delivery> Failed(const internal::Received& received, Delivery delivery,
                                 absl::Status error);
  // options_.inbox.key looked up once (inbox::DetectKey) instead of in every
  // transaction, when the caller left it to kDetect.
  void LearnInboxKey();

  pg::Connection conn_;
  ConsumerOptions options_;
  Handler handler_;
  std::unique_ptr<internal::Source> source_;
  bool detect_inbox_key_;  // options.inbox.key was kDetect: looked up again after a failure
  bool closed_ = false;
  // Its attempts() are the consecutive failed attempts of the message being retried;
  // no jitter: one consumer's retries gain nothing from it and stay predictable.
  Backoff backoff_;
  absl::Time resume_at_ = absl::InfinitePast();
};

}  // namespace outboxd::inbox

#endif  // OUTBOXD_INBOX_CONSUMER_H_
