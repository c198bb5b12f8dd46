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
#include <string>
#include <vector>

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
};

class Reader {
 public:
  virtual ~Reader() = default;
  virtual bool Seen(const std::string& id) const = 0;
  virtual size_t Count() const = 0;
  // Messages the broker dropped before the reader got to them (its retention); non-
  // zero means the run cannot be checked.
  virtual int64_t Skipped() const = 0;
  // Messages that lacked an id or lsn: never written by outboxd.
  virtual int64_t Malformed() const = 0;
  // True once the reader has read everything the broker holds now; false if
  // `timeout` passed first.
  virtual bool WaitCaughtUp(absl::Duration timeout) const = 0;
  virtual std::vector<Delivery> StopAndTake() = 0;
};

}  // namespace outboxd::chaos

#endif  // OUTBOXD_TESTS_CHAOS_READER_H_
