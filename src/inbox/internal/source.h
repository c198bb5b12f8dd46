// Where inbox::Consumer gets its messages: a Kafka consumer-group member, a RabbitMQ
// queue consumer or a durable NATS JetStream pull consumer. The Consumer runs the
// inbox transaction; the source only hands messages over and settles each one
// afterwards: Settle() once its effect is committed (Kafka: commit the offset;
// RabbitMQ: basic.ack; NATS: a synchronous ack), Redeliver() when it failed (Kafka:
// seek back; RabbitMQ: basic.nack with requeue, and the channel reopened so the
// prefetched messages behind it come again after it, in order; NATS: nak it and the
// fetched ones behind it, in order).
//
//   OUTBOXD_ASSIGN_OR_RETURN(auto source, MakeAmqpSource(options));
//   OUTBOXD_ASSIGN_OR_RETURN(std::optional<Received> r, source->Next(absl::Milliseconds(200)));
//   if (r) ok ? source->Settle(*r) : source->Redeliver(*r);
#ifndef OUTBOXD_INBOX_INTERNAL_SOURCE_H_
#define OUTBOXD_INBOX_INTERNAL_SOURCE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "inbox/inbox.h"

namespace outboxd::inbox {
struct ConsumerOptions;
}

namespace outboxd::inbox::internal {

struct Received {
  Message message;
  uint64_t delivery_tag = 0;  // RabbitMQ: what basic.ack/nack name; NATS: the source's count
};

class Source {
 public:
  virtual ~Source() = default;
  // Waits up to `timeout` for one message; std::nullopt when none came. Internal for
  // an error the source cannot recover from.
  virtual absl::StatusOr<std::optional<Received>> Next(absl::Duration timeout) = 0;
  // The message's effect is committed: it must not come again. Non-OK: it will, and
  // the inbox skips it as a duplicate.
  virtual absl::Status Settle(const Received& received) = 0;
  // The message must come again, before anything of its partition/queue after it.
  virtual void Redeliver(const Received& received) = 0;
  virtual void Close() = 0;
  // For messages and logs: "pedido.confirmado[2]@7", "queue billing, delivery 7".
  virtual std::string Where(const Message& message) const = 0;
  // How an operator moves past a message that cannot be deduplicated.
  virtual std::string SkipAdvice() const = 0;
};

absl::StatusOr<std::unique_ptr<Source>> MakeKafkaSource(const ConsumerOptions& options);
absl::StatusOr<std::unique_ptr<Source>> MakeAmqpSource(const ConsumerOptions& options);
absl::StatusOr<std::unique_ptr<Source>> MakeNatsSource(const ConsumerOptions& options);

}  // namespace outboxd::inbox::internal

#endif  // OUTBOXD_INBOX_INTERNAL_SOURCE_H_
