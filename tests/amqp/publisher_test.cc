// amqp::Publisher against a real RabbitMQ node (scripts/rabbitmq), each test in a
// vhost of its own; pika (amqp_peer.py) reads back what arrived.
#include "amqp/publisher.h"

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "support/amqp_fixture.h"
#include "support/wait_until.h"

namespace outboxd::amqp {
namespace {

using ::outboxd::test::AmqpMessage;
using ::outboxd::test::TestBroker;
using ::outboxd::test::VhostKind;
using ::testing::HasSubstr;

struct Done {
  uint64_t tag;
  Outcome outcome;
  std::string reason;
};

class AmqpPublisherTest : public ::testing::Test {
 protected:
  void SetUp() override { broker_ = TestBroker::Create(); }

  std::unique_ptr<Publisher> Connect(const std::string& exchange,
                                     ExchangeMode mode = ExchangeMode::kDeclare) {
    PublisherOptions options{.url = broker_->url(),
                             .exchange = broker_->Name(exchange),
                             .exchange_mode = mode,
                             .connection_name = broker_->Name("publisher")};
    auto publisher = Publisher::Connect(options, [this](const Completion& c) {
      done_.push_back({c.tag, c.outcome, std::string(c.reason)});
    });
    EXPECT_TRUE(publisher.ok()) << publisher.status();
    return publisher.ok() ? std::move(*publisher) : nullptr;
  }

  static absl::Status Send(Publisher& pub, const std::string& key, const std::string& body,
                           uint64_t tag) {
    std::string id = absl::StrCat(tag);
    return pub.Produce({.routing_key = key,
                        .body = body,
                        .properties = {.message_id = id, .type = "test.event"},
                        .tag = tag});
  }

  // Polls until `n` completions arrived (or a generous deadline passed).
  void AwaitCompletions(Publisher& pub, size_t n) {
    ASSERT_TRUE(test::WaitUntil(
        absl::Seconds(60), [&] { return done_.size() >= n; },
        [&] { pub.Poll(absl::Milliseconds(100)); }))
        << done_.size() << " of " << n;
  }

  std::map<Outcome, int> CountOutcomes() const {
    std::map<Outcome, int> counts;
    for (const Done& d : done_) ++counts[d.outcome];
    return counts;
  }

  std::unique_ptr<TestBroker> broker_;
  std::vector<Done> done_;
};

TEST_F(AmqpPublisherTest, DeliversEveryMessageInOrderWithItsPropertiesAndHeaders) {
  broker_->BindQueue(broker_->Name("orders"), broker_->Name("orders_q"), "order.#");
  auto pub = Connect("orders");
  ASSERT_NE(pub, nullptr);
  constexpr int kMessages = 300;
  const absl::Time created = absl::FromUnixSeconds(1767225600);  // 2026-01-01
  for (int i = 1; i <= kMessages; ++i) {
    std::string id = absl::StrCat(i);
    std::string body = absl::StrCat("{\"n\":", i, "}");
    std::string aggregate = absl::StrCat(i % 7);
    Header headers[] = {{"aggregate_id", aggregate}, {"lsn", "0/16B3748"}};
    ASSERT_TRUE(pub->Produce({.routing_key = "order.confirmed",
                              .body = body,
                              .properties = {.message_id = id,
                                             .type = "order.confirmed",
                                             .content_type = "application/json",
                                             .timestamp = created + absl::Seconds(i)},
                              .headers = headers,
                              .tag = static_cast<uint64_t>(i)})
                    .ok());
  }
  ASSERT_TRUE(pub->Flush(absl::Seconds(60)).ok());
  ASSERT_EQ(done_.size(), static_cast<size_t>(kMessages));
  EXPECT_EQ(CountOutcomes()[Outcome::kAcked], kMessages);
  EXPECT_EQ(pub->InFlight(), 0);
  EXPECT_EQ(pub->InFlightBytes(), 0u);

  std::vector<AmqpMessage> got = broker_->Drain(broker_->Name("orders_q"));
  ASSERT_EQ(got.size(), static_cast<size_t>(kMessages));
  for (int i = 1; i <= kMessages; ++i) {
    const AmqpMessage& m = got[i - 1];
    SCOPED_TRACE(i);
    EXPECT_EQ(m.body, absl::StrCat("{\"n\":", i, "}"));
    EXPECT_EQ(m.routing_key, "order.confirmed");
    EXPECT_EQ(m.message_id, absl::StrCat(i));
    EXPECT_EQ(m.type, "order.confirmed");
    EXPECT_EQ(m.content_type, "application/json");
    EXPECT_EQ(m.timestamp, absl::StrCat(1767225600 + i));
    EXPECT_EQ(m.delivery_mode, "2");
    EXPECT_EQ(m.headers, absl::StrCat("aggregate_id=", i % 7, ";lsn=0/16B3748"));
  }
}

TEST_F(AmqpPublisherTest, CompletesEveryMessageExactlyOnceAcrossMultipleAcks) {
  broker_->BindQueue(broker_->Name("bulk"), broker_->Name("bulk_q"), "#");
  auto pub = Connect("bulk");
  ASSERT_NE(pub, nullptr);
  // Published without polling in between, so the broker confirms in batches
  // (basic.ack with multiple=true covering many tags).
  constexpr int kMessages = 5000;
  for (int i = 1; i <= kMessages; ++i) ASSERT_TRUE(Send(*pub, "k", "x", i).ok());
  EXPECT_EQ(pub->InFlight(), kMessages);
  ASSERT_TRUE(pub->Flush(absl::Seconds(120)).ok());
  std::map<uint64_t, int> seen;
  for (const Done& d : done_) {
    EXPECT_EQ(d.outcome, Outcome::kAcked) << d.tag << " " << d.reason;
    ++seen[d.tag];
  }
  ASSERT_EQ(seen.size(), static_cast<size_t>(kMessages));
  for (const auto& [tag, count] : seen) EXPECT_EQ(count, 1) << tag;
  EXPECT_EQ(broker_->Drain(broker_->Name("bulk_q")).size(), static_cast<size_t>(kMessages));
}

TEST_F(AmqpPublisherTest, ReportsAMessageNoQueueIsBoundForAsUnroutable) {
  broker_->BindQueue(broker_->Name("routes"), broker_->Name("routes_q"), "bound.key");
  auto pub = Connect("routes");
  ASSERT_NE(pub, nullptr);
  ASSERT_TRUE(Send(*pub, "bound.key", "a", 1).ok());
  ASSERT_TRUE(Send(*pub, "nobody.listens", "b", 2).ok());
  ASSERT_TRUE(Send(*pub, "bound.key", "c", 3).ok());
  ASSERT_TRUE(Send(*pub, "nobody.listens", "d", 4).ok());
  ASSERT_TRUE(pub->Flush(absl::Seconds(60)).ok());
  std::map<uint64_t, Done> by_tag;
  for (const Done& d : done_) by_tag.emplace(d.tag, d);
  ASSERT_EQ(by_tag.size(), 4u);
  EXPECT_EQ(by_tag.at(1).outcome, Outcome::kAcked);
  EXPECT_EQ(by_tag.at(3).outcome, Outcome::kAcked);
  for (uint64_t tag : {2, 4}) {
    EXPECT_EQ(by_tag.at(tag).outcome, Outcome::kUnroutable) << tag;
    EXPECT_EQ(by_tag.at(tag).reason, "unroutable: no queue bound for routing key nobody.listens");
  }
  std::vector<AmqpMessage> got = broker_->Drain(broker_->Name("routes_q"));
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].body, "a");
  EXPECT_EQ(got[1].body, "c");
}

// scripts/rabbitmq sets max_message_size to 1 MiB.
TEST_F(AmqpPublisherTest, ReportsAnOversizedMessageAsRejectedAndTheRestAsConnectionLost) {
  broker_->BindQueue(broker_->Name("sizes"), broker_->Name("sizes_q"), "#");
  auto pub = Connect("sizes");
  ASSERT_NE(pub, nullptr);
  ASSERT_TRUE(Send(*pub, "k", "small-1", 1).ok());
  ASSERT_TRUE(Send(*pub, "k", std::string((1 << 20) + 1, 'x'), 2).ok());
  ASSERT_TRUE(Send(*pub, "k", "small-3", 3).ok());
  AwaitCompletions(*pub, 3);
  std::map<uint64_t, Done> by_tag;
  for (const Done& d : done_) by_tag.emplace(d.tag, d);
  EXPECT_EQ(by_tag.at(2).outcome, Outcome::kRejected);
  EXPECT_THAT(by_tag.at(2).reason, HasSubstr("larger than configured max size"));
  // The channel closed on message 2: 3 was never taken; 1 was, but its confirm may
  // have been lost with the channel.
  EXPECT_EQ(by_tag.at(3).outcome, Outcome::kConnectionLost);
  EXPECT_NE(by_tag.at(1).outcome, Outcome::kRejected);
  EXPECT_FALSE(pub->Health().ok());
  EXPECT_EQ(Send(*pub, "k", "refused", 4).code(), absl::StatusCode::kUnavailable);

  ASSERT_TRUE(pub->Reconnect().ok());
  ASSERT_TRUE(Send(*pub, "k", "small-3", 3).ok());
  ASSERT_TRUE(pub->Flush(absl::Seconds(60)).ok());
  EXPECT_EQ(done_.back().outcome, Outcome::kAcked);
  std::vector<AmqpMessage> got = broker_->Drain(broker_->Name("sizes_q"));
  ASSERT_FALSE(got.empty());
  EXPECT_EQ(got.back().body, "small-3");
  for (const AmqpMessage& m : got) EXPECT_LT(m.body.size(), 100u);
}

TEST_F(AmqpPublisherTest, ReportsOutstandingMessagesAsConnectionLostWhenTheBrokerClosesIt) {
  broker_ = TestBroker::Create(VhostKind::kOwn);  // close_all_connections -p: this test's only
  broker_->BindQueue(broker_->Name("lost"), broker_->Name("lost_q"), "#");
  auto pub = Connect("lost");
  ASSERT_NE(pub, nullptr);
  for (int i = 1; i <= 100; ++i) ASSERT_TRUE(Send(*pub, "k", absl::StrCat(i), i).ok());
  ASSERT_TRUE(pub->Flush(absl::Seconds(60)).ok());
  ASSERT_EQ(CountOutcomes()[Outcome::kAcked], 100);

  broker_->Ctl({"close_all_connections", "-p", broker_->vhost(), "test closes it"});
  // The broker has sent connection.close and discards whatever arrives until our
  // close-ok: these are written but never confirmed (until the socket is gone).
  int produced = 100;
  for (int i = 101; i <= 200; ++i) {
    if (!Send(*pub, "k", absl::StrCat(i), i).ok()) break;
    produced = i;
  }
  test::WaitUntil(
      absl::Seconds(60), [&] { return !pub->Health().ok(); },
      [&] { pub->Poll(absl::Milliseconds(100)); });
  EXPECT_THAT(std::string(pub->Health().message()), HasSubstr("test closes it"));
  ASSERT_EQ(done_.size(), static_cast<size_t>(produced));
  std::vector<uint64_t> lost;
  for (size_t i = 100; i < done_.size(); ++i) {
    EXPECT_EQ(done_[i].outcome, Outcome::kConnectionLost) << done_[i].tag;
    EXPECT_THAT(done_[i].reason, HasSubstr("CONNECTION_FORCED"));
    lost.push_back(done_[i].tag);
  }
  EXPECT_FALSE(lost.empty());
  for (size_t i = 1; i < lost.size(); ++i) EXPECT_LT(lost[i - 1], lost[i]);  // publish order

  // The caller's part: reconnect and publish the lost ones again, in order.
  ASSERT_TRUE(pub->Reconnect().ok());
  for (uint64_t tag : lost) ASSERT_TRUE(Send(*pub, "k", absl::StrCat(tag), tag).ok());
  ASSERT_TRUE(pub->Flush(absl::Seconds(60)).ok());
  std::vector<AmqpMessage> got = broker_->Drain(broker_->Name("lost_q"));
  ASSERT_EQ(got.size(), static_cast<size_t>(produced));
  for (int i = 0; i < produced; ++i) EXPECT_EQ(got[i].body, absl::StrCat(i + 1));
}

TEST_F(AmqpPublisherTest, RefusesAMessageAmqpCannotCarryAndStaysConnected) {
  broker_->BindQueue(broker_->Name("limits"), broker_->Name("limits_q"), "#");
  auto pub = Connect("limits");
  ASSERT_NE(pub, nullptr);
  std::string long_name(256, 'n');
  Header bad_name[] = {{long_name, "v"}};
  EXPECT_EQ(pub->Produce({.routing_key = "k", .body = "x", .headers = bad_name, .tag = 1}).code(),
            absl::StatusCode::kInvalidArgument);
  std::string big(200 * 1024, 'v');
  Header too_big[] = {{"big", big}};
  EXPECT_EQ(pub->Produce({.routing_key = "k", .body = "x", .headers = too_big, .tag = 2}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Send(*pub, std::string(256, 'k'), "x", 3).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(Send(*pub, "k", "fine", 4).ok());
  ASSERT_TRUE(pub->Flush(absl::Seconds(60)).ok());
  ASSERT_EQ(done_.size(), 1u);
  EXPECT_EQ(done_[0].tag, 4u);
  EXPECT_EQ(done_[0].outcome, Outcome::kAcked);
}

TEST_F(AmqpPublisherTest, PublishesOverTlsCheckingTheBrokersCertificate) {
  const test::AmqpNode& node = test::AmqpNode::Shared();
  ASSERT_FALSE(node.tls_url().empty()) << "OUTBOXD_TEST_AMQPS not set: start the node with "
                                          "scripts/rabbitmq";
  broker_->BindQueue(broker_->Name("tls"), broker_->Name("tls_q"), "#");
  PublisherOptions options{
      .url = node.tls_url(), .exchange = broker_->Name("tls"), .tls = {.ca_file = node.ca_file()}};
  auto pub = Publisher::Connect(options, [this](const Completion& c) {
    done_.push_back({c.tag, c.outcome, std::string(c.reason)});
  });
  ASSERT_TRUE(pub.ok()) << pub.status();
  ASSERT_TRUE(Send(**pub, "k", "over tls", 1).ok());
  ASSERT_TRUE((*pub)->Flush(absl::Seconds(60)).ok());
  ASSERT_EQ(done_.size(), 1u);
  EXPECT_EQ(done_[0].outcome, Outcome::kAcked);
  std::vector<AmqpMessage> got = broker_->Drain(broker_->Name("tls_q"));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].body, "over tls");

  // Without the CA the certificate cannot be verified: no connection.
  options.tls.ca_file.clear();
  auto refused = Publisher::Connect(options, nullptr);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable) << refused.status();
}

TEST_F(AmqpPublisherTest, FailsToConnectWithAPassiveCheckOfAMissingExchange) {
  PublisherOptions options{.url = broker_->url(),
                           .exchange = broker_->Name("missing"),
                           .exchange_mode = ExchangeMode::kPassive};
  auto publisher = Publisher::Connect(options, nullptr);
  ASSERT_FALSE(publisher.ok());
  EXPECT_EQ(publisher.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(publisher.status().message()), HasSubstr("missing"));
}

TEST_F(AmqpPublisherTest, RefusesAWrongPasswordWithoutShowingIt) {
  std::string url = broker_->url();
  url.replace(url.find("guest:guest"), 11, "guest:sekrit");
  auto publisher = Publisher::Connect({.url = url}, nullptr);
  ASSERT_FALSE(publisher.ok());
  EXPECT_EQ(publisher.status().code(), absl::StatusCode::kUnauthenticated) << publisher.status();
  EXPECT_THAT(std::string(publisher.status().message()), ::testing::Not(HasSubstr("sekrit")));
}

TEST(AmqpUrl, RedactsThePassword) {
  auto redacted = RedactedUrl("amqp://bob:sekrit@rabbit.example:5673/prod");
  ASSERT_TRUE(redacted.ok());
  EXPECT_EQ(*redacted, "amqp://rabbit.example:5673/prod");
  EXPECT_EQ(*RedactedUrl("amqps://bob:sekrit@h/"), "amqps://h:5671/");
  EXPECT_EQ(RedactedUrl("http://h/").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace outboxd::amqp
