// KafkaCollector: reads everything published to a set of topics, for tests that check
// what reached the broker. A consumer thread assigns every partition of each topic
// from the beginning (no consumer-group membership, no rebalances), waiting for
// topics that do not exist yet, and keeps each message with its headers.
//
// The mock broker keeps only ~5 MB per partition, so start the collector before a
// large run (WaitUntilAssigned) and let it read while the relay publishes. Measured
// on one partition, everything in one process on 2 busy cores: it keeps up with 200-
// byte messages published at 100k/s; an unpaced producer loop (~250k/s) outruns it
// and the oldest messages are lost (Skipped() > 0).
//
//   OUTBOXD_ASSIGN_OR_RETURN(auto collector,
//                            KafkaCollector::Start(cluster->bootstraps(), {"pedido.confirmado"}));
//   ASSERT_TRUE(collector->WaitUntilAssigned(absl::Seconds(10)));
//   ... publish ...
//   ASSERT_TRUE(collector->WaitForCount(3, absl::Seconds(10)));
//   EXPECT_EQ(collector->Messages()[0].Header("id"), "0b6f...");
//
// It finds topics through a metadata request for *all* topics, which does not
// auto-create anything on the mock (a request naming a topic would create it with 4
// partitions), so a test may still create its topics after starting the collector.
#ifndef OUTBOXD_TESTS_SUPPORT_KAFKA_COLLECTOR_H_
#define OUTBOXD_TESTS_SUPPORT_KAFKA_COLLECTOR_H_

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "support/kafka_consumer.h"

struct rd_kafka_message_s;

namespace outboxd::test {

struct CollectedMessage {
  std::string topic;
  int32_t partition = -1;
  int64_t offset = -1;
  std::string key;    // empty for a null key
  std::string value;  // empty for a null value
  std::vector<std::pair<std::string, std::string>> headers;

  // The first header with this name, if any.
  std::optional<std::string> Header(std::string_view name) const;
};

class KafkaCollector {
 public:
  // Starts the consumer thread. Fails only on a configuration error.
  static absl::StatusOr<std::unique_ptr<KafkaCollector>> Start(std::string bootstraps,
                                                               std::vector<std::string> topics);
  ~KafkaCollector();  // Stop()s.

  KafkaCollector(const KafkaCollector&) = delete;
  KafkaCollector& operator=(const KafkaCollector&) = delete;

  // True once every topic exists and is assigned, so messages published from now on
  // are read while they are published; call it before a large run.
  bool WaitUntilAssigned(absl::Duration timeout);

  // True once at least n messages were collected; false if the timeout passed first.
  bool WaitForCount(size_t n, absl::Duration timeout);

  // True once the collector has read every message the brokers held when it was
  // called (each partition's high watermark): after the producers stopped, what it
  // holds is all they sent, duplicates included, without sleeping "until a duplicate
  // would have shown up".
  bool WaitUntilCaughtUp(absl::Duration timeout);

  // Snapshot, in consumption order (per partition: offset order).
  std::vector<CollectedMessage> Messages() const;
  size_t Count() const;
  // Offsets never seen because the broker dropped them before the collector read
  // them (the mock's retention). Non-zero means the collector fell behind.
  int64_t Skipped() const;

  // Stops and joins the consumer thread; idempotent. Messages() stays available.
  void Stop();

 private:
  struct PartitionKey {
    std::string topic;
    int32_t partition;
    auto operator<=>(const PartitionKey&) const = default;
  };

  KafkaCollector(ConsumerPtr consumer, std::vector<std::string> topics);
  void Run();
  // Looks for topics not assigned yet and, when some appeared, reassigns everything
  // (known partitions resume at their next offset).
  void DiscoverTopics();
  void Collect(rd_kafka_message_s* const* batch, size_t count);

  ConsumerPtr consumer_;  // reset by Stop() after the thread is joined
  std::vector<std::string> wanted_;
  std::set<std::string> assigned_topics_;        // consumer thread only
  std::map<PartitionKey, int64_t> next_offset_;  // consumer thread only

  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;
  std::condition_variable arrived_;
  std::vector<CollectedMessage> messages_;   // guarded by mu_
  bool all_assigned_ = false;                // guarded by mu_
  std::map<PartitionKey, int64_t> read_to_;  // next offset per partition, guarded by mu_
  int64_t skipped_ = 0;                      // guarded by mu_
  std::thread thread_;
};

}  // namespace outboxd::test

#endif  // OUTBOXD_TESTS_SUPPORT_KAFKA_COLLECTOR_H_
