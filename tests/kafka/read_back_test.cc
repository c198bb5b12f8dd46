// ReadBackTopic (kafka/read_back.h) against librdkafka's mock cluster over TCP: which
// of one relay's messages a topic holds, back to the window's start, by id, lsn and
// key (sink::HeldIdentity), each copy counted; other producers' messages ignored; the
// fallbacks named.
#include "kafka/read_back.h"

#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kafka/mock_cluster.h"
#include "kafka/publisher.h"
#include "support/wait_until.h"

namespace outboxd::kafka {
namespace {

using ::testing::ElementsAre;
using ::testing::Field;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::UnorderedElementsAreArray;

constexpr char kTopic[] = "pedido.confirmado";
constexpr char kMark[] = "app/outboxd";
constexpr int kTopicAuthorizationFailed = 29;

// One message as a relay (or another producer) sends it.
struct Sent {
  std::string id;
  uint64_t lsn = 0;          // 0: no lsn header
  std::string mark = kMark;  // empty: no outboxd_slot header
  std::string key = "77";
  std::string value = "{}";
};

std::string LsnText(uint64_t lsn) {
  return absl::StrCat(absl::Hex(lsn >> 32, absl::kNoPad), "/",
                      absl::Hex(lsn & 0xffffffff, absl::kNoPad));
}

class ReadBackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto cluster = MockCluster::Create(1);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
    auto publisher = Publisher::Create({.brokers = cluster_->bootstraps()},
                                       [](const DeliveryReport& r) { ASSERT_TRUE(r.status.ok()); });
    ASSERT_TRUE(publisher.ok()) << publisher.status();
    publisher_ = std::move(*publisher);
  }

  void Send(const std::vector<Sent>& messages, const std::string& topic = kTopic) {
    for (const Sent& m : messages) {
      const std::string lsn = LsnText(m.lsn);
      std::vector<Header> headers = {{"id", m.id}};
      if (m.lsn != 0) headers.push_back({"lsn", lsn});
      if (!m.mark.empty()) headers.push_back({"outboxd_slot", m.mark});
      ASSERT_TRUE(
          publisher_->Produce({.topic = topic, .key = m.key, .value = m.value, .headers = headers})
              .ok());
    }
    ASSERT_TRUE(publisher_->Flush(absl::Seconds(10)).ok());
  }

  TopicHoldings Read(uint64_t since, int64_t max_messages = 400000,
                     const std::string& topic = kTopic,
                     absl::Duration timeout = absl::Seconds(10)) {
    absl::StatusOr<TopicHoldings> held = ReadBackTopic({.brokers = cluster_->bootstraps(),
                                                        .mark_name = "outboxd_slot",
                                                        .mark_value = kMark,
                                                        .since = since,
                                                        .not_before_ms = not_before_ms_,
                                                        .max_messages = max_messages,
                                                        .timeout = timeout},
                                                       topic);
    EXPECT_TRUE(held.ok()) << held.status();
    return held.ok() ? std::move(*held) : TopicHoldings{};
  }

  // Publisher::Held's answer about the message `id` at `lsn` with `key` in `topic`, for
  // window 1 from 0/15.
  // `lsn` 0: a backfilled row's question, any lsn.
  static sink::HeldAnswer Held(Publisher& publisher, std::string_view topic, std::string_view id,
                               uint64_t lsn, int64_t max_messages = 0,
                               std::string_view key = "77") {
    const std::string lsn_text = LsnText(lsn);
    absl::StatusOr<sink::HeldAnswer> answer = publisher.Held({.topic = topic,
                                                              .id = id,
                                                              .lsn = lsn_text,
                                                              .key = key,
                                                              .any_lsn = lsn == 0,
                                                              .mark = {"outboxd_slot", kMark},
                                                              .since = 0x15,
                                                              .window = 1,
                                                              .max_messages = max_messages});
    EXPECT_TRUE(answer.ok()) << answer.status();
    return answer.ok() ? *answer : sink::HeldAnswer{};
  }

  // The ids of the messages found, once per copy.
  static std::vector<std::string> Ids(const TopicHoldings& held) {
    std::vector<std::string> ids;
    for (const auto& [identity, lsns] : held.messages) {
      const size_t colon = identity.find(':');
      const std::string id = identity.substr(colon + 1, std::stoul(identity.substr(0, colon)));
      ids.insert(ids.end(), lsns.size(), id);
    }
    return ids;
  }
  static std::set<std::string> IdSet(const TopicHoldings& held) {
    const std::vector<std::string> ids = Ids(held);
    return {ids.begin(), ids.end()};
  }

  // The time now, in ms, with every message sent so far stamped before it.
  static int64_t Cut() {
    absl::SleepFor(absl::Milliseconds(2));
    const int64_t cut = absl::ToUnixMillis(absl::Now());
    absl::SleepFor(absl::Milliseconds(2));
    return cut;
  }

  // Read's not_before_ms: the window's events cannot have been made earlier.
  int64_t not_before_ms_ = 0;
  std::unique_ptr<MockCluster> cluster_;
  std::unique_ptr<Publisher> publisher_;
};

TEST(ParseLsnHeader, ReadsXSlashYAndRefusesAnythingElse) {
  EXPECT_EQ(ParseLsnHeader("0/16B3748"), 0x16B3748u);
  EXPECT_EQ(ParseLsnHeader("1/0"), uint64_t{1} << 32);
  EXPECT_EQ(ParseLsnHeader(""), 0u);
  EXPECT_EQ(ParseLsnHeader("16B3748"), 0u);
  EXPECT_EQ(ParseLsnHeader("0/zz"), 0u);
}

TEST_F(ReadBackTest, FindsThisRelaysIdsBackToTheFirstMessageBelowTheWindow) {
  ASSERT_TRUE(cluster_->CreateTopic(kTopic, 1, 1).ok());
  std::vector<Sent> sent;
  for (int i = 1; i <= 20; ++i)
    sent.push_back({.id = absl::StrCat("e", i), .lsn = uint64_t(i) * 16});
  Send(sent);
  // Window from 0/A0 (event 10's position): event 9 lies below it, the read stops there.
  TopicHoldings held = Read(/*since=*/10 * 16);
  std::vector<std::string> expected;
  for (int i = 9; i <= 20; ++i) expected.push_back(absl::StrCat("e", i));
  // Chunks are whole: what lies before the boundary in the last chunk may be read too,
  // harmless (the same id is the same event); nothing of the window may be missing.
  const std::set<std::string> ids = IdSet(held);
  for (const std::string& id : expected) EXPECT_TRUE(ids.contains(id)) << id;
  EXPECT_THAT(held.fallbacks, IsEmpty());
  EXPECT_EQ(held.partitions, 1);
}

// The gap case: a message the broker refused (a dead letter, too large) is absent, and
// stays absent whatever came after it. Presence is only ever by id.
TEST_F(ReadBackTest, AGapInThePartitionIsNeverTakenForPresent) {
  ASSERT_TRUE(cluster_->CreateTopic(kTopic, 1, 1).ok());
  Send({{.id = "e1", .lsn = 0x10}, {.id = "e3", .lsn = 0x30}, {.id = "e4", .lsn = 0x40}});
  TopicHoldings held = Read(/*since=*/0x20);
  EXPECT_THAT(Ids(held), UnorderedElementsAreArray({"e1", "e3", "e4"}));
}

// Another producer on the topic, even one copying the id and lsn headers: its messages
// are neither taken for this relay's nor end the read early.
TEST_F(ReadBackTest, OtherProducersMessagesAreIgnored) {
  ASSERT_TRUE(cluster_->CreateTopic(kTopic, 1, 1).ok());
  Send({{.id = "e1", .lsn = 0x10},
        {.id = "e2", .lsn = 0x20},
        {.id = "theirs-1", .lsn = 0x1, .mark = ""},
        {.id = "theirs-2", .lsn = 0x1, .mark = "other/outboxd"},
        {.id = "e3", .lsn = 0x30},
        {.id = "theirs-3", .mark = ""}});
  TopicHoldings held = Read(/*since=*/0x15);
  EXPECT_THAT(Ids(held), UnorderedElementsAreArray({"e1", "e2", "e3"}));
  EXPECT_THAT(held.fallbacks, IsEmpty());
}

// Several partitions read at once, a window over many chunks (500, 1,000, 2,000, ...).
TEST_F(ReadBackTest, ReadsEveryPartitionBackAcrossManyChunks) {
  ASSERT_TRUE(cluster_->CreateTopic(kTopic, 4, 1).ok());
  std::vector<Sent> sent;
  for (int i = 1; i <= 6000; ++i) {
    sent.push_back(
        {.id = absl::StrCat("e", i), .lsn = uint64_t(i) * 16, .key = absl::StrCat("agg-", i % 13)});
  }
  Send(sent);
  TopicHoldings held = Read(/*since=*/100 * 16);
  const std::set<std::string> ids = IdSet(held);
  for (int i = 100; i <= 6000; ++i) ASSERT_TRUE(ids.contains(absl::StrCat("e", i))) << i;
  EXPECT_THAT(held.fallbacks, IsEmpty());
  EXPECT_EQ(held.partitions, 4);
}

// A relay new to a topic others write to has no message of its own to stop at: a chunk
// made wholly before the window's first commit ends the read instead of the limit.
TEST_F(ReadBackTest, AChunkMadeBeforeTheWindowEndsTheReadOfARelayNewToTheTopic) {
  ASSERT_TRUE(cluster_->CreateTopic(kTopic, 1, 1).ok());
  std::vector<Sent> theirs;
  for (int i = 1; i <= 3000; ++i) theirs.push_back({.id = absl::StrCat("t", i), .mark = "o/x"});
  Send(theirs);
  not_before_ms_ = Cut();
  Send({{.id = "e1", .lsn = 0x20}, {.id = "e2", .lsn = 0x30}});
  TopicHoldings held = Read(/*since=*/0x15);
  EXPECT_THAT(Ids(held), UnorderedElementsAreArray({"e1", "e2"}));
  EXPECT_EQ(held.messages_read, 1500) << "the newest 500, then 1,000 all older: not all 3,002";
  EXPECT_THAT(held.fallbacks, IsEmpty());
  EXPECT_FALSE(held.clock_disagrees);
}

// Only a chunk *wholly* older ends a read: the window's messages among older ones (a
// chunk across the window's first commit) are all read.
TEST_F(ReadBackTest, AChunkHoldingAnyMessageOfTheWindowDoesNotEndTheRead) {
  ASSERT_TRUE(cluster_->CreateTopic(kTopic, 1, 1).ok());
  std::vector<Sent> theirs;
  for (int i = 1; i <= 1000; ++i) theirs.push_back({.id = absl::StrCat("t", i), .mark = "o/x"});
  Send(theirs);
  not_before_ms_ = Cut();
  std::vector<Sent> ours;
  for (int i = 1; i <= 600; ++i) ours.push_back({.id = absl::StrCat("e", i), .lsn = 0x20});
  Send(ours);
  TopicHoldings held = Read(/*since=*/0x15);
  EXPECT_EQ(Ids(held).size(), 600u);
  EXPECT_EQ(held.messages_read, 1600) << "500 ours, 1,000 with 100 ours, then the last 100";
}

// This relay's own message of the window stamped before its commit could be: the
// clocks disagree, so age ends no read (it runs to the window's start or its limit) and
// the answer says so.
TEST_F(ReadBackTest, AnOwnMessageOlderThanTheWindowTurnsTheAgeBoundOff) {
  ASSERT_TRUE(cluster_->CreateTopic(kTopic, 1, 1).ok());
  std::vector<Sent> theirs;
  for (int i = 1; i <= 1000; ++i) theirs.push_back({.id = absl::StrCat("t", i), .mark = "o/x"});
  Send(theirs);
  Send({{.id = "e1", .lsn = 0x20}});
  not_before_ms_ = Cut();
  TopicHoldings held = Read(/*since=*/0x15);
  EXPECT_THAT(Ids(held), ElementsAre("e1"));
  EXPECT_TRUE(held.clock_disagrees);
  EXPECT_EQ(held.messages_read, 1001);
}

TEST_F(ReadBackTest, ATopicTheClusterDoesNotHaveHoldsNothingAndIsNotCreated) {
  ASSERT_TRUE(cluster_->CreateTopic(kTopic, 1, 1).ok());
  TopicHoldings held = Read(/*since=*/0x10, 400000, "nobody.wrote.this");
  EXPECT_THAT(held.messages, IsEmpty());
  EXPECT_THAT(held.fallbacks, IsEmpty());
  EXPECT_EQ(held.partitions, 0);
}

// More to read than the limit without meeting the window's start: what was read holds,
// and the partition falls back to at least once, saying why.
TEST_F(ReadBackTest, AWindowLargerThanTheLimitFallsBackNamingIt) {
  ASSERT_TRUE(cluster_->CreateTopic(kTopic, 1, 1).ok());
  std::vector<Sent> sent;
  for (int i = 1; i <= 1200; ++i) sent.push_back({.id = absl::StrCat("e", i), .lsn = 0x1000});
  Send(sent);
  TopicHoldings held = Read(/*since=*/0x10, /*max_messages=*/400);
  EXPECT_TRUE(IdSet(held).contains("e1200"));
  ASSERT_EQ(held.fallbacks.size(), 1u);
  EXPECT_EQ(held.fallbacks[0].reason, "window_too_large");
  EXPECT_EQ(held.fallbacks[0].partition, 0);
}

// Retention deleted where the window may begin: the mock cluster keeps 5 MB per
// partition and drops the oldest batches past that, as retention.bytes would. The
// message below the window is gone, so the read reaches the low watermark without
// meeting it: what it read holds, and the partition falls back, naming retention.
TEST_F(ReadBackTest, RetentionThatDeletedTheWindowsStartFallsBackNamingIt) {
  ASSERT_TRUE(cluster_->CreateTopic(kTopic, 1, 1).ok());
  Send({{.id = "e0", .lsn = 0x10}});  // a batch of its own, the first to go
  std::vector<Sent> sent;
  for (int i = 1; i <= 700; ++i) {
    sent.push_back({.id = absl::StrCat("e", i), .lsn = 0x1000, .value = std::string(10000, 'x')});
  }
  Send(sent);
  TopicHoldings held = Read(/*since=*/0x20);
  EXPECT_FALSE(IdSet(held).contains("e0"));
  EXPECT_TRUE(IdSet(held).contains("e700"));
  ASSERT_EQ(held.fallbacks.size(), 1u);
  EXPECT_EQ(held.fallbacks[0].reason, "retention");
}

// A principal that may produce but not read: nothing is taken for held, the reason named.
TEST_F(ReadBackTest, NoReadPermissionFallsBackNamingIt) {
  ASSERT_TRUE(cluster_->CreateTopic(kTopic, 1, 1).ok());
  Send({{.id = "e1", .lsn = 0x10}, {.id = "e2", .lsn = 0x20}});
  cluster_->PushFetchErrors(kTopicAuthorizationFailed, 50);
  TopicHoldings held = Read(/*since=*/0x15);
  EXPECT_THAT(held.messages, IsEmpty());
  EXPECT_THAT(held.fallbacks, ElementsAre(Field(&ReadBackFallback::reason, "no_read_permission")));
}

// Brokers that do not answer cost a read-back its timeout, not more (no 5 s metadata
// wait per partition), and every partition falls back, saying why.
TEST_F(ReadBackTest, BrokersThatDoNotAnswerCostTheTimeoutAndNoMore) {
  ASSERT_TRUE(cluster_->CreateTopic(kTopic, 4, 1).ok());
  Send({{.id = "e1", .lsn = 0x10}});
  ASSERT_TRUE(cluster_->SetAllBrokersDown().ok());
  const absl::Time start = absl::Now();
  TopicHoldings held = Read(/*since=*/0x15, 400000, kTopic, absl::Seconds(1));
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  EXPECT_THAT(held.messages, IsEmpty());
  EXPECT_THAT(held.fallbacks, Not(IsEmpty()));
}

// One window's read-backs share a budget: once it is spent on a topic whose brokers do
// not answer, the next topic falls back at once (timeout), unread; the relay resumes
// within the budget however many topics it publishes to.
TEST_F(ReadBackTest, HeldSpendsAtMostTheWindowsBudgetOnAllTopicsTogether) {
  auto publisher =
      Publisher::Create({.brokers = cluster_->bootstraps(), .read_back_budget = absl::Seconds(1)},
                        [](const DeliveryReport&) {});
  ASSERT_TRUE(publisher.ok()) << publisher.status();
  ASSERT_TRUE(cluster_->CreateTopic(kTopic, 1, 1).ok());
  ASSERT_TRUE(cluster_->CreateTopic("other.topic", 1, 1).ok());
  ASSERT_TRUE(cluster_->SetAllBrokersDown().ok());
  const absl::Time start = absl::Now();
  EXPECT_THAT(Held(**publisher, kTopic, "e1", 0x10).fallbacks, Not(IsEmpty()));
  const sink::HeldAnswer other = Held(**publisher, "other.topic", "e1", 0x10);
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  ASSERT_EQ(other.fallbacks.size(), 1u);
  EXPECT_EQ(other.fallbacks[0].first, "timeout");
  EXPECT_FALSE(other.held);
}

// The relay's limit (relay::ReadBackLimit, twice --max-in-flight) reaches the read-back:
// a window larger than it falls back, naming it.
TEST_F(ReadBackTest, HeldReadsNoMoreThanTheQuerysLimit) {
  ASSERT_TRUE(cluster_->CreateTopic(kTopic, 1, 1).ok());
  std::vector<Sent> sent;
  for (int i = 1; i <= 1200; ++i) sent.push_back({.id = absl::StrCat("e", i), .lsn = 0x1000});
  Send(sent);
  const sink::HeldAnswer answer = Held(*publisher_, kTopic, "e1200", 0x1000, /*max_messages=*/400);
  EXPECT_TRUE(answer.held);
  ASSERT_EQ(answer.fallbacks.size(), 1u);
  EXPECT_EQ(answer.fallbacks[0].first, "window_too_large");
}

// Publisher::Held reads a topic back once per window and answers from that; a reconnect
// may resume from the same position after the publisher sent more, so a new window
// reads again even with the same start.
TEST_F(ReadBackTest, HeldReadsTheTopicBackAgainForEachNewWindow) {
  ASSERT_TRUE(cluster_->CreateTopic(kTopic, 1, 1).ok());
  Send({{.id = "e1", .lsn = 0x10}, {.id = "e2", .lsn = 0x20}});
  auto held = [&](const char* id, uint64_t lsn, uint64_t window) {
    const std::string lsn_text = LsnText(lsn);
    absl::StatusOr<sink::HeldAnswer> answer = publisher_->Held({.topic = kTopic,
                                                                .id = id,
                                                                .lsn = lsn_text,
                                                                .key = "77",
                                                                .mark = {"outboxd_slot", kMark},
                                                                .since = 0x15,
                                                                .window = window});
    EXPECT_TRUE(answer.ok()) << answer.status();
    return answer.ok() && answer->held;
  };
  EXPECT_TRUE(held("e2", 0x20, 1));
  EXPECT_FALSE(held("e3", 0x30, 1));
  Send({{.id = "e3", .lsn = 0x30}});  // sent in window 1, after its read-back
  EXPECT_FALSE(held("e3", 0x30, 1)) << "window 1 answers from its own read-back";
  EXPECT_TRUE(held("e3", 0x30, 2)) << "same start, new window: read back again";
}

// Two outbox rows may share an id (a table without that key, two partitions of one):
// a message at the broker is an event's only when id, lsn and key all match, and each
// copy answers one question, so a row is never skipped for another row's message.
TEST_F(ReadBackTest, HeldCountsEachMessageByIdLsnAndKeyOncePerCopy) {
  ASSERT_TRUE(cluster_->CreateTopic(kTopic, 1, 1).ok());
  Send({{.id = "dup", .lsn = 0x20, .key = "A"},
        {.id = "dup", .lsn = 0x20, .key = "A"},
        {.id = "dup", .lsn = 0x30, .key = "B"}});
  EXPECT_FALSE(Held(*publisher_, kTopic, "dup", 0x30, 0, "A").held) << "B's message, not A's";
  EXPECT_FALSE(Held(*publisher_, kTopic, "dup", 0x40, 0, "B").held) << "another transaction";
  EXPECT_TRUE(Held(*publisher_, kTopic, "dup", 0x20, 0, "A").held);
  EXPECT_TRUE(Held(*publisher_, kTopic, "dup", 0x20, 0, "A").held);
  EXPECT_FALSE(Held(*publisher_, kTopic, "dup", 0x20, 0, "A").held) << "two copies, three rows";
  EXPECT_TRUE(Held(*publisher_, kTopic, "dup", 0x30, 0, "B").held);
}

// A backfilled row (a re-created slot) does not know the commit LSN the stream sent it
// with: any lsn matches, id and key still must, and each copy answers once.
TEST_F(ReadBackTest, ABackfilledRowMatchesItsMessageWhateverItsLsn) {
  ASSERT_TRUE(cluster_->CreateTopic(kTopic, 1, 1).ok());
  Send({{.id = "e1", .lsn = 0x20, .key = "A"}, {.id = "e2", .lsn = 0x30, .key = "B"}});
  EXPECT_FALSE(Held(*publisher_, kTopic, "e1", 0, 0, "B").held) << "another key";
  EXPECT_TRUE(Held(*publisher_, kTopic, "e1", 0, 0, "A").held);
  EXPECT_FALSE(Held(*publisher_, kTopic, "e1", 0, 0, "A").held) << "one copy, one answer";
  EXPECT_TRUE(Held(*publisher_, kTopic, "e2", 0, 0, "B").held);
}

}  // namespace
}  // namespace outboxd::kafka
