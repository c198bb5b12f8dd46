// The idempotent Kafka consumer: a consumer-group member that hands each message to
// inbox::Process (mark + effect in one PostgreSQL transaction) and commits the
// message's offset to Kafka only after that database COMMIT, synchronously
// (enable.auto.commit=false). A crash between the two commits makes Kafka redeliver
// the message, and the inbox mark turns that redelivery into a skipped duplicate.
//
//   ConsumerOptions opts{.brokers = "127.0.0.1:9092", .group_id = "billing",
//                        .topics = {"pedido.confirmado"}};
//   OUTBOXD_ASSIGN_OR_RETURN(auto consumer, Consumer::Create(std::move(conn), opts, bill));
//   while (!stop) {
//     absl::StatusOr<std::optional<Delivery>> d = consumer->PollOnce(absl::Milliseconds(200));
//     if (!d.ok()) return d.status();   // a message without a usable id header
//     if (*d) std::cout << OutcomeName((*d)->outcome) << " " << (*d)->message.id << "\n";
//   }
//
// Failures and retries: a handler or database error rolls back the mark too, seeks
// the partition back to the message and pauses the whole consumer for a backoff
// (initial_backoff doubling up to max_backoff, reset by the next success), then the
// message is processed again; it is retried until it succeeds. A message with no
// `id` header, or one that is not a UUID, cannot be deduplicated: PollOnce returns
// FailedPrecondition naming it, its offset is never committed and the partition is
// sought back to it, so it is reported again until an operator deals with it (it is
// never silently skipped).
#ifndef OUTBOXD_INBOX_CONSUMER_H_
#define OUTBOXD_INBOX_CONSUMER_H_

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "inbox/inbox.h"
#include "pg/connection.h"

struct rd_kafka_message_s;

namespace outboxd::inbox {

struct ConsumerOptions {
  std::string brokers;
  std::string group_id;
  std::vector<std::string> topics;
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
  // The offset commit after kProcessed/kDuplicate. Non-OK only logs: the message will
  // be redelivered and skipped as a duplicate.
  absl::Status offset_commit;
};
std::string_view ResultName(Delivery::Result result);  // "processed", "duplicate", "failed"

class Consumer {
 public:
  // Subscribes to the topics (joining the group happens in PollOnce). InvalidArgument
  // for a bad option or librdkafka property.
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

  // Leaves the group (a peer takes the partitions over at once). Idempotent.
  void Close();

  pg::Connection& connection() { return conn_; }

 private:
  struct Kafka;
  Consumer(pg::Connection conn, ConsumerOptions options, Handler handler,
           std::unique_ptr<Kafka> kafka);
  absl::StatusOr<std::optional<Delivery>> Handle(const rd_kafka_message_s* msg);
  // Seeks back to the message and starts the backoff before its retry.
  std::optional<Delivery> Failed(const rd_kafka_message_s* msg, Delivery delivery,
                                 absl::Status error);

  pg::Connection conn_;
  ConsumerOptions options_;
  Handler handler_;
  std::unique_ptr<Kafka> kafka_;
  int failures_ = 0;  // consecutive failed attempts of the message being retried
  absl::Time resume_at_ = absl::InfinitePast();
};

}  // namespace outboxd::inbox

#endif  // OUTBOXD_INBOX_CONSUMER_H_
