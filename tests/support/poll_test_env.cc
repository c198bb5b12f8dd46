#include "support/poll_test_env.h"

#include <algorithm>

#include "gtest/gtest.h"

namespace outboxd::test {

PollEnv::PollEnv(const std::vector<std::string>& topics, int brokers,
                 const std::string& schema_sql) {
  db_ = TestDatabase::Create();
  db_->Exec(schema_sql);
  auto cluster = kafka::MockCluster::Create(brokers);
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  cluster_ = std::move(*cluster);
  for (const std::string& topic : topics) {
    EXPECT_TRUE(cluster_->CreateTopic(topic, 4, std::min(brokers, 3)).ok());
  }
  auto collector = KafkaCollector::Start(cluster_->bootstraps(), topics);
  EXPECT_TRUE(collector.ok()) << collector.status();
  collector_ = std::move(*collector);
  EXPECT_TRUE(collector_->WaitUntilAssigned(absl::Seconds(30)));
}

std::string PollEnv::Insert(const std::string& aggregate, const std::string& type,
                            const std::string& payload_json) {
  pg::Connection conn = db_->Connect();
  auto r = conn.ExecParams(
      "INSERT INTO outbox (aggregate_id, tipo, payload) VALUES ($1, $2, $3) RETURNING id",
      {aggregate, type, payload_json});
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? std::string(r->Get(0, 0)) : "";
}

int PollEnv::Pending() {
  return std::stoi(db_->Scalar("SELECT count(*) FROM outbox WHERE publicado_em IS NULL"));
}

}  // namespace outboxd::test
