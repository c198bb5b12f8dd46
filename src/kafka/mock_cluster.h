// librdkafka's mock cluster: a real Kafka-protocol broker set over TCP on loopback,
// with fault injection. Used by tests, the demo (tools/outboxd-mock-broker) and the
// benchmarks; never by the relay itself.
//
//   OUTBOXD_ASSIGN_OR_RETURN(auto cluster, MockCluster::Create(3));
//   std::string brokers = cluster->bootstraps();   // "127.0.0.1:41234,..."
//   cluster->SetBrokerDown(1);
#ifndef OUTBOXD_KAFKA_MOCK_CLUSTER_H_
#define OUTBOXD_KAFKA_MOCK_CLUSTER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace outboxd::kafka {

class MockCluster {
 public:
  static absl::StatusOr<std::unique_ptr<MockCluster>> Create(int broker_count);
  ~MockCluster();

  std::string bootstraps() const;
  int broker_count() const { return broker_count_; }

  absl::Status CreateTopic(std::string_view topic, int partitions, int replication_factor);
  // Makes `broker_id` the partition's leader (tests that stall one partition only).
  absl::Status SetPartitionLeader(std::string_view topic, int32_t partition, int32_t broker_id);
  // Broker ids are 1..broker_count. Down: connections closed and refused.
  absl::Status SetBrokerDown(int32_t broker_id);
  absl::Status SetBrokerUp(int32_t broker_id);
  absl::Status SetAllBrokersDown();
  absl::Status SetAllBrokersUp();
  // Round-trip delay added to every response of one broker.
  absl::Status SetBrokerRtt(int32_t broker_id, int rtt_ms);
  absl::Status SetAllBrokersRtt(int rtt_ms);
  // The next `count` Produce requests fail with the given Kafka error code
  // (rd_kafka_resp_err_t value, e.g. 6 NOT_LEADER_FOR_PARTITION).
  void PushProduceErrors(int error_code, int count);
  // Drops Produce errors pushed and not yet consumed.
  void ClearProduceErrors();
  // The next `count` Fetch requests fail with the given Kafka error code (e.g. 29
  // TOPIC_AUTHORIZATION_FAILED: a principal that may produce but not read).
  void PushFetchErrors(int error_code, int count);

 private:
  struct Impl;
  MockCluster(std::unique_ptr<Impl> impl, int broker_count);
  std::unique_ptr<Impl> impl_;
  int broker_count_;
};

}  // namespace outboxd::kafka

#endif  // OUTBOXD_KAFKA_MOCK_CLUSTER_H_
