// The polling relay "for databases without logical replication", set up and run on
// one: a private cluster with wal_level = replica, `outboxd setup --poll-only`, then
// `outboxd poll` (the real binary) relaying an event to the mock broker.
#include <csignal>
#include <cstdio>
#include <fstream>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kafka/mock_cluster.h"
#include "support/child_process.h"
#include "support/kafka_collector.h"
#include "support/pg_fixture.h"
#include "support/private_cluster.h"

namespace outboxd {
namespace {

using test::BinPath;
using test::ChildProcess;
using ::testing::HasSubstr;
using ::testing::Not;

// Runs `outboxd <args>` to completion: {exit code, log}.
std::pair<int, std::string> Outboxd(std::vector<std::string> args,
                                    const std::vector<std::string>& env = {}) {
  args.insert(args.begin(), BinPath("outboxd"));
  auto child = ChildProcess::Start(args, env);
  const int code = child->Wait(absl::Seconds(60)).value_or(-1);
  return {code, child->Log()};
}

// One test: each starts a cluster of its own (~2 s).
TEST(PollOnlySetup, SetsUpAndPollsAReplicaLevelDatabaseEndToEnd) {
  test::PrivateCluster cluster("wal_level = replica");
  auto db = test::TestDatabase::Create(cluster.conninfo());

  // Before: setup refuses (it needs logical decoding for the slot), creates nothing,
  // and now names the set-up that works here.
  auto [refused, refusal] = Outboxd({"setup", "--pg", db->conninfo()});
  EXPECT_EQ(refused, 2) << refusal;
  EXPECT_THAT(refusal, HasSubstr("wal_level is replica; set wal_level = logical in "
                                 "postgresql.conf and restart PostgreSQL, or use outboxd setup "
                                 "--poll-only for the polling relay"));
  EXPECT_EQ(db->Scalar("SELECT to_regclass('outbox') IS NULL"), "t");

  auto [code, log] = Outboxd({"setup", "--pg", db->conninfo(), "--poll-only"});
  ASSERT_EQ(code, 0) << log;
  EXPECT_THAT(log, HasSubstr("setup: table outbox_dead_letter"));
  EXPECT_THAT(log, HasSubstr("ready for outboxd poll: table outbox (no publication, no slot)"));
  EXPECT_EQ(db->Scalar("SELECT count(*) FROM pg_publication"), "0");
  // Its environment variable and config key work like every flag's; idempotent.
  auto [by_env, env_log] = Outboxd({"setup", "--pg", db->conninfo()}, {"OUTBOXD_POLL_ONLY=true"});
  EXPECT_EQ(by_env, 0) << env_log;
  EXPECT_THAT(env_log, Not(HasSubstr("setup: table")));
  const std::string config = ::testing::TempDir() + "/poll_only_setup.toml";
  std::ofstream(config) << "poll-only = true\n";
  auto [by_file, file_log] = Outboxd({"setup", "--pg", db->conninfo(), "--config", config});
  EXPECT_EQ(by_file, 0) << file_log;
  std::remove(config.c_str());

  auto broker = kafka::MockCluster::Create(1);
  ASSERT_TRUE(broker.ok()) << broker.status();
  ASSERT_TRUE((*broker)->CreateTopic("pedido.confirmado", 4, 1).ok());
  auto collector = test::KafkaCollector::Start((*broker)->bootstraps(), {"pedido.confirmado"});
  ASSERT_TRUE(collector.ok()) << collector.status();
  ASSERT_TRUE((*collector)->WaitUntilAssigned(absl::Seconds(30)));
  auto poll = ChildProcess::Start({BinPath("outboxd"), "poll", "--pg", db->conninfo(), "--brokers",
                                   (*broker)->bootstraps(), "--interval", "100ms"});
  ASSERT_TRUE(poll->WaitForLog("polling table", absl::Seconds(30))) << poll->Log();
  const std::string id = db->Scalar(
      "INSERT INTO outbox (aggregate_id, tipo, payload) VALUES ('pedido-77', "
      "'pedido.confirmado', '{\"pedidoId\": 77}') RETURNING id");
  ASSERT_TRUE((*collector)->WaitForCount(1, absl::Seconds(60))) << poll->Log();
  const test::CollectedMessage message = (*collector)->Messages().front();
  EXPECT_EQ(message.topic, "pedido.confirmado");
  EXPECT_EQ(message.key, "pedido-77");
  EXPECT_EQ(message.value, R"({"pedidoId": 77})");
  EXPECT_EQ(message.Header("id"), id);

  // Marked published by the same relay.
  absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (db->Scalar("SELECT count(*) FROM outbox WHERE publicado_em IS NULL") != "0" &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_EQ(db->Scalar("SELECT count(*) FROM outbox WHERE publicado_em IS NULL"), "0");
  poll->Signal(SIGTERM);
  EXPECT_EQ(poll->Wait(absl::Seconds(60)), 0) << poll->Log();
}

}  // namespace
}  // namespace outboxd
