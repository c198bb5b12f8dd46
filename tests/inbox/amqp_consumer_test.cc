// inbox::Consumer from RabbitMQ (ConsumerOptions::amqp_url) against the real node of
// OUTBOXD_TEST_AMQP (scripts/rabbitmq, a vhost per test) and the real PostgreSQL,
// messages published by amqp::Publisher as the relay publishes them (message_id = the
// event id, an aggregate_id header): each processed once into the inbox, acked only
// after the inbox COMMIT, prefetch bounded, a handler error nacked and retried in
// queue order, and an ack lost after the COMMIT turned into a skipped redelivery.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "amqp/publisher.h"
#include "gtest/gtest.h"
#include "inbox/consumer.h"
#include "support/amqp_fixture.h"
#include "support/inbox_deliveries.h"
#include "support/set_up_database.h"

namespace outboxd::inbox {
namespace {

constexpr char kType[] = "pedido.confirmado";

std::string Id(int n) { return absl::StrFormat("%08d-6d8c-4a39-9c1e-3f1d2a7c9e10", n); }

class AmqpConsumerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    db_ = test::CreateSetUpDatabase();
    db_->Exec("CREATE TABLE efeitos (message_id uuid, pedido text)");
    broker_ = test::TestBroker::Create(test::VhostKind::kOwn);
  }

  ConsumerOptions Options() {
    return {.group_id = "billing",
            .topics = {kType},
            .amqp_url = broker_->url(),
            .exchange = broker_->Name("outboxd"),
            .queue = broker_->Name("billing")};
  }

  std::unique_ptr<Consumer> Start(Handler handler) {
    auto consumer = Consumer::Create(db_->Connect(), Options(), std::move(handler));
    EXPECT_TRUE(consumer.ok()) << consumer.status();
    return consumer.ok() ? std::move(*consumer) : nullptr;
  }

  // Publishes events n in [from, to) with publisher confirms, as the relay would;
  // the consumer's queue must be bound already (Start() binds it).
  void Publish(int from, int to) {
    std::vector<uint64_t> acked;
    auto pub =
        amqp::Publisher::Connect({.url = broker_->url(), .exchange = broker_->Name("outboxd")},
                                 [&](const amqp::Completion& c) {
                                   if (c.outcome == amqp::Outcome::kAcked) acked.push_back(c.tag);
                                 });
    ASSERT_TRUE(pub.ok()) << pub.status();
    for (int n = from; n < to; ++n) {
      const std::string id = Id(n);
      const std::string aggregate = absl::StrCat("pedido-", n % 3);
      const std::string body = absl::StrCat(R"({"pedidoId":")", aggregate, R"(","n":)", n, "}");
      const amqp::Header headers[] = {{"aggregate_id", aggregate}};
      ASSERT_TRUE((*pub)
                      ->Produce({.routing_key = kType,
                                 .body = body,
                                 .properties = {.message_id = id, .type = kType},
                                 .headers = headers,
                                 .tag = static_cast<uint64_t>(n)})
                      .ok());
    }
    ASSERT_TRUE((*pub)->Flush(absl::Seconds(30)).ok());
    ASSERT_EQ(acked.size(), static_cast<size_t>(to - from)) << "not every message confirmed";
  }

  // rabbitmqctl list_queues: "ready unacked" of the consumer's queue.
  std::string QueueCounts() {
    std::string out =
        broker_->Ctl({"list_queues", "-p", broker_->vhost(), "--no-table-headers", "--quiet",
                      "name", "messages_ready", "messages_unacknowledged"});
    const std::string name = broker_->Name("billing");
    size_t at = out.find(name + "\t");
    if (at == std::string::npos) return "no queue: " + out;
    at += name.size() + 1;
    std::string counts = out.substr(at, out.find('\n', at) - at);
    for (char& c : counts) c = c == '\t' ? ' ' : c;
    return counts;
  }

  int64_t Effects() { return test::Effects(*db_); }
  int64_t Marks() { return test::Marks(*db_); }

  std::unique_ptr<test::TestDatabase> db_;
  std::unique_ptr<test::TestBroker> broker_;
};

// 250 events, then 50 of them again (a relay's republish after a lost connection):
// 250 effects, 50 duplicates skipped, the queue empty, at most 100 unacked at a time.
TEST_F(AmqpConsumerTest, EveryMessageIsProcessedOnceIntoTheInbox) {
  auto consumer = Start(test::WriteEffect);
  Publish(0, 250);
  Publish(100, 150);
  std::vector<Delivery> got = test::PollDeliveries(*consumer, 300);
  ASSERT_EQ(got.size(), 300u);
  const test::ResultCounts counts = test::CountResults(got, kType);
  EXPECT_EQ(counts.processed, 250);
  EXPECT_EQ(counts.duplicates, 50);
  EXPECT_EQ(Effects(), 250);
  EXPECT_EQ(Marks(), 250);
  EXPECT_EQ(QueueCounts(), "0 0");
  EXPECT_NE(broker_
                ->Ctl({"list_channels", "-p", broker_->vhost(), "--no-table-headers", "--quiet",
                       "prefetch_count"})
                .find("100"),
            std::string::npos)
      << "basic.qos 100 expected on the consumer's channel";
}

// While the handler runs (inside the inbox transaction) the message is still unacked
// on the broker; after PollOnce returns it is gone.
TEST_F(AmqpConsumerTest, AckIsSentOnlyAfterTheInboxCommit) {
  std::string during;
  auto consumer = Start([&](pg::Connection& conn, const Message& m) {
    during = QueueCounts();
    return test::WriteEffect(conn, m);
  });
  Publish(0, 1);
  std::vector<Delivery> got = test::PollDeliveries(*consumer, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].result, Delivery::Result::kProcessed);
  EXPECT_EQ(during, "0 1") << "ready, unacked while the handler ran";
  EXPECT_EQ(QueueCounts(), "0 0");
}

// The first event fails once: it is nacked back to the queue and, after the backoff,
// processed before the two events behind it (which were prefetched already).
TEST_F(AmqpConsumerTest, HandlerErrorIsNackedAndRetriedBeforeTheMessagesBehindIt) {
  auto consumer = Start(test::WriteEffectFailingOnce());
  Publish(0, 3);
  std::vector<Delivery> got = test::PollDeliveries(*consumer, 4);
  test::ExpectFirstRetriedBeforeTheRest(got, {Id(0), Id(1), Id(2)}, *db_);
  EXPECT_EQ(QueueCounts(), "0 0");
}

// The crash window between the inbox COMMIT and the ack, provoked: the broker closes
// the consumer's connection while the handler runs, so the COMMIT succeeds and the
// ack never counts. The broker delivers the message again and the inbox skips it:
// one effect.
TEST_F(AmqpConsumerTest, AckLostAfterTheInboxCommitYieldsARedeliveryNotASecondEffect) {
  int calls = 0;
  auto consumer = Start([&](pg::Connection& conn, const Message& m) {
    if (++calls == 1) {
      broker_->Ctl({"close_all_connections", "-p", broker_->vhost(), "test: crash before ack"});
    }
    return test::WriteEffect(conn, m);
  });
  Publish(0, 1);
  std::vector<Delivery> got = test::PollDeliveries(*consumer, 2);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].result, Delivery::Result::kProcessed);
  EXPECT_EQ(got[1].result, Delivery::Result::kDuplicate);
  EXPECT_EQ(got[1].message.id, got[0].message.id);
  EXPECT_TRUE(got[1].offset_commit.ok()) << got[1].offset_commit;
  EXPECT_EQ(Effects(), 1);
  EXPECT_EQ(Marks(), 1);
  EXPECT_EQ(QueueCounts(), "0 0");
}

}  // namespace
}  // namespace outboxd::inbox
