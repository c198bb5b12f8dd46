// nats::Sink (the relays' sink::Sink on NATS JetStream) against a real nats-server:
// what it reports, what a JetStream consumer reads back, the duplicate window, the
// three dead-letter cases with order kept behind them, and a kill -9 of the server.
#include "nats/sink.h"

#include <nats/nats.h>
#include <stdlib.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "support/captured_log.h"
#include "support/jetstream_client.h"
#include "support/nats_test.h"
#include "support/wait_until.h"

namespace outboxd::nats {
namespace {

using ::outboxd::test::JetStreamClient;
using ::outboxd::test::PrivateNatsServer;
using ::outboxd::test::StoredMessage;
using ::outboxd::test::WaitUntil;
using ::testing::HasSubstr;
using ::testing::Not;

struct Report {
  uint64_t tag;
  absl::Status status;
  std::string topic;
  int64_t offset;
  std::string key;
};

class NatsSinkTest : public test::NatsTest {
 protected:
  void SetUpWithServer() override { client_ = std::make_unique<JetStreamClient>(url_); }

  SinkOptions Options(Declare declare = Declare::kCreateIfMissing) {
    return {.url = url_,
            .stream = {.name = stream_, .subjects = {prefix_ + ".>"}, .declare = declare}};
  }

  std::unique_ptr<Sink> MakeSink(const SinkOptions& options,
                                 absl::Duration delivery_timeout = absl::InfiniteDuration()) {
    auto sink = NewSink(options, {.on_delivery =
                                      [this](const sink::DeliveryReport& r) {
                                        reports_.push_back({r.tag, r.status, std::string(r.topic),
                                                            r.offset, std::string(r.key)});
                                        reported_.fetch_add(1);
                                      },
                                  .delivery_timeout = delivery_timeout});
    EXPECT_TRUE(sink.ok()) << sink.status();
    return sink.ok() ? std::move(*sink) : nullptr;
  }

  // One event as the relay's encoder hands it over (json format).
  absl::Status Send(Sink& sink, const std::string& subject, const std::string& key, int id,
                    uint64_t tag, const std::string& body = "{}") {
    const std::string id_text = absl::StrCat(id);
    const std::vector<sink::Header> headers = {
        {"id", id_text},       {"type", "order.created"},
        {"aggregate_id", key}, {"created_at", "2026-12-03T12:00:05.250000+00:00"},
        {"lsn", "0/16B3748"},  {"traceparent", "00-abc-01"}};
    return sink.Produce(
        {.topic = subject, .key = key, .value = body, .headers = headers, .tag = tag});
  }

  void AwaitReports(Sink& sink, size_t n, absl::Duration timeout = absl::Seconds(60)) {
    WaitUntil(
        timeout, [&] { return reports_.size() >= n; }, [&] { sink.Poll(100); });
    ASSERT_GE(reports_.size(), n) << "reports missing after " << timeout;
  }

  const Report* ReportOf(uint64_t tag) const {
    for (const Report& r : reports_) {
      if (r.tag == tag) return &r;
    }
    return nullptr;
  }

  std::unique_ptr<JetStreamClient> client_;
  std::vector<Report> reports_;
  std::atomic<size_t> reported_{0};  // reports_.size(), for another thread
};

TEST_F(NatsSinkTest, EveryEventArrivesOnceInOrderPerKeyWithItsHeaders) {
  auto sink = MakeSink(Options());
  ASSERT_NE(sink, nullptr);
  std::optional<test::StreamSummary> made = client_->Stream(stream_);
  ASSERT_TRUE(made.has_value()) << "the sink made no stream";
  EXPECT_TRUE(made->file_storage);
  EXPECT_EQ(made->duplicate_window, absl::Minutes(2));

  // Three keys interleaved, 40 events each; ids are unique across keys.
  const std::vector<std::string> keys = {"a", "b", "c"};
  int id = 0;
  for (int i = 0; i < 40; ++i) {
    for (const std::string& key : keys) {
      ++id;
      ASSERT_TRUE(Send(*sink, prefix_ + ".order.created", key, id, id).ok());
    }
  }
  AwaitReports(*sink, 120);
  for (const Report& r : reports_) {
    EXPECT_TRUE(r.status.ok()) << r.tag << ": " << r.status;
    EXPECT_GT(r.offset, 0) << "the PubAck's stream sequence";
  }
  EXPECT_EQ(sink->InFlight(), 0);

  std::vector<StoredMessage> stored = client_->ReadAll(stream_, prefix_ + ".>");
  ASSERT_EQ(stored.size(), 120u);
  std::map<std::string, int> last_of_key;
  std::set<std::string> ids;
  for (const StoredMessage& m : stored) {
    EXPECT_EQ(m.subject, prefix_ + ".order.created");
    const std::string key = m.Header("aggregate_id");
    const int this_id = std::stoi(m.Header("id"));
    EXPECT_GT(this_id, last_of_key[key]) << "key " << key << " out of order";
    last_of_key[key] = this_id;
    EXPECT_TRUE(ids.insert(m.Header("id")).second) << "id " << this_id << " stored twice";
    EXPECT_EQ(m.Header("Nats-Msg-Id"), m.Header("id"));
    EXPECT_EQ(m.Header("type"), "order.created");
    EXPECT_EQ(m.Header("created_at"), "2026-12-03T12:00:05.250000+00:00");
    EXPECT_EQ(m.Header("lsn"), "0/16B3748");
    EXPECT_EQ(m.Header("traceparent"), "00-abc-01");
    EXPECT_EQ(m.value, "{}");
  }
}

TEST_F(NatsSinkTest, ARepeatOfAnIdWithinTheDuplicateWindowIsStoredOnce) {
  {
    auto first = MakeSink(Options());
    ASSERT_NE(first, nullptr);
    for (int id = 1; id <= 10; ++id) {
      ASSERT_TRUE(Send(*first, prefix_ + ".x", "k" + std::to_string(id % 3), id, id).ok());
    }
    AwaitReports(*first, 10);
    EXPECT_EQ(first->counters().duplicates, 0u);
  }
  // A relay restarted from its confirmed position sends the same events again.
  reports_.clear();
  auto again = MakeSink(Options());
  ASSERT_NE(again, nullptr);
  for (int id = 1; id <= 10; ++id) {
    ASSERT_TRUE(Send(*again, prefix_ + ".x", "k" + std::to_string(id % 3), id, id).ok());
  }
  AwaitReports(*again, 10);
  for (const Report& r : reports_) EXPECT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(again->counters().duplicates, 10u) << "a duplicate PubAck counts as delivered";
  EXPECT_EQ(client_->ReadAll(stream_, prefix_ + ".>").size(), 10u);
}

TEST_F(NatsSinkTest, ASubjectNoStreamTakesIsDeadLetteredWithItsKeysFollowersBehindIt) {
  auto sink = MakeSink(Options());
  ASSERT_NE(sink, nullptr);
  const std::string nowhere = "nowhere_" + prefix_ + ".x";
  ASSERT_TRUE(Send(*sink, nowhere, "k", 1, 1).ok());
  ASSERT_TRUE(Send(*sink, prefix_ + ".x", "k", 2, 2).ok());  // follows 1
  ASSERT_TRUE(Send(*sink, prefix_ + ".x", "j", 3, 3).ok());  // another key flows
  AwaitReports(*sink, 3);
  ASSERT_NE(ReportOf(1), nullptr);
  EXPECT_EQ(ReportOf(1)->status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(ReportOf(1)->status.message()),
              HasSubstr("no JetStream stream takes subject " + nowhere));
  EXPECT_EQ(ReportOf(1)->key, "k") << "a failed report carries the message";
  EXPECT_EQ(ReportOf(2)->status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(ReportOf(2)->status.message()), HasSubstr("follows an earlier message"));
  EXPECT_TRUE(ReportOf(3)->status.ok()) << ReportOf(3)->status;
  // 1 before 2: the relay dead-letters them in order.
  EXPECT_LT(ReportOf(1) - reports_.data(), ReportOf(2) - reports_.data());
  std::vector<StoredMessage> stored = client_->ReadAll(stream_, prefix_ + ".>");
  ASSERT_EQ(stored.size(), 1u) << "the follower must not be stored before its predecessor";
  EXPECT_EQ(stored[0].Header("id"), "3");
}

TEST_F(NatsSinkTest, AFullStreamThatDiscardsNewIsADeadLetterWithTheServersReason) {
  client_->AddStream(stream_, prefix_ + ".>", {.max_msgs = 2});
  auto sink = MakeSink(Options(Declare::kPassive));
  ASSERT_NE(sink, nullptr);
  for (int id = 1; id <= 4; ++id) ASSERT_TRUE(Send(*sink, prefix_ + ".x", "k", id, id).ok());
  AwaitReports(*sink, 4);
  EXPECT_TRUE(ReportOf(1)->status.ok());
  EXPECT_TRUE(ReportOf(2)->status.ok());
  EXPECT_EQ(ReportOf(3)->status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(ReportOf(3)->status.message()), HasSubstr("maximum messages exceeded"));
  EXPECT_THAT(std::string(ReportOf(4)->status.message()), HasSubstr("follows an earlier message"));
  EXPECT_EQ(client_->ReadAll(stream_, prefix_ + ".>").size(), 2u);
}

TEST_F(NatsSinkTest, AMessageOverMaxPayloadIsADeadLetterAndOthersFlow) {
  auto sink = MakeSink(Options());
  ASSERT_NE(sink, nullptr);
  const std::string huge(1100 * 1024, 'x');  // scripts/nats: max_payload 1 MiB
  ASSERT_TRUE(Send(*sink, prefix_ + ".x", "k", 1, 1, huge).ok());
  ASSERT_TRUE(Send(*sink, prefix_ + ".x", "k", 2, 2).ok());
  ASSERT_TRUE(Send(*sink, prefix_ + ".x", "j", 3, 3).ok());
  AwaitReports(*sink, 3);
  EXPECT_EQ(ReportOf(1)->status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(ReportOf(1)->status.message()), HasSubstr("max_payload"));
  EXPECT_THAT(std::string(ReportOf(2)->status.message()), HasSubstr("follows an earlier message"));
  EXPECT_TRUE(ReportOf(3)->status.ok()) << ReportOf(3)->status;
  EXPECT_EQ(client_->ReadAll(stream_, prefix_ + ".>").size(), 1u);
}

TEST_F(NatsSinkTest, AMessageOverTheStreamsMaxMsgSizeIsADeadLetter) {
  client_->AddStream(stream_, prefix_ + ".>", {.max_msg_size = 512});
  auto sink = MakeSink(Options(Declare::kPassive));
  ASSERT_NE(sink, nullptr);
  ASSERT_TRUE(Send(*sink, prefix_ + ".x", "k", 1, 1, std::string(1024, 'x')).ok());
  ASSERT_TRUE(Send(*sink, prefix_ + ".x", "j", 2, 2).ok());
  AwaitReports(*sink, 2);
  EXPECT_EQ(ReportOf(1)->status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(ReportOf(1)->status.message()), HasSubstr("message size exceeds"));
  EXPECT_TRUE(ReportOf(2)->status.ok()) << ReportOf(2)->status;
}

// The fix is the caller's (its flags differ: run --no-declare, dead-letter replay);
// without one the error says to create the stream.
TEST_F(NatsSinkTest, APassiveCheckOfAMissingStreamFailsWithTheCallersFix) {
  SinkOptions options = Options(Declare::kPassive);
  options.stream.fix_if_missing = "do this";
  auto sink = NewSink(options, {});
  ASSERT_FALSE(sink.ok());
  EXPECT_EQ(sink.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(sink.status().message()),
              HasSubstr(absl::StrCat("JetStream stream ", stream_, " does not exist at ", url_,
                                     "; do this")));
  EXPECT_FALSE(client_->Stream(stream_).has_value()) << "a passive check created it";
  sink = NewSink(Options(Declare::kPassive), {});
  ASSERT_FALSE(sink.ok());
  EXPECT_THAT(std::string(sink.status().message()), HasSubstr("; create it"));
}

TEST_F(NatsSinkTest, AMessageNatsCannotCarryIsRefusedAtProduce) {
  auto sink = MakeSink(Options());
  ASSERT_NE(sink, nullptr);
  EXPECT_EQ(Send(*sink, prefix_ + ".a b", "k", 1, 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Send(*sink, prefix_ + ".>", "k", 1, 1).code(), absl::StatusCode::kInvalidArgument);
  const std::vector<sink::Header> bad = {{"x", "line\r\nNats-Msg-Id: 1"}};
  EXPECT_EQ(
      sink->Produce({.topic = prefix_ + ".x", .key = "k", .value = "{}", .headers = bad}).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(sink->InFlight(), 0);
}

// A plain subscriber takes the message but sends no PubAck: nothing is reported OK,
// the sink publishes it again after ack_wait with the same Nats-Msg-Id; once a stream
// other than the sink's takes the subject, the publish is refused (the sink expects
// its own stream) and the message is a dead letter naming why.
TEST_F(NatsSinkTest, OnlyAPubAckConfirmsAndAMissingOneIsPublishedAgain) {
  auto sink = [&] {
    SinkOptions options = Options();
    options.ack_wait = absl::Milliseconds(300);
    return MakeSink(options);
  }();
  ASSERT_NE(sink, nullptr);
  const std::string silent = "silent_" + prefix_ + ".x";
  natsSubscription* sub = nullptr;
  ASSERT_EQ(natsConnection_SubscribeSync(&sub, client_->nc(), silent.c_str()), NATS_OK);
  ASSERT_EQ(natsConnection_Flush(client_->nc()), NATS_OK);

  ASSERT_TRUE(Send(*sink, silent, "k", 7, 7).ok());
  std::vector<std::string> ids;
  WaitUntil(
      absl::Seconds(30), [&] { return ids.size() >= 2; },
      [&] {
        sink->Poll(50);
        natsMsg* m = nullptr;
        if (natsSubscription_NextMsg(&m, sub, 10) == NATS_OK) {
          const char* id = nullptr;
          natsMsgHeader_Get(m, "Nats-Msg-Id", &id);
          ids.push_back(id == nullptr ? "" : id);
          natsMsg_Destroy(m);
        }
      });
  EXPECT_THAT(ids, ::testing::ElementsAre("7", "7")) << "published again, same id";
  EXPECT_TRUE(reports_.empty()) << "reported without a PubAck";
  EXPECT_GE(sink->counters().republished, 1u);
  natsSubscription_Destroy(sub);

  client_->AddStream("S_silent_" + prefix_, silent);
  AwaitReports(*sink, 1);
  // The sink expects its own stream: another stream's subject is a dead letter.
  EXPECT_EQ(reports_[0].status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(reports_[0].status.message()), HasSubstr("belongs to another stream"));
}

TEST(NatsRedactedUrl, HidesUserInformationOfEveryServer) {
  EXPECT_EQ(RedactedUrl("nats://alice:s3cret@127.0.0.1:4222, tls://tok@h:4443,nats://h:1"),
            "nats://***@127.0.0.1:4222,tls://***@h:4443,nats://h:1");
}

TEST_F(NatsSinkTest, CredentialsAreNeverLogged) {
  test::CapturedLog log;
  // A closed port: the sink starts disconnected and says so, naming the URL.
  SinkOptions options = Options();
  options.url = "nats://alice:s3cret@127.0.0.1:1";
  options.password = "pa55word";
  options.user = "bob";
  auto sink = NewSink(options, {});
  ASSERT_TRUE(sink.ok()) << sink.status();
  const std::string text = log.Take();
  EXPECT_THAT(text, HasSubstr("nats://***@127.0.0.1:1"));
  EXPECT_THAT(text, Not(HasSubstr("s3cret")));
  EXPECT_THAT(text, Not(HasSubstr("pa55word")));
}

// A server that requires a user: a wrong password ends Create with Unauthenticated
// and a message that names neither password; the right one publishes.
TEST_F(NatsSinkTest, ARefusedLoginEndsCreateWithoutNamingThePassword) {
  PrivateNatsServer server("'authorization { user: alice, password: right-pa55 }'");
  test::CapturedLog log;
  SinkOptions options = Options();
  options.url = server.url();
  options.user = "alice";
  options.password = "wrong-pa55";
  auto refused = NewSink(options, {});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnauthenticated) << refused.status();
  EXPECT_THAT(std::string(refused.status().message()), Not(HasSubstr("pa55")));

  options.password = "right-pa55";
  auto sink = MakeSink(options);
  ASSERT_NE(sink, nullptr);
  ASSERT_TRUE(Send(*sink, prefix_ + ".x", "k", 1, 1).ok());
  AwaitReports(*sink, 1);
  EXPECT_TRUE(reports_[0].status.ok()) << reports_[0].status;
  EXPECT_THAT(log.Take(), Not(HasSubstr("pa55")));
}

// A server down when the sink is made: Create succeeds, messages wait (none reported
// OK), and once the server is up the sink creates its stream and delivers them.
TEST_F(NatsSinkTest, AServerDownAtStartIsWaitedFor) {
  PrivateNatsServer server;
  ASSERT_TRUE(server.Kill());
  SinkOptions options = Options();
  options.url = server.url();
  auto sink = MakeSink(options);
  ASSERT_NE(sink, nullptr);
  for (int id = 1; id <= 5; ++id) {
    ASSERT_TRUE(Send(*sink, prefix_ + ".x", "k" + std::to_string(id % 2), id, id).ok());
  }
  for (int i = 0; i < 3; ++i) sink->Poll(100);
  EXPECT_TRUE(reports_.empty()) << "reported with no server";
  ASSERT_TRUE(server.Restart());
  AwaitReports(*sink, 5);
  for (const Report& r : reports_) EXPECT_TRUE(r.status.ok()) << r.tag << ": " << r.status;
  JetStreamClient reader(server.url());
  std::optional<test::StreamSummary> made = reader.Stream(stream_);
  ASSERT_TRUE(made.has_value()) << "the stream was not created once the server came";
  EXPECT_EQ(made->messages, 5u);
}

// With a delivery timeout (the polling relay's attempts), what the server did not
// acknowledge in time is reported failed, never OK.
TEST_F(NatsSinkTest, ADeliveryTimeoutReportsWhatWasNotAcknowledged) {
  PrivateNatsServer server;
  SinkOptions options = Options();
  options.url = server.url();
  auto sink = MakeSink(options, absl::Milliseconds(500));
  ASSERT_NE(sink, nullptr);
  ASSERT_TRUE(server.Kill());
  ASSERT_TRUE(Send(*sink, prefix_ + ".x", "k", 1, 1).ok());
  ASSERT_TRUE(Send(*sink, prefix_ + ".x", "k", 2, 2).ok());
  ASSERT_TRUE(Send(*sink, prefix_ + ".x", "j", 3, 3).ok());
  AwaitReports(*sink, 3, absl::Seconds(30));
  for (const Report& r : reports_) EXPECT_FALSE(r.status.ok()) << r.tag;
  EXPECT_THAT(std::string(ReportOf(1)->status.message()),
              HasSubstr("not acknowledged by JetStream"));
  EXPECT_EQ(sink->InFlight(), 0);
}

// kill -9 of the server while events are published, then a restart on the same file
// store: every acknowledged event is in the stream once, per-key order holds, and the
// sink delivers the rest by itself.
TEST_F(NatsSinkTest, KillNineOfTheServerLosesNothingAcknowledged) {
  PrivateNatsServer server;
  SinkOptions options = Options();
  options.url = server.url();
  options.ack_wait = absl::Seconds(1);
  auto sink = MakeSink(options);
  ASSERT_NE(sink, nullptr);
  // The kill comes from another thread while this one goes on producing: messages
  // are at the server, their PubAcks lost, when it dies.
  constexpr int kEvents = 20000;
  std::atomic<bool> killed{false};
  std::atomic<size_t> acked_at_kill{0};
  std::thread killer([&] {
    WaitUntil(
        absl::Seconds(60), [&] { return reported_.load() >= 1000; }, absl::Milliseconds(1));
    acked_at_kill = reported_.load();
    server.Kill();
    killed = true;
    server.Restart();  // the outage: as long as the restart takes
  });
  for (int id = 1; id <= kEvents; ++id) {
    // 100 keys: up to 100 messages at the server at once.
    ASSERT_TRUE(Send(*sink, prefix_ + ".x", "k" + std::to_string(id % 100), id, id).ok());
    sink->Poll(0);
    while (sink->InFlight() >= 2000) sink->Poll(100);  // the relay's window
  }
  killer.join();
  ASSERT_TRUE(killed);
  AwaitReports(*sink, kEvents, absl::Seconds(120));
  for (const Report& r : reports_) ASSERT_TRUE(r.status.ok()) << r.tag << ": " << r.status;

  JetStreamClient reader(server.url());
  std::vector<StoredMessage> stored = reader.ReadAll(stream_, prefix_ + ".>");
  std::map<std::string, int> count;
  std::map<std::string, int> last_of_key;
  for (const StoredMessage& m : stored) {
    const std::string id = m.Header("id");
    ++count[id];
    const std::string key = m.Header("aggregate_id");
    EXPECT_GT(std::stoi(id), last_of_key[key]) << "key " << key << " out of order";
    last_of_key[key] = std::stoi(id);
  }
  int lost = 0, duplicated = 0;
  for (int id = 1; id <= kEvents; ++id) {
    const int n = count[std::to_string(id)];
    if (n == 0) ++lost;
    if (n > 1) ++duplicated;
  }
  EXPECT_EQ(lost, 0);
  EXPECT_EQ(duplicated, 0);
  EXPECT_EQ(stored.size(), static_cast<size_t>(kEvents));
  std::printf(
      "kill -9: %zu acknowledged before the kill, %d events, republished %llu, "
      "duplicate acks %llu\n",
      acked_at_kill.load(), kEvents, static_cast<unsigned long long>(sink->counters().republished),
      static_cast<unsigned long long>(sink->counters().duplicates));
}

}  // namespace
}  // namespace outboxd::nats
