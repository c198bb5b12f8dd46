// amqp::Sink (the relays' sink::Sink on RabbitMQ) against a real node: what it
// reports, what pika reads back, and what a lost connection, a nack, an unroutable or
// an oversized message do to the reports and the order.
#include "amqp/sink.h"

#include <malloc.h>
#include <sys/select.h>

#include <atomic>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
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

struct Report {
  uint64_t tag;
  absl::Status status;
  std::string topic;
  std::string value;
  std::map<std::string, std::string> headers;
};

class AmqpSinkTest : public ::testing::Test {
 protected:
  void Start(VhostKind kind = VhostKind::kShared) {
    broker_ = TestBroker::Create(kind);
    exchange_ = broker_->Name("events");
    queue_ = broker_->Name("events_q");
    broker_->BindQueue(exchange_, queue_, "order.#");
  }

  std::unique_ptr<Sink> MakeSink(absl::Duration delivery_timeout = absl::InfiniteDuration(),
                                 std::string url = "",
                                 absl::Duration unroutable_grace = absl::Seconds(30)) {
    SinkOptions options{.publisher = {.url = url.empty() ? broker_->url() : url,
                                      .exchange = exchange_,
                                      .connection_name = broker_->Name("sink")},
                        .unroutable_grace = unroutable_grace};
    auto sink = NewSink(
        options, {.on_delivery =
                      [this](const sink::DeliveryReport& r) {
                        Report got{r.tag, r.status, std::string(r.topic), std::string(r.value), {}};
                        for (const sink::Header& h : r.headers) {
                          got.headers[std::string(h.name)] = h.value;
                        }
                        reports_.push_back(std::move(got));
                      },
                  .delivery_timeout = delivery_timeout});
    EXPECT_TRUE(sink.ok()) << sink.status();
    return sink.ok() ? std::move(*sink) : nullptr;
  }

  // One event as the relay's encoder hands it over (json format).
  static absl::Status Send(Sink& sink, const std::string& key, int id, const std::string& body,
                           uint64_t tag, std::string_view content_type = "") {
    std::string id_text = absl::StrCat(id);
    std::vector<sink::Header> headers = {
        {"id", id_text},       {"type", "order.created"},
        {"aggregate_id", key}, {"created_at", "2026-12-03T12:00:05.250000+00:00"},
        {"lsn", "0/16B3748"},  {"traceparent", "00-abc-01"}};
    if (!content_type.empty()) headers.push_back({"content-type", content_type});
    return sink.Produce(
        {.topic = "order.created", .key = key, .value = body, .headers = headers, .tag = tag});
  }

  // An event of a type no queue is bound for (the broker returns it): "{}" under key.
  static absl::Status SendUnroutable(Sink& sink, const std::string& key, const std::string& id,
                                     uint64_t tag) {
    const std::vector<sink::Header> headers = {{"id", id}, {"aggregate_id", key}};
    return sink.Produce(
        {.topic = "invoice.paid", .key = key, .value = "{}", .headers = headers, .tag = tag});
  }

  // One routable message confirmed (tag 1), then the broker closes the sink's
  // connection and the sink connects again.
  void Reconnect(Sink& sink) {
    ASSERT_TRUE(Send(sink, "k", 1, "1", 1).ok());
    AwaitReports(sink, 1);
    ASSERT_TRUE(reports_[0].status.ok()) << reports_[0].status;
    broker_->Ctl({"close_all_connections", "-p", broker_->vhost(), "test"});
    ASSERT_TRUE(test::WaitUntil(
        absl::Seconds(30), [&] { return sink.counters().reconnects > 0; },
        [&] { sink.Poll(100); }));
  }

  void AwaitReports(Sink& sink, size_t n, absl::Duration timeout = absl::Seconds(60)) {
    ASSERT_TRUE(test::WaitUntil(
        timeout, [&] { return reports_.size() >= n; }, [&] { sink.Poll(100); }))
        << reports_.size() << " of " << n;
  }

  std::unique_ptr<TestBroker> broker_;
  std::string exchange_;
  std::string queue_;
  std::vector<Report> reports_;
};

TEST_F(AmqpSinkTest, ReportsOkOnConfirmWithPropertiesAndHeadersAsTheContractSays) {
  Start();
  std::unique_ptr<Sink> sink = MakeSink();
  ASSERT_TRUE(Send(*sink, "77", 1, R"({"n":1})", 10).ok());
  ASSERT_TRUE(Send(*sink, "77", 2, R"({"n":2})", 11, "application/vnd.outboxd.envelope+json").ok());
  EXPECT_EQ(sink->InFlight(), 2);
  EXPECT_GT(sink->InFlightBytes(), 0u);
  ASSERT_TRUE(sink->Flush(absl::Seconds(60)).ok());
  ASSERT_EQ(reports_.size(), 2u);
  for (const Report& r : reports_) EXPECT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(reports_[0].tag, 10u);
  EXPECT_EQ(reports_[0].topic, "order.created");
  EXPECT_EQ(sink->InFlight(), 0);
  EXPECT_EQ(sink->InFlightBytes(), 0u);

  std::vector<AmqpMessage> got = broker_->Drain(queue_);
  ASSERT_EQ(got.size(), 2u);
  const AmqpMessage& m = got[0];
  EXPECT_EQ(m.routing_key, "order.created");
  EXPECT_EQ(m.message_id, "1");
  EXPECT_EQ(m.type, "order.created");
  EXPECT_EQ(m.content_type, "application/json");
  EXPECT_EQ(m.timestamp, "1796299205");  // 2026-12-03T12:00:05Z, whole seconds
  EXPECT_EQ(m.delivery_mode, "2");
  EXPECT_EQ(m.headers,
            "aggregate_id=77;created_at=2026-12-03T12:00:05.250000+00:00;lsn=0/16B3748;"
            "traceparent=00-abc-01");
  EXPECT_EQ(m.body, R"({"n":1})");
  EXPECT_EQ(got[1].message_id, "2");
  EXPECT_EQ(got[1].content_type, "application/vnd.outboxd.envelope+json");
}

TEST_F(AmqpSinkTest, AnUnroutableMessageIsReportedWithTheRoutingKeyAndTheMessageToDeadLetter) {
  Start();
  std::unique_ptr<Sink> sink = MakeSink();
  ASSERT_TRUE(SendUnroutable(*sink, "9", "5", 3).ok());
  AwaitReports(*sink, 1);
  EXPECT_EQ(reports_[0].status.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(reports_[0].status.message(), "no queue bound for routing key invoice.paid");
  EXPECT_EQ(reports_[0].topic, "invoice.paid");
  EXPECT_EQ(reports_[0].value, "{}");
  EXPECT_EQ(reports_[0].headers["id"], "5");
  EXPECT_EQ(reports_[0].headers["aggregate_id"], "9");
}

// Right after a reconnect a return is not final (a restarted node may still be
// recovering its queues): the message is published again until a queue takes it.
TEST_F(AmqpSinkTest, AReturnRightAfterAReconnectIsPublishedAgainUntilAQueueIsBound) {
  Start(VhostKind::kOwn);
  std::unique_ptr<Sink> sink = MakeSink();
  Reconnect(*sink);
  ASSERT_TRUE(SendUnroutable(*sink, "A", "2", 2).ok());
  ASSERT_TRUE(test::WaitUntil(
      absl::Seconds(10), [&] { return sink->counters().returned_again >= 2; },
      [&] { sink->Poll(100); }));
  EXPECT_EQ(reports_.size(), 1u) << "reported though within the grace";
  const std::string invoices = broker_->Name("invoices_q");
  broker_->BindQueue(exchange_, invoices, "invoice.#");
  AwaitReports(*sink, 2);
  EXPECT_TRUE(reports_[1].status.ok()) << reports_[1].status;
  std::vector<AmqpMessage> got = broker_->Drain(invoices);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].message_id, "2");
}

// Once the grace after the reconnect has passed, a return is final again.
TEST_F(AmqpSinkTest, AReturnAfterTheReconnectsGraceIsReportedForTheDeadLetter) {
  Start(VhostKind::kOwn);
  std::unique_ptr<Sink> sink = MakeSink(absl::InfiniteDuration(), "", absl::Seconds(1));
  Reconnect(*sink);
  const absl::Time sent = absl::Now();
  ASSERT_TRUE(SendUnroutable(*sink, "A", "2", 2).ok());
  AwaitReports(*sink, 2, absl::Seconds(20));
  EXPECT_EQ(reports_[1].status.code(), absl::StatusCode::kNotFound) << reports_[1].status;
  EXPECT_EQ(reports_[1].status.message(), "no queue bound for routing key invoice.paid");
  EXPECT_GT(sink->counters().returned_again, 0u);
  EXPECT_LT(absl::Now() - sent, absl::Seconds(10));
}

// The broker closes the channel on an oversized message: it fails, with its key's
// later message right behind it (never published), and another key's goes through.
TEST_F(AmqpSinkTest, AnOversizedMessageFailsWithItsKeysFollowersAndOtherKeysArrive) {
  Start();
  std::unique_ptr<Sink> sink = MakeSink();
  ASSERT_TRUE(Send(*sink, "1", 1, "before", 1).ok());
  // scripts/rabbitmq sets max_message_size to 1 MiB.
  ASSERT_TRUE(Send(*sink, "1", 2, std::string(2 << 20, 'x'), 2).ok());
  ASSERT_TRUE(Send(*sink, "2", 3, "after", 3).ok());
  ASSERT_TRUE(Send(*sink, "1", 4, "follower", 4).ok());
  AwaitReports(*sink, 4);
  std::map<uint64_t, absl::Status> by_tag;
  for (const Report& r : reports_) by_tag[r.tag] = r.status;
  EXPECT_TRUE(by_tag[1].ok()) << by_tag[1];
  EXPECT_EQ(by_tag[2].code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(by_tag[2].message()), HasSubstr("max"));
  EXPECT_TRUE(by_tag[3].ok()) << by_tag[3];
  EXPECT_EQ(by_tag[4].code(), absl::StatusCode::kFailedPrecondition) << by_tag[4];
  std::vector<AmqpMessage> got = broker_->Drain(queue_);
  std::vector<std::string> bodies;
  for (const AmqpMessage& m : got) bodies.push_back(m.body);
  // "after" may arrive twice: its confirm may go with the channel the broker closed.
  ASSERT_FALSE(bodies.empty());
  EXPECT_EQ(bodies.front(), "before");
  EXPECT_EQ(bodies.back(), "after");
  EXPECT_EQ(std::count(bodies.begin(), bodies.end(), std::string(2 << 20, 'x')), 0);
  EXPECT_EQ(std::count(bodies.begin(), bodies.end(), "follower"), 0);
}

// basic.return comes after the broker has routed what followed on the channel: a
// later message of the same key, published at once, would be in the queue before the
// returned one is dead-lettered and replayed. The sink holds it until its predecessor
// is confirmed, so the return fails it too, right behind it, for the relay to
// dead-letter in order; other keys go on.
TEST_F(AmqpSinkTest, AReturnedMessagesKeyFollowersWaitAndFailBehindItInOrder) {
  Start();
  std::unique_ptr<Sink> sink = MakeSink();
  ASSERT_TRUE(SendUnroutable(*sink, "A", "1", 1).ok());
  ASSERT_TRUE(Send(*sink, "A", 2, "A2", 2).ok());
  ASSERT_TRUE(Send(*sink, "B", 3, "B3", 3).ok());
  ASSERT_TRUE(Send(*sink, "A", 4, "A4", 4).ok());
  EXPECT_EQ(sink->InFlight(), 4);
  AwaitReports(*sink, 4);
  std::vector<uint64_t> key_a;
  for (const Report& r : reports_) {
    if (r.tag == 3) {
      EXPECT_TRUE(r.status.ok()) << r.status;
      continue;
    }
    key_a.push_back(r.tag);
    if (r.tag == 1) {
      EXPECT_EQ(r.status.code(), absl::StatusCode::kNotFound) << r.status;
      continue;
    }
    EXPECT_EQ(r.status.code(), absl::StatusCode::kFailedPrecondition) << r.status;
    EXPECT_THAT(std::string(r.status.message()),
                HasSubstr("no queue bound for routing key invoice.paid"));
    // What the relay needs to dead-letter it.
    EXPECT_EQ(r.value, absl::StrCat("A", r.tag));
    EXPECT_EQ(r.headers.at("aggregate_id"), "A");
  }
  EXPECT_THAT(key_a, ::testing::ElementsAre(1, 2, 4));
  EXPECT_EQ(sink->InFlight(), 0);
  std::vector<AmqpMessage> got = broker_->Drain(queue_);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].body, "B3");
}

TEST_F(AmqpSinkTest, AMessageAmqpCannotCarryIsRefusedAtProduce) {
  Start();
  std::unique_ptr<Sink> sink = MakeSink();
  absl::Status s = sink->Produce({.topic = std::string(300, 'k'), .value = "{}", .tag = 1});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(sink->InFlight(), 0);
}

// close_all_connections while messages are in flight: the sink reconnects and
// publishes what was unconfirmed again, in order; the relay sees each tag once, OK.
TEST_F(AmqpSinkTest, AClosedConnectionDelaysReportsAndKeepsOrderPerKey) {
  Start(VhostKind::kOwn);
  std::unique_ptr<Sink> sink = MakeSink();
  // Closed from another thread while messages keep going out (up to 500 unconfirmed),
  // so some are in flight.
  std::atomic<int> produced{0};
  std::thread closer([&] {
    test::WaitUntil(
        absl::Seconds(60), [&] { return produced >= 1000; }, absl::Milliseconds(1));
    broker_->Ctl({"close_all_connections", "-p", broker_->vhost(), "test"});
  });
  test::WaitUntil(
      absl::Seconds(120), [&] { return sink->counters().reconnects > 0 && produced >= 3000; },
      [&] {
        if (sink->InFlight() > 500) {
          sink->Poll(10);
          return;
        }
        const int id = ++produced;
        EXPECT_TRUE(Send(*sink, absl::StrCat(id % 7), id, absl::StrCat(id), id).ok());
        if (id % 50 == 0) sink->Poll(0);
      });
  closer.join();
  const int kMessages = produced;
  ASSERT_TRUE(sink->Flush(absl::Seconds(120)).ok());
  EXPECT_GE(sink->counters().reconnects, 1u);
  std::set<uint64_t> tags;
  for (const Report& r : reports_) {
    EXPECT_TRUE(r.status.ok()) << r.status;
    EXPECT_TRUE(tags.insert(r.tag).second) << "tag reported twice: " << r.tag;
  }
  EXPECT_EQ(tags.size(), static_cast<size_t>(kMessages));

  std::vector<AmqpMessage> got = broker_->Drain(queue_);
  std::set<int> seen;
  std::map<std::string, int> last_new_by_key;
  size_t duplicates = 0;
  for (const AmqpMessage& m : got) {
    int id = std::stoi(m.message_id);
    if (!seen.insert(id).second) {
      ++duplicates;
      continue;
    }
    // Repeats dropped (as a consumer does, by id), each key's events are in order.
    std::string key = std::to_string(id % 7);
    EXPECT_GT(id, last_new_by_key[key]) << "key " << key;
    last_new_by_key[key] = id;
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(kMessages));
  EXPECT_LE(duplicates, sink->counters().republished);
  std::printf("reconnects %lu, republished %lu, duplicates in the queue %zu\n",
              static_cast<unsigned long>(sink->counters().reconnects),
              static_cast<unsigned long>(sink->counters().republished), duplicates);
}

// A queue at max-length that rejects publishes nacks: the message is published again
// after a backoff, not reported failed, and arrives once there is room.
TEST_F(AmqpSinkTest, ANackedMessageIsPublishedAgainUntilTheBrokerTakesIt) {
  Start(VhostKind::kOwn);
  broker_->Ctl({"set_policy", "-p", broker_->vhost(), "limit", "^" + queue_ + "$",
                R"({"max-length":1,"overflow":"reject-publish"})", "--apply-to", "queues"});
  std::unique_ptr<Sink> sink = MakeSink();
  for (int i = 1; i <= 3; ++i) ASSERT_TRUE(Send(*sink, "k", i, absl::StrCat(i), i).ok());
  std::vector<AmqpMessage> got;
  test::WaitUntil(
      absl::Seconds(120), [&] { return reports_.size() >= 3 && got.size() >= 3; },
      [&] {
        sink->Poll(200);
        if (sink->counters().nacked > 0 || reports_.size() == 3) {
          for (AmqpMessage& m : broker_->Drain(queue_)) got.push_back(std::move(m));
        }
      });
  ASSERT_EQ(reports_.size(), 3u);
  for (const Report& r : reports_) EXPECT_TRUE(r.status.ok()) << r.status;
  EXPECT_GT(sink->counters().nacked, 0u);
  std::vector<std::string> ids;
  for (const AmqpMessage& m : got) ids.push_back(m.message_id);
  EXPECT_THAT(ids, ::testing::ElementsAre("1", "2", "3"));
}

// No broker at the URL: the sink starts anyway (as a Kafka producer does), holds the
// message, wakes its caller for the retries, and with a delivery timeout (poll's
// attempts) reports it failed in time.
TEST_F(AmqpSinkTest, AnUnreachableBrokerDelaysAndWithATimeoutFails) {
  Start();
  std::unique_ptr<Sink> sink =
      MakeSink(absl::Milliseconds(500), "amqp://guest:guest@127.0.0.1:1/%2f");
  ASSERT_NE(sink, nullptr);
  ASSERT_TRUE(Send(*sink, "1", 1, "x", 1).ok());
  EXPECT_EQ(sink->InFlight(), 1);
  EXPECT_GE(sink->wake_fd(), 0);
  // The wake descriptor becomes readable for the timeout without anyone polling.
  fd_set readable;
  FD_ZERO(&readable);
  FD_SET(sink->wake_fd(), &readable);
  timeval tv{.tv_sec = 30, .tv_usec = 0};
  EXPECT_EQ(select(sink->wake_fd() + 1, &readable, nullptr, nullptr, &tv), 1);
  AwaitReports(*sink, 1);
  EXPECT_EQ(reports_[0].status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(reports_[0].status.message()),
              HasSubstr("not acknowledged by RabbitMQ at"));
  EXPECT_EQ(sink->InFlight(), 0);
}

TEST_F(AmqpSinkTest, ALoginRefusedEndsCreateNamingNoPassword) {
  Start();
  std::string url = broker_->url();
  url.replace(url.find("guest:guest"), 11, "guest:wrong-secret");
  auto sink = NewSink({.publisher = {.url = url, .exchange = exchange_}}, {});
  ASSERT_FALSE(sink.ok());
  EXPECT_EQ(sink.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(std::string(sink.status().message()), ::testing::Not(HasSubstr("wrong-secret")));
}

// The relay bounds the sink's memory with --max-in-flight-bytes through
// InFlightBytes(): what the sink's copies take on the heap must not exceed it (they
// once took ~1 KiB per event while it counted the ~150 bytes of text). Nothing is
// published (no broker), so the heap grows by the copies alone.
TEST_F(AmqpSinkTest, InFlightBytesCoverWhatTheCopiesTakeOnTheHeap) {
  Start();
  std::unique_ptr<Sink> sink =
      MakeSink(absl::InfiniteDuration(), "amqp://guest:guest@127.0.0.1:1/%2f");
  ASSERT_NE(sink, nullptr);
  const size_t before = mallinfo2().uordblks;
  constexpr int kMessages = 10000;
  for (int i = 1; i <= kMessages; ++i) {
    ASSERT_TRUE(Send(*sink, absl::StrCat(i % 100), i, R"({"t": 1796299205250000})", i).ok());
  }
  const size_t grown = mallinfo2().uordblks - before;
  EXPECT_EQ(sink->InFlight(), kMessages);
  EXPECT_LE(grown, sink->InFlightBytes())
      << "per message: " << grown / kMessages << " on the heap, "
      << sink->InFlightBytes() / kMessages << " counted";
  EXPECT_EQ(sink->Close(absl::ZeroDuration()), kMessages);
}

TEST_F(AmqpSinkTest, CloseReturnsWhatItDroppedUnreported) {
  Start();
  std::unique_ptr<Sink> sink =
      MakeSink(absl::InfiniteDuration(), "amqp://guest:guest@127.0.0.1:1/%2f");
  ASSERT_TRUE(Send(*sink, "1", 1, "x", 1).ok());
  ASSERT_TRUE(Send(*sink, "1", 2, "y", 2).ok());
  EXPECT_EQ(sink->Close(absl::ZeroDuration()), 2);
  EXPECT_TRUE(reports_.empty());
}

}  // namespace
}  // namespace outboxd::amqp
