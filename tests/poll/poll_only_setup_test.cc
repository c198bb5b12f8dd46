// The polling relay "for databases without logical replication", set up and run on
// one: a private cluster with wal_level = replica, then docs/usage.md's "Polling without
// logical replication" procedure as written (`outboxd setup --poll-only`, `outboxd
// poll`, the real binary) relaying an event to the mock broker; and docs/usage.md's outbox
// DDL, for those who create the table themselves, served by `outboxd poll` as is.
#include <csignal>
#include <cstdio>
#include <fstream>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kafka/mock_cluster.h"
#include "support/child_process.h"
#include "support/doc_commands.h"
#include "support/kafka_collector.h"
#include "support/metrics_text.h"
#include "support/pg_fixture.h"
#include "support/private_cluster.h"
#include "support/wait_until.h"

namespace outboxd {
namespace {

using test::BinPath;
using test::ChildProcess;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kTopic[] = "pedido.confirmado";
// docs/usage.md, "Polling without logical replication".
constexpr char kReadmeProcedure[] = "outboxd setup --pg \"$PG\" --poll-only";
constexpr char kReadmeOutboxDdl[] = "CREATE TABLE outbox (";

// Runs `outboxd <args>` to completion: {exit code, log}.
std::pair<int, std::string> Outboxd(std::vector<std::string> args,
                                    const std::vector<std::string>& env = {}) {
  args.insert(args.begin(), BinPath("outboxd"));
  auto child = ChildProcess::Start(args, env);
  const int code = child->Wait(absl::Seconds(60)).value_or(-1);
  return {code, child->Log()};
}

// One wal_level = replica cluster for the suite (~2 s to start), a database per test.
class PollOnlySetup : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { cluster_ = new test::PrivateCluster("wal_level = replica"); }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override {
    db_ = test::TestDatabase::Create(cluster_->conninfo());
    auto broker = kafka::MockCluster::Create(1);
    ASSERT_TRUE(broker.ok()) << broker.status();
    broker_ = std::move(*broker);
    ASSERT_TRUE(broker_->CreateTopic(kTopic, 4, 1).ok());
    auto collector = test::KafkaCollector::Start(broker_->bootstraps(), {kTopic});
    ASSERT_TRUE(collector.ok()) << collector.status();
    collector_ = std::move(*collector);
    ASSERT_TRUE(collector_->WaitUntilAssigned(absl::Seconds(30)));
  }

  // The page's procedure: {setup --poll-only, poll}, placeholders filled in.
  std::vector<std::vector<std::string>> ReadmeCommands() {
    return test::DocCommands("docs/usage.md", kReadmeProcedure, db_->conninfo(),
                             broker_->bootstraps());
  }

  // Starts the page's `outboxd poll` line (its metrics on a free port, so the test can
  // see its first batch), inserts an event and expects it on the broker, marked
  // published in the table by the same relay.
  void ExpectPollServesTheTable(std::vector<std::string> poll_line) {
    poll_line.insert(poll_line.begin(), BinPath("outboxd"));
    poll_line.insert(poll_line.end(), {"--metrics", "127.0.0.1:0"});
    auto poll = ChildProcess::Start(poll_line);
    ASSERT_TRUE(WaitForMetric(*poll, "outboxd_poll_batches_total", 1, absl::Seconds(30)))
        << poll->Log();
    const std::string id = db_->Scalar(
        "INSERT INTO outbox (aggregate_id, tipo, payload) VALUES ('pedido-77', "
        "'pedido.confirmado', '{\"pedidoId\": 77}') RETURNING id");
    ASSERT_TRUE(collector_->WaitForCount(1, absl::Seconds(60))) << poll->Log();
    const test::CollectedMessage message = collector_->Messages().front();
    EXPECT_EQ(message.topic, kTopic);
    EXPECT_EQ(message.key, "pedido-77");
    EXPECT_EQ(message.value, R"({"pedidoId": 77})");
    EXPECT_EQ(message.Header("id"), id);
    EXPECT_TRUE(test::WaitUntil(absl::Seconds(60), [&] {
      return db_->Scalar("SELECT count(*) FROM outbox WHERE publicado_em IS NULL") == "0";
    })) << poll->Log();
    poll->Signal(SIGTERM);
    EXPECT_EQ(poll->Wait(absl::Seconds(60)), 0) << poll->Log();
  }

  static test::PrivateCluster* cluster_;
  std::unique_ptr<test::TestDatabase> db_;
  std::unique_ptr<kafka::MockCluster> broker_;
  std::unique_ptr<test::KafkaCollector> collector_;
};

test::PrivateCluster* PollOnlySetup::cluster_ = nullptr;

TEST_F(PollOnlySetup, SetsUpAndPollsAReplicaLevelDatabaseEndToEndAsTheReadmeSays) {
  const auto commands = ReadmeCommands();
  ASSERT_EQ(commands.size(), 2u);
  ASSERT_EQ(commands[0][0], "setup");
  ASSERT_EQ(commands[1][0], "poll");

  // Before: plain setup refuses (it needs logical decoding for the slot), creates
  // nothing, and names the set-up that works here.
  auto [refused, refusal] = Outboxd({"setup", "--pg", db_->conninfo()});
  EXPECT_EQ(refused, 2) << refusal;
  EXPECT_THAT(refusal, HasSubstr("wal_level is replica; set wal_level = logical in "
                                 "postgresql.conf and restart PostgreSQL, or use outboxd setup "
                                 "--poll-only for the polling relay"));
  EXPECT_EQ(db_->Scalar("SELECT to_regclass('outbox') IS NULL"), "t");

  auto [code, log] = Outboxd(commands[0]);
  ASSERT_EQ(code, 0) << log;
  EXPECT_THAT(log, HasSubstr("setup: table outbox_dead_letter"));
  EXPECT_THAT(log, HasSubstr("ready for outboxd poll: table outbox (no publication, no slot)"));
  EXPECT_EQ(db_->Scalar("SELECT count(*) FROM pg_publication"), "0");
  // The page's comment: its environment variable and config key work like every
  // flag's; idempotent.
  auto [by_env, env_log] = Outboxd({"setup", "--pg", db_->conninfo()}, {"OUTBOXD_POLL_ONLY=true"});
  EXPECT_EQ(by_env, 0) << env_log;
  EXPECT_THAT(env_log, Not(HasSubstr("setup: table")));
  const std::string config = ::testing::TempDir() + "/poll_only_setup.toml";
  std::ofstream(config) << "poll-only = true\n";
  auto [by_file, file_log] = Outboxd({"setup", "--pg", db_->conninfo(), "--config", config});
  EXPECT_EQ(by_file, 0) << file_log;
  std::remove(config.c_str());

  ExpectPollServesTheTable(commands[1]);
}

// docs/usage.md's "CREATE TABLE outbox (" block, run as written instead of setup: poll
// serves the table it makes, with nothing else created.
TEST_F(PollOnlySetup, TheReadmeOutboxDdlIsATablePollServesOnAReplicaLevelDatabase) {
  const std::vector<std::string> ddl = test::DocBlocks("docs/usage.md", "sql", kReadmeOutboxDdl);
  ASSERT_EQ(ddl.size(), 1u) << "docs/usage.md's outbox DDL for the polling relay";
  auto conn = db_->Connect();
  auto created = conn.Exec(ddl.front());
  ASSERT_TRUE(created.ok()) << created.status() << "\n" << ddl.front();

  const auto commands = ReadmeCommands();
  ASSERT_EQ(commands.size(), 2u);
  ASSERT_EQ(commands[1][0], "poll");
  ExpectPollServesTheTable(commands[1]);
}

}  // namespace
}  // namespace outboxd
