// Shared by the polling relay's tests: a fresh database holding the default outbox
// table (created by SQL, not `outboxd setup`: the polling relay is for databases
// without logical replication, so no slot), an in-process mock Kafka cluster and a
// collector reading every partition of the topics.
#ifndef OUTBOXD_TESTS_SUPPORT_POLL_TEST_ENV_H_
#define OUTBOXD_TESTS_SUPPORT_POLL_TEST_ENV_H_

#include <memory>
#include <string>
#include <vector>

#include "kafka/mock_cluster.h"
#include "support/kafka_collector.h"
#include "support/outbox_schema.h"
#include "support/pg_fixture.h"

namespace outboxd::test {

class PollEnv {
 public:
  // `schema_sql` creates the outbox table; the topics get 4 partitions each.
  PollEnv(const std::vector<std::string>& topics, int brokers = 1,
          const std::string& schema_sql = kOutboxSchema);

  TestDatabase& db() { return *db_; }
  kafka::MockCluster& cluster() { return *cluster_; }
  KafkaCollector& collector() { return *collector_; }

  // Inserts one event into `outbox`; returns its id.
  std::string Insert(const std::string& aggregate, const std::string& type,
                     const std::string& payload_json = R"({"pedidoId": "77"})");
  // publicado_em IS NULL rows of `outbox`.
  int Pending();

 private:
  std::unique_ptr<TestDatabase> db_;
  std::unique_ptr<kafka::MockCluster> cluster_;
  std::unique_ptr<KafkaCollector> collector_;
};

}  // namespace outboxd::test

#endif  // OUTBOXD_TESTS_SUPPORT_POLL_TEST_ENV_H_
