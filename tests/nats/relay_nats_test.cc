// The CDC relay (relay::Relay, in process) publishing to NATS JetStream through
// nats::Sink, as `outboxd run --sink nats` does (the binary: cli_nats_test.cc): a real
// PostgreSQL (OUTBOXD_TEST_PG) and a real nats-server (OUTBOXD_TEST_NATS), the stream
// read back with a JetStream pull consumer.
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/stop_signal.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nats/sink.h"
#include "relay/relay.h"
#include "support/jetstream_client.h"
#include "support/nats_test.h"
#include "support/set_up_database.h"
#include "support/wait_until.h"

namespace outboxd::test {
namespace {

using ::testing::HasSubstr;

class RelayNatsTest : public NatsTest {
 protected:
  void SetUpWithServer() override { db_ = CreateSetUpDatabase(); }

  void TearDown() override { Stop(); }

  void Start(const std::string& url = "") {
    relay::RelayOptions options;
    options.conninfo = db_->conninfo();
    options.slot = db_->name();
    options.feedback_interval = absl::Seconds(1);
    options.make_sink = sink::FactoryOf(
        &nats::NewSink, nats::SinkOptions{.url = url.empty() ? url_ : url,
                                          .stream = {.name = stream_, .subjects = {prefix_ + ".>"}},
                                          .ack_wait = absl::Seconds(1)});
    relay_ = std::make_unique<relay::Relay>(options, &stats_, &stop_);
    thread_ = std::thread([this] { status_ = relay_->Run(); });
  }

  void Stop() {
    if (!thread_.joinable()) return;
    stop_.Notify();
    thread_.join();
    EXPECT_TRUE(status_.ok()) << status_;
  }

  bool WaitForCount(JetStreamClient& reader, uint64_t n,
                    absl::Duration timeout = absl::Seconds(60)) {
    return WaitUntil(
        timeout, [&] { return Count(reader) >= n; }, absl::Milliseconds(50));
  }

  uint64_t Count(JetStreamClient& reader) {
    std::optional<StreamSummary> stream = reader.Stream(stream_);
    return stream.has_value() ? stream->messages : 0;
  }

  std::unique_ptr<TestDatabase> db_;
  relay::RelayStats stats_;
  StopSignal stop_;
  std::unique_ptr<relay::Relay> relay_;
  std::thread thread_;
  absl::Status status_;
};

TEST_F(RelayNatsTest, EveryCommittedEventArrivesOnceInOrderPerAggregateRolledBackNever) {
  const std::string type = prefix_ + ".order.created";
  db_->Exec(
      absl::StrCat("INSERT INTO outbox (aggregate_id, tipo, payload) SELECT 'a' || (g % 5), '",
                   type, "', jsonb_build_object('n', g) FROM generate_series(1, 150) g"));
  Start();
  db_->Exec(
      absl::StrCat("BEGIN; INSERT INTO outbox (aggregate_id, tipo, payload) VALUES ('rolled', '",
                   type, "', '{\"n\": 0}'); ROLLBACK"));
  db_->Exec(
      absl::StrCat("INSERT INTO outbox (aggregate_id, tipo, payload) SELECT 'a' || (g % 5), '",
                   type, "', jsonb_build_object('n', g) FROM generate_series(151, 300) g"));
  JetStreamClient reader(url_);
  ASSERT_TRUE(WaitForCount(reader, 300)) << Count(reader) << " of 300 in the stream";
  Stop();

  std::vector<StoredMessage> stored = reader.ReadAll(stream_, prefix_ + ".>");
  ASSERT_EQ(stored.size(), 300u);
  std::map<std::string, std::string> id_of_n;
  pg::Result rows = db_->Exec("SELECT payload->>'n', id::text FROM outbox");
  for (int i = 0; i < rows.rows(); ++i) id_of_n[std::string(rows.Get(i, 0))] = rows.Get(i, 1);
  std::map<std::string, int> last_n;
  std::set<std::string> ids;
  for (const StoredMessage& m : stored) {
    const std::string aggregate = m.Header("aggregate_id");
    EXPECT_NE(aggregate, "rolled");
    const std::string n =
        m.value.substr(m.value.find(':') + 1, m.value.find('}') - m.value.find(':') - 1);
    const int number = std::stoi(n);
    EXPECT_GT(number, last_n[aggregate]) << "aggregate " << aggregate << " out of order";
    last_n[aggregate] = number;
    EXPECT_TRUE(ids.insert(m.Header("id")).second) << "stored twice: " << m.Header("id");
    EXPECT_EQ(m.Header("Nats-Msg-Id"), m.Header("id"));
    EXPECT_EQ(m.Header("id"), id_of_n[std::to_string(number)]);
    EXPECT_EQ(m.Header("type"), type);
    EXPECT_TRUE(m.headers.contains("created_at"));
    EXPECT_TRUE(m.headers.contains("lsn"));
  }
}

// kill -9 of the NATS server while the relay publishes events written continuously,
// then a restart on its file store: every event once in the stream (the lost PubAcks'
// messages published again and dropped by Nats-Msg-Id), in order per aggregate.
TEST_F(RelayNatsTest, KillNineOfTheServerLosesNothingAndDuplicatesNothing) {
  PrivateNatsServer server;
  const std::string type = prefix_ + ".order.created";
  Start(server.url());
  constexpr int kBatches = 40;
  constexpr int kPerBatch = 100;
  std::thread writer([&] {
    for (int b = 0; b < kBatches; ++b) {
      db_->Exec(
          absl::StrCat("INSERT INTO outbox (aggregate_id, tipo, payload) SELECT 'a' || (g % 20), '",
                       type, "', jsonb_build_object('n', g) FROM generate_series(",
                       b * kPerBatch + 1, ", ", (b + 1) * kPerBatch, ") g"));
      absl::SleepFor(absl::Milliseconds(20));  // written continuously, not at once
    }
  });
  JetStreamClient watcher(server.url());
  EXPECT_TRUE(WaitForCount(watcher, 500)) << Count(watcher);
  ASSERT_TRUE(server.Kill());
  ASSERT_TRUE(server.Restart());  // the outage: as long as the restart takes
  writer.join();
  JetStreamClient reader(server.url());
  ASSERT_TRUE(WaitForCount(reader, kBatches * kPerBatch)) << Count(reader);
  Stop();

  std::vector<StoredMessage> stored = reader.ReadAll(stream_, prefix_ + ".>");
  EXPECT_EQ(stored.size(), static_cast<size_t>(kBatches * kPerBatch)) << "duplicates stored";
  std::set<std::string> ids;
  std::map<std::string, int> last_n;
  for (const StoredMessage& m : stored) {
    EXPECT_TRUE(ids.insert(m.Header("id")).second) << "stored twice: " << m.Header("id");
    const int n = std::stoi(m.value.substr(m.value.find(':') + 1));
    const std::string aggregate = m.Header("aggregate_id");
    EXPECT_GT(n, last_n[aggregate]) << "aggregate " << aggregate << " out of order";
    last_n[aggregate] = n;
  }
  EXPECT_EQ(db_->Scalar("SELECT count(*) FROM outbox"), std::to_string(ids.size())) << "lost";
}

// An event whose subject no stream takes is a dead letter with the server's reason;
// its aggregate's next event follows it into the dead-letter table; others flow.
TEST_F(RelayNatsTest, ASubjectNoStreamTakesIsDeadLetteredWithItsAggregatesFollowers) {
  const std::string ok = prefix_ + ".order.created";
  const std::string nowhere = "nowhere_" + prefix_ + ".order.created";
  db_->Exec(absl::StrCat("INSERT INTO outbox (aggregate_id, tipo, payload) VALUES ", "('u', '",
                         nowhere, "', '{\"n\": 1}'), ('u', '", ok, "', '{\"n\": 2}'), ", "('x', '",
                         ok, "', '{\"n\": 3}')"));
  Start();
  JetStreamClient reader(url_);
  ASSERT_TRUE(WaitForCount(reader, 1));
  WaitUntil(absl::Seconds(60),
            [&] { return db_->Scalar("SELECT count(*) FROM outbox_dead_letter") == "2"; });
  Stop();
  ASSERT_EQ(db_->Scalar("SELECT count(*) FROM outbox_dead_letter"), "2");
  EXPECT_THAT(db_->Scalar("SELECT error FROM outbox_dead_letter WHERE topic = '" + nowhere + "'"),
              HasSubstr("no JetStream stream takes subject " + nowhere));
  std::vector<StoredMessage> stored = reader.ReadAll(stream_, prefix_ + ".>");
  ASSERT_EQ(stored.size(), 1u);
  EXPECT_EQ(stored[0].Header("aggregate_id"), "x");
}

}  // namespace
}  // namespace outboxd::test
