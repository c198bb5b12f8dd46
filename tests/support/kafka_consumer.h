// The settings the tests' own Kafka consumers share: KafkaCollector
// (support/kafka_collector.h) and the chaos run's KafkaReader (chaos/kafka_reader.h).
// Each assigns partitions itself from the beginning (rd_kafka_assign, never a group
// join), reads ahead of a fast producer and gives up quickly on a broker that went
// silent. Plain librdkafka, so the chaos reader still shares no code with the relay.
//
//   OUTBOXD_ASSIGN_OR_RETURN(ConsumerPtr consumer,
//                            StartConsumer(bootstraps, "outboxd-test-collector",
//                                          ConsumerLogs::kLibrdkafkaDefault));
//   rd_kafka_assign(consumer.get(), partitions);
#ifndef OUTBOXD_TESTS_SUPPORT_KAFKA_CONSUMER_H_
#define OUTBOXD_TESTS_SUPPORT_KAFKA_CONSUMER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"

struct rd_kafka_s;

namespace outboxd::test {

// Destroys without a consumer close: there is no group to leave, and a close waits
// on brokers that may be down.
using ConsumerPtr = std::unique_ptr<rd_kafka_s, void (*)(rd_kafka_s*)>;

enum class ConsumerLogs {
  kLibrdkafkaDefault,  // reconnects and broker failures show in the test's output
  kCriticalOnly,       // for runs whose outages are the point: no reconnect chatter
};

// A consumer whose messages arrive on its consumer queue (rd_kafka_poll_set_consumer),
// with nothing assigned yet. `group_id` is never joined: rd_kafka_assign() in 2.0.2
// refuses to work without one ("Unknown group").
absl::StatusOr<ConsumerPtr> StartConsumer(const std::string& bootstraps,
                                          const std::string& group_id, ConsumerLogs logs);

}  // namespace outboxd::test

#endif  // OUTBOXD_TESTS_SUPPORT_KAFKA_CONSUMER_H_
