// MockCluster over rd_kafka_mock_*. The mock runs on its own thread inside the
// rd_kafka_t handed to rd_kafka_mock_cluster_new(), so that handle must outlive the
// cluster; every call below is a synchronous request to that thread.
//
// Facts about librdkafka 2.0.2's mock, measured (tests/kafka/mock_cluster_test.cc):
//  - topics are auto-created with 4 partitions on *any* metadata or produce request
//    naming them, from producers and consumers alike (AllowAutoTopicCreation is
//    ignored): create topics with an explicit count before any client names them;
//  - topic names are not validated ("bad topic!" is accepted);
//  - broker id -1 means "all brokers" for down/up/rtt;
//  - a down broker closes its connections and refuses new ones, but stays in the
//    metadata and keeps leading its partitions (no leader change).
#include "kafka/mock_cluster.h"

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kafka/internal/rdkafka_util.h"

namespace outboxd::kafka {
namespace {

using ConfPtr = std::unique_ptr<rd_kafka_conf_t, decltype(&rd_kafka_conf_destroy)>;
using HandlePtr = std::unique_ptr<rd_kafka_t, decltype(&rd_kafka_destroy)>;
using ClusterPtr =
    std::unique_ptr<rd_kafka_mock_cluster_t, decltype(&rd_kafka_mock_cluster_destroy)>;

constexpr int32_t kAllBrokers = -1;
constexpr int16_t kApiKeyProduce = 0;  // RD_KAFKAP_Produce
constexpr int16_t kApiKeyFetch = 1;    // RD_KAFKAP_Fetch

void PushErrors(rd_kafka_mock_cluster_t* cluster, int16_t api_key, int error_code, int count) {
  if (count <= 0) return;
  const std::vector<rd_kafka_resp_err_t> errors(count,
                                                static_cast<rd_kafka_resp_err_t>(error_code));
  rd_kafka_mock_push_request_errors_array(cluster, api_key, errors.size(), errors.data());
}

absl::Status MockStatus(rd_kafka_resp_err_t err, absl::string_view what) {
  if (err == RD_KAFKA_RESP_ERR_NO_ERROR) return absl::OkStatus();
  // The mock answers "broker not available" for a broker id it does not have: to the
  // caller that is a broker not found, not an outage.
  if (err == RD_KAFKA_RESP_ERR_BROKER_NOT_AVAILABLE) err = RD_KAFKA_RESP_ERR__UNKNOWN_BROKER;
  return internal::ErrorStatus(err, absl::StrCat(what, ": ", rd_kafka_err2str(err)),
                               absl::StatusCode::kInvalidArgument);
}

}  // namespace

struct MockCluster::Impl {
  // Destroyed in reverse: the cluster first, then the handle hosting it.
  HandlePtr owner{nullptr, &rd_kafka_destroy};
  ClusterPtr cluster{nullptr, &rd_kafka_mock_cluster_destroy};
};

MockCluster::MockCluster(std::unique_ptr<Impl> impl, int broker_count)
    : impl_(std::move(impl)), broker_count_(broker_count) {}

MockCluster::~MockCluster() = default;

absl::StatusOr<std::unique_ptr<MockCluster>> MockCluster::Create(int broker_count) {
  if (broker_count < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("mock cluster needs at least 1 broker, got ", broker_count));
  }
  auto impl = std::make_unique<Impl>();
  ConfPtr conf(rd_kafka_conf_new(), &rd_kafka_conf_destroy);
  char errstr[512];
  // The owner never connects anywhere; at the default level it would print a
  // "No bootstrap.servers configured" notice on every start.
  if (rd_kafka_conf_set(conf.get(), "log_level", "4", errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK) {
    return absl::InternalError(absl::StrCat("mock cluster owner: ", errstr));
  }
  impl->owner.reset(rd_kafka_new(RD_KAFKA_PRODUCER, conf.get(), errstr, sizeof(errstr)));
  if (impl->owner == nullptr) {
    return absl::InternalError(absl::StrCat("mock cluster owner: ", errstr));
  }
  conf.release();  // rd_kafka_new() took it

  impl->cluster.reset(rd_kafka_mock_cluster_new(impl->owner.get(), broker_count));
  if (impl->cluster == nullptr) {
    return absl::InternalError("rd_kafka_mock_cluster_new failed (no loopback listener?)");
  }
  return std::unique_ptr<MockCluster>(new MockCluster(std::move(impl), broker_count));
}

std::string MockCluster::bootstraps() const {
  return rd_kafka_mock_cluster_bootstraps(impl_->cluster.get());
}

absl::Status MockCluster::CreateTopic(std::string_view topic, int partitions,
                                      int replication_factor) {
  if (partitions < 1 || replication_factor < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("mock topic \"", absl::string_view(topic.data(), topic.size()),
                     "\": partitions and replication factor must be >= 1"));
  }
  const std::string name(topic);
  return MockStatus(rd_kafka_mock_topic_create(impl_->cluster.get(), name.c_str(), partitions,
                                               replication_factor),
                    absl::StrCat("create mock topic \"", name, "\""));
}

absl::Status MockCluster::SetPartitionLeader(std::string_view topic, int32_t partition,
                                             int32_t broker_id) {
  const std::string name(topic);
  return MockStatus(
      rd_kafka_mock_partition_set_leader(impl_->cluster.get(), name.c_str(), partition, broker_id),
      absl::StrCat("set the leader of mock partition ", name, "[", partition, "]"));
}

absl::Status MockCluster::SetBrokerDown(int32_t broker_id) {
  return MockStatus(rd_kafka_mock_broker_set_down(impl_->cluster.get(), broker_id),
                    absl::StrCat("set mock broker ", broker_id, " down"));
}

absl::Status MockCluster::SetBrokerUp(int32_t broker_id) {
  return MockStatus(rd_kafka_mock_broker_set_up(impl_->cluster.get(), broker_id),
                    absl::StrCat("set mock broker ", broker_id, " up"));
}

absl::Status MockCluster::SetAllBrokersDown() { return SetBrokerDown(kAllBrokers); }

absl::Status MockCluster::SetAllBrokersUp() { return SetBrokerUp(kAllBrokers); }

absl::Status MockCluster::SetBrokerRtt(int32_t broker_id, int rtt_ms) {
  if (rtt_ms < 0) {
    return absl::InvalidArgumentError(absl::StrCat("mock broker RTT must be >= 0, got ", rtt_ms));
  }
  return MockStatus(rd_kafka_mock_broker_set_rtt(impl_->cluster.get(), broker_id, rtt_ms),
                    absl::StrCat("set mock broker ", broker_id, " RTT"));
}

absl::Status MockCluster::SetAllBrokersRtt(int rtt_ms) { return SetBrokerRtt(kAllBrokers, rtt_ms); }

void MockCluster::PushProduceErrors(int error_code, int count) {
  PushErrors(impl_->cluster.get(), kApiKeyProduce, error_code, count);
}

void MockCluster::PushFetchErrors(int error_code, int count) {
  PushErrors(impl_->cluster.get(), kApiKeyFetch, error_code, count);
}

void MockCluster::ClearProduceErrors() {
  rd_kafka_mock_clear_request_errors(impl_->cluster.get(), kApiKeyProduce);
}

}  // namespace outboxd::kafka
