// inbox::Consumer from NATS JetStream (ConsumerOptions::nats_url) against the real
// nats-server of OUTBOXD_TEST_NATS (scripts/nats, a stream and durable per test) and
// the real PostgreSQL, messages published by nats::Sink as the relay publishes them
// (an `id` header and Nats-Msg-Id = the event id, an aggregate_id header): each
// processed once into the inbox, acked only after the inbox COMMIT (a COMMIT that
// fails leaves it unacked and it comes again), a handler error nak'd and retried
// before the messages behind it, a redelivery after the ack wait, while the first
// delivery is still committing, skipped as a duplicate: one effect; an ack lost after
// the COMMIT (the test's own server frozen, then killed -9 and restarted, the consumer
// restarted) redelivered and skipped: one effect, nothing lost; the server killed -9
// and restarted under a running consumer: nothing lost, nothing applied twice; a
// message without an id reported and never acked.
#include <nats/nats.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "inbox/consumer.h"
#include "nats/sink.h"
#include "support/inbox_deliveries.h"
#include "support/jetstream_client.h"
#include "support/set_up_database.h"
#include "support/wait_until.h"

namespace outboxd::inbox {
namespace {

std::string Id(int n) { return absl::StrFormat("%08d-6d8c-4a39-9c1e-3f1d2a7c9e10", n); }

// What JetStream says of the durable consumer.
struct ConsumerState {
  int64_t ack_pending = -1;  // delivered, not acked
  uint64_t pending = 0;      // not delivered yet
  uint64_t ack_floor = 0;    // the stream sequence acked with all before it
  int64_t redelivered = -1;  // delivered more than once, not acked yet
  int64_t max_ack_pending = -1;
};

class NatsConsumerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    url_ = test::TestNatsUrl();
    if (url_.empty()) GTEST_FAIL() << test::kNoTestNats;
    db_ = test::CreateSetUpDatabase();
    db_->Exec("CREATE TABLE efeitos (message_id uuid, pedido text)");
    // The database's unique name keeps the tests' streams apart on the shared server.
    prefix_ = db_->name();
    stream_ = "S_" + prefix_;
    topic_ = prefix_ + ".pedido.confirmado";
    UseServer(url_);
  }

  // The consumers, the publishing and State() on the server at `url` from now on.
  void UseServer(const std::string& url) {
    client_.reset();
    url_ = url;
    client_ = std::make_unique<test::JetStreamClient>(url_);
  }

  // The consumer of every test; a short `ack_wait` for those that wait for a redelivery.
  ConsumerOptions Options(absl::Duration ack_wait = absl::Seconds(30)) {
    return {.group_id = "billing",
            .topics = {topic_},
            .nats_url = url_,
            .stream = stream_,
            .ack_wait = ack_wait};
  }

  std::unique_ptr<Consumer> Start(Handler handler, ConsumerOptions options) {
    auto consumer = Consumer::Create(db_->Connect(), std::move(options), std::move(handler));
    EXPECT_TRUE(consumer.ok()) << consumer.status();
    return consumer.ok() ? std::move(*consumer) : nullptr;
  }
  std::unique_ptr<Consumer> Start(Handler handler) { return Start(std::move(handler), Options()); }

  // Events n in [from, to) through nats::Sink, as the relay publishes them; the sink
  // creates the stream (<prefix>.>) when missing.
  void Publish(int from, int to) {
    int acked = 0;
    auto sink = nats::NewSink(
        {.url = url_, .stream = {.name = stream_, .subjects = {prefix_ + ".>"}}},
        {.on_delivery = [&](const sink::DeliveryReport& r) { acked += r.status.ok(); }});
    ASSERT_TRUE(sink.ok()) << sink.status();
    for (int n = from; n < to; ++n) {
      const std::string id = Id(n);
      const std::string aggregate = absl::StrCat("pedido-", n % 3);
      const std::string body = absl::StrCat(R"({"pedidoId":")", aggregate, R"(","n":)", n, "}");
      const sink::Header headers[] = {{"id", id}, {"aggregate_id", aggregate}};
      ASSERT_TRUE((*sink)
                      ->Produce({.topic = topic_,
                                 .key = aggregate,
                                 .value = body,
                                 .headers = headers,
                                 .tag = static_cast<uint64_t>(n)})
                      .ok());
    }
    ASSERT_TRUE((*sink)->Flush(absl::Seconds(30)).ok());
    ASSERT_EQ(acked, to - from) << "not every message acknowledged";
  }

  // Event n again without Nats-Msg-Id, so JetStream stores the repeat: what a relay
  // restarted past the stream's duplicate window would publish. Without `id` too when
  // !with_id: a producer's message the inbox cannot deduplicate.
  void PublishAgain(int n, bool with_id = true) {
    natsMsg* msg = nullptr;
    const std::string body = absl::StrCat(R"({"pedidoId":"pedido-)", n % 3, R"(","n":)", n, "}");
    ASSERT_EQ(natsMsg_Create(&msg, topic_.c_str(), nullptr, body.data(), body.size()), NATS_OK);
    if (with_id) natsMsgHeader_Set(msg, "id", Id(n).c_str());
    natsMsgHeader_Set(msg, "aggregate_id", absl::StrCat("pedido-", n % 3).c_str());
    EXPECT_EQ(js_PublishMsg(nullptr, client_->js(), msg, nullptr, nullptr), NATS_OK);
    natsMsg_Destroy(msg);
  }

  ConsumerState State(const std::string& durable = "billing") {
    ConsumerState state;
    jsConsumerInfo* info = nullptr;
    if (js_GetConsumerInfo(&info, client_->js(), stream_.c_str(), durable.c_str(), nullptr,
                           nullptr) != NATS_OK) {
      return state;
    }
    state = {.ack_pending = info->NumAckPending,
             .pending = info->NumPending,
             .ack_floor = info->AckFloor.Stream,
             .redelivered = info->NumRedelivered,
             .max_ack_pending = info->Config->MaxAckPending};
    jsConsumerInfo_Destroy(info);
    return state;
  }

  int64_t Effects() { return test::Effects(*db_); }
  int64_t Marks() { return test::Marks(*db_); }

  std::string url_;
  std::unique_ptr<test::TestDatabase> db_;
  std::string prefix_;
  std::string stream_;
  std::string topic_;
  std::unique_ptr<test::JetStreamClient> client_;
};

// Started before the relay made the stream: the consumer waits for it, binds, and
// reads 250 events, then 50 of them again (stored twice: published past the duplicate
// window): 250 effects in stream order, 50 duplicates skipped, nothing left unacked, at
// most 100 (prefetch) unacked at a time.
TEST_F(NatsConsumerTest, EveryMessageIsProcessedOnceIntoTheInbox) {
  auto consumer = Start(test::WriteEffect);
  ASSERT_NE(consumer, nullptr);
  Publish(0, 250);
  for (int n = 100; n < 150; ++n) PublishAgain(n);
  std::vector<Delivery> got = test::PollDeliveries(*consumer, 300);
  ASSERT_EQ(got.size(), 300u);
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].message.offset, static_cast<int64_t>(i + 1)) << "stream order";
  }
  const test::ResultCounts counts = test::CountResults(got, topic_);
  EXPECT_EQ(counts.processed, 250);
  EXPECT_EQ(counts.duplicates, 50);
  EXPECT_EQ(Effects(), 250);
  EXPECT_EQ(Marks(), 250);
  const ConsumerState state = State();
  EXPECT_EQ(state.ack_pending, 0);
  EXPECT_EQ(state.pending, 0u);
  EXPECT_EQ(state.ack_floor, 300u);
  EXPECT_EQ(state.max_ack_pending, 100);
}

// While the handler runs (inside the inbox transaction) the message is delivered and
// not acked; after PollOnce returns it is acked.
TEST_F(NatsConsumerTest, AckIsSentOnlyAfterTheInboxCommit) {
  Publish(0, 1);
  ConsumerState during;
  auto consumer = Start([&](pg::Connection& conn, const Message& m) {
    during = State();
    return test::WriteEffect(conn, m);
  });
  std::vector<Delivery> got = test::PollDeliveries(*consumer, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].result, Delivery::Result::kProcessed);
  EXPECT_EQ(during.ack_pending, 1);
  EXPECT_EQ(during.ack_floor, 0u);
  EXPECT_EQ(State().ack_pending, 0);
  EXPECT_EQ(State().ack_floor, 1u);
}

// The COMMIT itself fails (a deferred constraint the first attempt breaks): nothing is
// marked, the message is not acked, and it comes again and is processed once.
TEST_F(NatsConsumerTest, ACommitThatFailsLeavesTheMessageUnackedAndItComesAgain) {
  db_->Exec(
      "ALTER TABLE efeitos ADD CONSTRAINT um_por_pedido UNIQUE (pedido) "
      "DEFERRABLE INITIALLY DEFERRED");
  Publish(0, 1);
  int calls = 0;
  auto consumer = Start([&](pg::Connection& conn, const Message& m) -> absl::Status {
    OUTBOXD_RETURN_IF_ERROR(test::WriteEffect(conn, m));
    if (++calls == 1) return test::WriteEffect(conn, m);  // breaks um_por_pedido at COMMIT
    return absl::OkStatus();
  });
  std::vector<Delivery> first = test::PollDeliveries(*consumer, 1);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].result, Delivery::Result::kFailed);
  EXPECT_NE(first[0].error.message().find("um_por_pedido"), std::string::npos) << first[0].error;
  EXPECT_EQ(State().ack_floor, 0u) << "acked although its COMMIT failed";
  EXPECT_EQ(Marks(), 0);
  std::vector<Delivery> again = test::PollDeliveries(*consumer, 1);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].result, Delivery::Result::kProcessed);
  EXPECT_EQ(again[0].message.id, Id(0));
  EXPECT_EQ(Effects(), 1);
  EXPECT_EQ(Marks(), 1);
  EXPECT_EQ(State().ack_floor, 1u);
}

// The first event fails once: it is nak'd with the two fetched behind it and, after
// the backoff, processed before them.
TEST_F(NatsConsumerTest, HandlerErrorIsNakedAndRetriedBeforeTheMessagesBehindIt) {
  Publish(0, 3);
  auto consumer = Start(test::WriteEffectFailingOnce());
  std::vector<Delivery> got = test::PollDeliveries(*consumer, 4);
  test::ExpectFirstRetriedBeforeTheRest(got, {Id(0), Id(1), Id(2)}, *db_);
  EXPECT_EQ(State().ack_floor, 3u);
}

// A delivery not acked within the ack wait comes again, here to a second consumer on
// the same durable while the first one's handler still runs: the second's inbox
// INSERT waits for the first transaction, finds the mark, and skips it. One effect.
TEST_F(NatsConsumerTest, ARedeliveryAfterTheAckWaitHasNoSecondEffect) {
  Publish(0, 1);
  const ConsumerOptions options = Options(absl::Seconds(1));
  auto second = Start(test::WriteEffect, options);
  ASSERT_NE(second, nullptr);
  std::vector<Delivery> second_got;
  std::atomic<bool> holding{false};
  auto first = Start(
      [&](pg::Connection& conn, const Message& m) {
        holding = true;
        // Held past the ack wait, until JetStream has delivered the message again.
        EXPECT_TRUE(test::WaitUntil(absl::Seconds(30), [&] { return State().redelivered >= 1; }));
        return test::WriteEffect(conn, m);
      },
      options);
  // The second polls once the first holds the message, so that it gets the redelivery.
  std::thread other([&] {
    if (test::WaitUntil(absl::Seconds(30), [&] { return holding.load(); })) {
      second_got = test::PollDeliveries(*second, 1);
    }
  });
  std::vector<Delivery> first_got = test::PollDeliveries(*first, 1);
  other.join();
  ASSERT_EQ(first_got.size(), 1u);
  ASSERT_EQ(second_got.size(), 1u);
  EXPECT_EQ(first_got[0].result, Delivery::Result::kProcessed);
  EXPECT_EQ(second_got[0].result, Delivery::Result::kDuplicate);
  EXPECT_EQ(second_got[0].message.id, Id(0));
  EXPECT_EQ(Effects(), 1);
  EXPECT_EQ(Marks(), 1);
  EXPECT_TRUE(test::WaitUntil(absl::Seconds(10), [&] { return State().ack_pending == 0; }));
}

// The crash window between the inbox COMMIT and the ack, provoked: the test's own
// server is frozen (SIGSTOP) while the handler runs, so the COMMIT lands and the ack
// stays unread in the server's socket and times out; the consumer goes away, the
// server is killed -9 (the ack lost with it) and restarted on its file store, and a
// new consumer binds the same durable. JetStream delivers the message again after the
// ack wait and the inbox skips it: one effect; the two fetched behind it are processed
// once: nothing lost.
TEST_F(NatsConsumerTest, AckLostAfterTheInboxCommitYieldsARedeliveryNotASecondEffect) {
  test::PrivateNatsServer server;
  UseServer(server.url());
  Publish(0, 3);
  const ConsumerOptions options = Options(absl::Seconds(1));
  int calls = 0;
  auto consumer = Start(
      [&](pg::Connection& conn, const Message& m) {
        if (++calls == 1) {
          EXPECT_TRUE(server.Freeze());
        }
        return test::WriteEffect(conn, m);
      },
      options);
  ASSERT_NE(consumer, nullptr);
  std::vector<Delivery> first = test::PollDeliveries(*consumer, 1);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].result, Delivery::Result::kProcessed);
  EXPECT_EQ(first[0].message.id, Id(0));
  EXPECT_FALSE(first[0].offset_commit.ok()) << "acked although the server was frozen";
  EXPECT_EQ(Marks(), 1);
  consumer.reset();
  ASSERT_TRUE(server.Restart());

  auto restarted = Start(test::WriteEffect, options);
  ASSERT_NE(restarted, nullptr);
  std::vector<Delivery> again = test::PollDeliveries(*restarted, 3);
  ASSERT_EQ(again.size(), 3u);
  std::vector<std::string> processed;
  for (const Delivery& d : again) {
    EXPECT_TRUE(d.offset_commit.ok()) << d.offset_commit;
    if (d.result == Delivery::Result::kDuplicate) {
      EXPECT_EQ(d.message.id, Id(0));
    } else {
      EXPECT_EQ(d.result, Delivery::Result::kProcessed);
      processed.push_back(d.message.id);
    }
  }
  EXPECT_THAT(processed, ::testing::UnorderedElementsAre(Id(1), Id(2)));
  EXPECT_EQ(Effects(), 3) << "an event applied twice or lost";
  EXPECT_EQ(Marks(), 3);
  EXPECT_TRUE(test::WaitUntil(absl::Seconds(10), [&] {
    const ConsumerState state = State();
    return state.ack_pending == 0 && state.ack_floor == 3u;
  }));
}

// The test's own server killed -9 and restarted under a running consumer that holds
// fetched messages: it reconnects, binds again if it must, and goes on; events
// published after the restart come too. Every event applied once, nothing lost,
// nothing left unacked.
TEST_F(NatsConsumerTest, AServerKilledUnderTheConsumerLosesNothingAndAppliesNothingTwice) {
  test::PrivateNatsServer server;
  UseServer(server.url());
  Publish(0, 10);
  const ConsumerOptions options = Options(absl::Seconds(1));
  auto consumer = Start(test::WriteEffect, options);
  ASSERT_NE(consumer, nullptr);
  ASSERT_EQ(test::PollDeliveries(*consumer, 5).size(), 5u);  // 5 more fetched, held
  ASSERT_TRUE(server.Restart());
  Publish(10, 20);
  absl::Status error;
  EXPECT_TRUE(test::WaitUntil(
      absl::Seconds(60), [&] { return !error.ok() || Effects() >= 20; },
      [&] { error = consumer->PollOnce(absl::Milliseconds(100)).status(); }));
  EXPECT_TRUE(error.ok()) << error;
  EXPECT_EQ(Effects(), 20) << "an event applied twice or lost";
  EXPECT_EQ(Marks(), 20);
  EXPECT_TRUE(test::WaitUntil(
      absl::Seconds(30),
      [&] {
        const ConsumerState state = State();
        return state.ack_floor == 20u && state.ack_pending == 0;
      },
      [&] { error = consumer->PollOnce(absl::Milliseconds(100)).status(); }));
  EXPECT_TRUE(error.ok()) << error;
  EXPECT_EQ(Effects(), 20);
}

// A message without an id (no `id` header, no Nats-Msg-Id) cannot be deduplicated: it
// is reported naming its stream sequence and the way past it, never acked, and
// reported again; the event behind it waits (never skipped silently).
TEST_F(NatsConsumerTest, MessageWithoutIdIsReportedAndNeverSkipped) {
  Publish(0, 0);  // the stream
  PublishAgain(0, /*with_id=*/false);
  Publish(1, 2);
  auto consumer = Start(test::WriteEffect);
  ASSERT_NE(consumer, nullptr);
  for (int round = 0; round < 2; ++round) {
    absl::Status error;
    std::vector<Delivery> got = test::PollDeliveries(*consumer, 1, &error);
    EXPECT_TRUE(got.empty());
    EXPECT_EQ(error.code(), absl::StatusCode::kFailedPrecondition) << error;
    EXPECT_EQ(error.message(),
              absl::StrCat("message stream ", stream_, ", sequence 1 (subject ", topic_,
                           ") has no \"id\" header, so it cannot be deduplicated; it is not "
                           "acked. Fix the producer, then remove it from the stream (nats "
                           "stream rmm ",
                           stream_, " SEQUENCE) if it must be skipped"));
  }
  EXPECT_EQ(Effects(), 0) << "the event behind it must wait";
  EXPECT_EQ(State().ack_floor, 0u);
}

// A durable bound again with another ack wait is refused at start, naming it.
TEST_F(NatsConsumerTest, ADurableWithOtherSettingsIsRefusedNamingThem) {
  Publish(0, 1);
  ASSERT_NE(Start(test::WriteEffect), nullptr);
  const ConsumerOptions options = Options(absl::Seconds(5));
  auto refused = Consumer::Create(db_->Connect(), options, test::WriteEffect);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("ack wait"), std::string::npos) << refused.status();
}

}  // namespace
}  // namespace outboxd::inbox
