// inbox::Consumer against librdkafka's mock cluster (a real Kafka-protocol broker over
// TCP, consumer groups included) and the real PostgreSQL: duplicates skipped with
// their offsets committed, offsets committed only after the database COMMIT, failed
// messages retried, messages without an id never skipped, and an offset commit lost
// after the database COMMIT turning into a duplicate, not a second effect.
#include "inbox/consumer.h"

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "kafka/publisher.h"
#include "support/inbox_deliveries.h"
#include "support/set_up_database.h"

namespace outboxd::inbox {
namespace {

constexpr char kTopic[] = "pedido.confirmado";
constexpr char kGroup[] = "billing";
constexpr char kId1[] = "11111111-6d8c-4a39-9c1e-3f1d2a7c9e10";
constexpr char kId2[] = "22222222-6d8c-4a39-9c1e-3f1d2a7c9e10";
constexpr int64_t kNoOffset = RD_KAFKA_OFFSET_INVALID;

// A one-broker mock cluster of our own: the shared kafka::MockCluster cannot inject
// OffsetCommit errors.
class Broker {
 public:
  Broker() {
    rd_kafka_conf_t* conf = rd_kafka_conf_new();
    char errstr[512];
    rd_kafka_conf_set(conf, "log_level", "4", errstr, sizeof(errstr));
    owner_ = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
    mock_ = rd_kafka_mock_cluster_new(owner_, 1);
    rd_kafka_mock_topic_create(mock_, kTopic, 2, 1);
  }
  ~Broker() {
    rd_kafka_mock_cluster_destroy(mock_);
    rd_kafka_destroy(owner_);
  }
  std::string bootstraps() const { return rd_kafka_mock_cluster_bootstraps(mock_); }
  // The next `count` OffsetCommit requests fail (a non-retriable error, so the
  // synchronous commit reports it at once).
  void FailOffsetCommits(int count) {
    std::vector<rd_kafka_resp_err_t> errors(count, RD_KAFKA_RESP_ERR_OFFSET_METADATA_TOO_LARGE);
    rd_kafka_mock_push_request_errors_array(mock_, /*OffsetCommit*/ 8, count, errors.data());
  }

 private:
  rd_kafka_t* owner_;
  rd_kafka_mock_cluster_t* mock_;
};

class ConsumerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    db_ = test::CreateSetUpDatabase();
    db_->Exec("CREATE TABLE efeitos (message_id uuid, pedido text)");
  }

  // Same key, so every message lands on one partition in produce order.
  void Produce(const std::string& value, std::optional<std::string> id) {
    auto publisher = kafka::Publisher::Create({.brokers = broker_.bootstraps()}, nullptr);
    ASSERT_TRUE(publisher.ok()) << publisher.status();
    std::vector<kafka::Header> headers;
    if (id) headers.push_back({"id", *id});
    ASSERT_TRUE(
        (*publisher)
            ->Produce({.topic = kTopic, .key = "pedido-1", .value = value, .headers = headers})
            .ok());
    ASSERT_TRUE((*publisher)->Flush(absl::Seconds(10)).ok());
  }

  // The mock lets a new member in only after the session timeout even when the
  // previous one left cleanly (a real broker rebalances at once): keep it short.
  std::unique_ptr<Consumer> Start(Handler handler) {
    ConsumerOptions options{.brokers = broker_.bootstraps(),
                            .group_id = kGroup,
                            .topics = {kTopic},
                            .properties = {{"session.timeout.ms", "6000"}}};
    auto consumer = Consumer::Create(db_->Connect(), options, std::move(handler));
    EXPECT_TRUE(consumer.ok()) << consumer.status();
    return consumer.ok() ? std::move(*consumer) : nullptr;
  }

  // The group's committed offset on the partition, read by another client.
  int64_t Committed(int32_t partition) {
    rd_kafka_conf_t* conf = rd_kafka_conf_new();
    char errstr[512];
    rd_kafka_conf_set(conf, "bootstrap.servers", broker_.bootstraps().c_str(), errstr,
                      sizeof(errstr));
    rd_kafka_conf_set(conf, "group.id", kGroup, errstr, sizeof(errstr));
    rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr));
    rd_kafka_topic_partition_list_t* list = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(list, kTopic, partition);
    rd_kafka_resp_err_t err = rd_kafka_committed(rk, list, 10000);
    int64_t offset = err ? -2 : list->elems[0].offset;
    rd_kafka_topic_partition_list_destroy(list);
    rd_kafka_destroy_flags(rk, RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
    return offset;
  }

  int64_t Effects() { return test::Effects(*db_); }
  int64_t Marks() { return test::Marks(*db_); }

  Broker broker_;
  std::unique_ptr<test::TestDatabase> db_;
};

TEST_F(ConsumerTest, DuplicateDeliveryIsSkippedAndItsOffsetCommitted) {
  Produce(R"({"pedidoId":"pedido-1"})", kId1);
  Produce(R"({"pedidoId":"pedido-1"})", kId1);  // the relay re-sent it after a crash
  Produce(R"({"pedidoId":"pedido-2"})", kId2);
  auto consumer = Start(test::WriteEffect);
  std::vector<Delivery> got = test::PollDeliveries(*consumer, 3);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].result, Delivery::Result::kProcessed);
  EXPECT_EQ(got[1].result, Delivery::Result::kDuplicate);
  EXPECT_EQ(got[2].result, Delivery::Result::kProcessed);
  EXPECT_EQ(got[1].message.id, kId1);
  for (const Delivery& d : got) EXPECT_TRUE(d.offset_commit.ok()) << d.offset_commit;
  EXPECT_EQ(Effects(), 2);
  EXPECT_EQ(Committed(got[2].message.partition), got[2].message.offset + 1);
}

TEST_F(ConsumerTest, OffsetIsCommittedOnlyAfterTheDatabaseCommit) {
  Produce(R"({"pedidoId":"pedido-1"})", kId1);
  Produce(R"({"pedidoId":"pedido-2"})", kId2);
  std::vector<std::pair<int64_t, int64_t>> seen;  // (message offset, committed in handler)
  auto consumer = Start([&](pg::Connection& conn, const Message& m) {
    seen.emplace_back(m.offset, Committed(m.partition));
    return test::WriteEffect(conn, m);
  });
  std::vector<Delivery> got = test::PollDeliveries(*consumer, 2);
  ASSERT_EQ(got.size(), 2u);
  ASSERT_EQ(seen.size(), 2u);
  // While the handler runs, its transaction is open: nothing of it may be committed
  // to Kafka yet, while the previous message's offset already is.
  EXPECT_EQ(seen[0].second, kNoOffset);
  EXPECT_EQ(seen[1].second, seen[0].first + 1);
  EXPECT_EQ(Committed(got[1].message.partition), got[1].message.offset + 1);
}

TEST_F(ConsumerTest, HandlerErrorRollsBackTheMarkAndTheRetrySucceeds) {
  Produce(R"({"pedidoId":"pedido-1"})", kId1);
  auto consumer = Start(test::WriteEffectFailingOnce());
  std::vector<Delivery> first = test::PollDeliveries(*consumer, 1);
  ASSERT_EQ(first.size(), 1u);
  const absl::Time failed_at = absl::Now();
  EXPECT_EQ(first[0].result, Delivery::Result::kFailed);
  EXPECT_EQ(first[0].error.message(), "handler failed: invoicing API down");
  EXPECT_EQ(Marks(), 0);
  EXPECT_EQ(Effects(), 0);
  EXPECT_EQ(Committed(first[0].message.partition), kNoOffset);

  std::vector<Delivery> retry = test::PollDeliveries(*consumer, 1);
  ASSERT_EQ(retry.size(), 1u);
  EXPECT_GE(absl::Now() - failed_at, absl::Milliseconds(90)) << "retried without backoff";
  EXPECT_EQ(retry[0].result, Delivery::Result::kProcessed);
  EXPECT_EQ(retry[0].attempt, 2);
  EXPECT_EQ(retry[0].message.offset, first[0].message.offset);
  EXPECT_EQ(Marks(), 1);
  EXPECT_EQ(Effects(), 1);
  EXPECT_EQ(Committed(retry[0].message.partition), retry[0].message.offset + 1);
}

// Without an id the inbox cannot tell a repeat: the consumer reports the message,
// commits nothing, and reports it again rather than moving on past it.
TEST_F(ConsumerTest, MessageWithoutIdIsReportedAndNeverSkipped) {
  Produce(R"({"pedidoId":"pedido-1"})", std::nullopt);
  Produce(R"({"pedidoId":"pedido-2"})", kId2);
  auto consumer = Start(test::WriteEffect);
  for (int round = 0; round < 2; ++round) {
    absl::Status error;
    std::vector<Delivery> got = test::PollDeliveries(*consumer, 1, &error);
    EXPECT_TRUE(got.empty());
    EXPECT_EQ(error.code(), absl::StatusCode::kFailedPrecondition) << error;
    EXPECT_NE(error.message().find("@0 has no \"id\" header"), absl::string_view::npos) << error;
  }
  EXPECT_EQ(Effects(), 0) << "the message behind it must wait";
  EXPECT_EQ(Committed(0), kNoOffset);
  EXPECT_EQ(Committed(1), kNoOffset);
}

// The crash window between the two commits, provoked: the database COMMIT succeeds,
// the offset commit fails. The next member of the group gets the message again and
// the inbox turns it into a duplicate: one effect, and this time the offset commits.
TEST_F(ConsumerTest, LostOffsetCommitAfterTheDatabaseCommitYieldsADuplicateNotASecondEffect) {
  Produce(R"({"pedidoId":"pedido-1"})", kId1);
  auto consumer = Start(test::WriteEffect);
  broker_.FailOffsetCommits(1);
  std::vector<Delivery> got = test::PollDeliveries(*consumer, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].result, Delivery::Result::kProcessed);
  EXPECT_FALSE(got[0].offset_commit.ok());
  EXPECT_EQ(Committed(got[0].message.partition), kNoOffset);
  consumer.reset();  // leaves the group

  auto next = Start(test::WriteEffect);
  std::vector<Delivery> again = test::PollDeliveries(*next, 1);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].result, Delivery::Result::kDuplicate);
  EXPECT_EQ(again[0].message.offset, got[0].message.offset);
  EXPECT_TRUE(again[0].offset_commit.ok()) << again[0].offset_commit;
  EXPECT_EQ(Effects(), 1);
  EXPECT_EQ(Committed(again[0].message.partition), again[0].message.offset + 1);
}

}  // namespace
}  // namespace outboxd::inbox
