// The independent consumer of a chaos run: reads every partition of the chaos topics
// from the beginning while the run goes (the mock broker keeps only ~5 MB per
// partition) and keeps, per message, only what the checker needs: where it was read,
// the event id, the aggregate and the commit LSN header. A plain librdkafka consumer
// with manual assignment, set up as the tests' collector is (support/kafka_consumer.h);
// it shares no code with the relay.
//
//   auto reader = KafkaReader::Start(bootstraps, {"chaos.a", "chaos.b"}, 4);
//   ... run ...
//   bool delivered = (*reader)->Seen(marker_id);
//   std::vector<Delivery> all = (*reader)->StopAndTake();
#ifndef OUTBOXD_TESTS_CHAOS_KAFKA_READER_H_
#define OUTBOXD_TESTS_CHAOS_KAFKA_READER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "chaos/reader.h"

struct rd_kafka_s;

namespace outboxd::chaos {

class KafkaReader final : public Reader {
 public:
  static absl::StatusOr<std::unique_ptr<KafkaReader>> Start(const std::string& bootstraps,
                                                            const std::vector<std::string>& topics,
                                                            int partitions);
  ~KafkaReader() override;

  // True once the reader has read every partition up to its high watermark (as the
  // broker reports it now); false if `timeout` passed first.
  bool WaitCaughtUp(absl::Duration timeout) const override;
  std::vector<Delivery> StopAndTake() override;

 private:
  KafkaReader(rd_kafka_s* consumer, std::vector<std::string> topics, int partitions);
  void Run();
  // topic-major: stream = topic index * partitions + partition.
  int32_t Stream(const char* topic, int32_t partition) const;

  rd_kafka_s* consumer_;
  const std::vector<std::string> topics_;
  const int partitions_;
  std::atomic<bool> stop_{false};
  mutable std::mutex offsets_mu_;
  std::vector<int64_t> next_offset_;  // guarded by offsets_mu_
  std::thread thread_;
};

}  // namespace outboxd::chaos

#endif  // OUTBOXD_TESTS_CHAOS_KAFKA_READER_H_
