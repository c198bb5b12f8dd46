// Pins down how librdkafka 2.0.2's mock cluster behaves, since tests, the demo and
// the benchmarks rely on it: partition defaults, auto-creation, down/up, RTT.
#include "kafka/mock_cluster.h"

#include <arpa/inet.h>
#include <librdkafka/rdkafka.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <map>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "kafka/publisher.h"
#include "support/tcp.h"

namespace outboxd::kafka {
namespace {

using test::Accepts;

// Partition count per existing topic, from a metadata request for all topics (which
// creates nothing).
std::map<std::string, int> Topics(const std::string& bootstraps) {
  std::unique_ptr<rd_kafka_conf_t, decltype(&rd_kafka_conf_destroy)> conf(rd_kafka_conf_new(),
                                                                          &rd_kafka_conf_destroy);
  char err[256];
  rd_kafka_conf_set(conf.get(), "bootstrap.servers", bootstraps.c_str(), err, sizeof(err));
  std::unique_ptr<rd_kafka_t, decltype(&rd_kafka_destroy)> rk(
      rd_kafka_new(RD_KAFKA_PRODUCER, conf.get(), err, sizeof(err)), &rd_kafka_destroy);
  if (rk == nullptr) return {};
  conf.release();
  const rd_kafka_metadata_t* md = nullptr;
  if (rd_kafka_metadata(rk.get(), 1, nullptr, &md, 10000) != RD_KAFKA_RESP_ERR_NO_ERROR) return {};
  std::map<std::string, int> topics;
  for (int i = 0; i < md->topic_cnt; ++i) topics[md->topics[i].topic] = md->topics[i].partition_cnt;
  rd_kafka_metadata_destroy(md);
  return topics;
}

std::vector<std::string> Brokers(const MockCluster& cluster) {
  return absl::StrSplit(cluster.bootstraps(), ',');
}

// Produces one message and waits for its report; returns how long that took.
absl::Duration ProduceOne(const std::string& bootstraps, std::string_view topic) {
  int reports = 0;
  auto publisher = Publisher::Create({.brokers = bootstraps}, [&](const DeliveryReport& r) {
    EXPECT_TRUE(r.status.ok()) << r.status;
    ++reports;
  });
  EXPECT_TRUE(publisher.ok()) << publisher.status();
  if (!publisher.ok()) return absl::ZeroDuration();
  const absl::Time start = absl::Now();
  EXPECT_TRUE((*publisher)->Produce({.topic = topic, .key = "k", .value = "v"}).ok());
  EXPECT_TRUE((*publisher)->Flush(absl::Seconds(20)).ok());
  EXPECT_EQ(reports, 1);
  return absl::Now() - start;
}

TEST(MockCluster, BootstrapListsOneLoopbackListenerPerBroker) {
  auto cluster = MockCluster::Create(3);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  EXPECT_EQ((*cluster)->broker_count(), 3);
  const std::vector<std::string> brokers = Brokers(**cluster);
  ASSERT_EQ(brokers.size(), 3u);
  for (const std::string& b : brokers) {
    EXPECT_EQ(b.rfind("127.0.0.1:", 0), 0u) << b;
    EXPECT_TRUE(Accepts(b)) << b;
  }
  EXPECT_EQ(MockCluster::Create(0).status().code(), absl::StatusCode::kInvalidArgument);
}

// Producing to an unknown topic auto-creates it with 4 partitions (the mock's
// default); a metadata request for all topics creates nothing.
TEST(MockCluster, ProducingAutoCreatesTopicsWithFourPartitions) {
  auto cluster = MockCluster::Create(3);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  EXPECT_EQ(Topics((*cluster)->bootstraps()).count("auto.created"), 0u);
  ProduceOne((*cluster)->bootstraps(), "auto.created");
  EXPECT_EQ(Topics((*cluster)->bootstraps())["auto.created"], 4);
}

TEST(MockCluster, CreateTopicSetsPartitionsAndRejectsDuplicates) {
  auto cluster = MockCluster::Create(3);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ASSERT_TRUE((*cluster)->CreateTopic("six", 6, 3).ok());
  EXPECT_EQ((*cluster)->CreateTopic("six", 2, 1).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ((*cluster)->CreateTopic("zero", 0, 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Topics((*cluster)->bootstraps())["six"], 6);
}

// A down broker refuses connections on its port; up listens on the same port again.
TEST(MockCluster, DownBrokerRefusesConnectionsUntilUp) {
  auto cluster = MockCluster::Create(3);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::vector<std::string> brokers = Brokers(**cluster);

  ASSERT_TRUE((*cluster)->SetBrokerDown(2).ok());
  EXPECT_TRUE(Accepts(brokers[0]));
  EXPECT_FALSE(Accepts(brokers[1]));
  ASSERT_TRUE((*cluster)->SetBrokerUp(2).ok());
  EXPECT_TRUE(Accepts(brokers[1]));

  ASSERT_TRUE((*cluster)->SetAllBrokersDown().ok());
  for (const std::string& b : brokers) EXPECT_FALSE(Accepts(b)) << b;
  ASSERT_TRUE((*cluster)->SetAllBrokersUp().ok());
  for (const std::string& b : brokers) EXPECT_TRUE(Accepts(b)) << b;

  EXPECT_EQ((*cluster)->SetBrokerDown(9).code(), absl::StatusCode::kNotFound);
}

TEST(MockCluster, RttDelaysEveryResponse) {
  auto cluster = MockCluster::Create(1);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ASSERT_TRUE((*cluster)->CreateTopic("slow", 1, 1).ok());
  ASSERT_TRUE((*cluster)->SetAllBrokersRtt(200).ok());
  // Connect, metadata, producer id and produce: each waits the RTT.
  EXPECT_GE(ProduceOne((*cluster)->bootstraps(), "slow"), absl::Milliseconds(400));
  EXPECT_EQ((*cluster)->SetBrokerRtt(1, -5).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace outboxd::kafka
