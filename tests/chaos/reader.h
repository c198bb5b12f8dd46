// What a chaos run reads back from its broker, whichever broker: one Delivery per
// message as read, and the reader's questions the driver asks while it runs.
// KafkaReader (kafka_reader.h) reads the mock Kafka cluster; AmqpReader
// (amqp_reader.h) a RabbitMQ queue; NatsReader (nats_reader.h) a JetStream stream.
// None shares code with the relay.
//
//   std::unique_ptr<Reader> reader = ...;
//   bool delivered = reader->Seen(marker_id);
//   std::vector<Delivery> all = reader->StopAndTake();
#ifndef OUTBOXD_TESTS_CHAOS_READER_H_
#define OUTBOXD_TESTS_CHAOS_READER_H_

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/time/time.h"

namespace outboxd::chaos {

// One message as read. `partition` numbers the ordered streams the reader reads
// (Kafka: topic-partitions 0.. topic-major; RabbitMQ: the one queue, 0; NATS: the one
// stream, 0); within one, `offset` is the order in which messages were read (NATS: the
// stream sequence).
struct Delivery {
  int32_t partition = 0;
  int64_t offset = 0;
  std::string id;         // the event id (Kafka: the `id` header; AMQP: message_id)
  std::string aggregate;  // the key (AMQP: the `aggregate_id` header)
  std::string lsn;        // the `lsn` header (commit LSN "X/Y")
  int64_t created_ms = -1;  // Kafka: when the producer made it (ms since the epoch)
};

// The driver asks Seen, Count, Skipped and Malformed while the reader's own thread
// reads; each reader hands what it read to Record, which keeps it for them.
class Reader {
 public:
  virtual ~Reader() = default;
  bool Seen(const std::string& id) const;
  size_t Count() const;
  // Messages the broker dropped before the reader got to them (its retention); non-
  // zero means the run cannot be checked.
  int64_t Skipped() const;
  // Messages that lacked an id or lsn: never written by outboxd.
  int64_t Malformed() const;
  // True once the reader has read everything the broker holds now; false if
  // `timeout` passed first.
  virtual bool WaitCaughtUp(absl::Duration timeout) const = 0;
  virtual std::vector<Delivery> StopAndTake() = 0;

 protected:
  // A batch read (and `skipped` messages found missing), from the reader's thread.
  void Record(std::vector<Delivery>& batch, int64_t skipped = 0);
  // Everything recorded so far, handed over once.
  std::vector<Delivery> TakeRecorded();

 private:
  mutable std::mutex mu_;
  std::vector<Delivery> deliveries_;       // guarded by mu_
  absl::flat_hash_set<std::string> seen_;  // guarded by mu_
  int64_t skipped_ = 0;                    // guarded by mu_
  int64_t malformed_ = 0;                  // guarded by mu_
};

}  // namespace outboxd::chaos

#endif  // OUTBOXD_TESTS_CHAOS_READER_H_
