// sink::KeyOrder, the rule a sink without a partition log keeps: one message per key
// at the broker, the others ready in their turn, and a failed one's followers named
// behind it in order.
#include "sink/key_order.h"

#include <initializer_list>
#include <optional>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace outboxd::sink {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

// A KeyOrder that took `messages` (sequence, key) in order.
KeyOrder Holding(std::initializer_list<std::pair<uint64_t, const char*>> messages) {
  KeyOrder order;
  for (const auto& [seq, key] : messages) order.Add(seq, key);
  return order;
}

// Takes every ready message as a broker would: the ready ones, lowest first.
std::vector<uint64_t> SendReady(KeyOrder& order) {
  std::vector<uint64_t> sent;
  while (std::optional<uint64_t> seq = order.NextReady()) {
    order.Sent(*seq);
    sent.push_back(*seq);
  }
  return sent;
}

TEST(KeyOrder, OnlyTheFirstOfEachKeyIsReady) {
  KeyOrder order = Holding({{1, "a"}, {2, "b"}, {3, "a"}, {4, "c"}, {5, "b"}});
  EXPECT_EQ(order.ready(), 3u);
  EXPECT_THAT(SendReady(order), ElementsAre(1, 2, 4));
  EXPECT_EQ(order.NextReady(), std::nullopt);
}

TEST(KeyOrder, AReportedMessageLetsTheNextOfItsKeyGo) {
  KeyOrder order = Holding({{1, "a"}, {2, "a"}, {3, "a"}});
  EXPECT_THAT(SendReady(order), ElementsAre(1));
  order.Remove(1, "a");
  EXPECT_THAT(SendReady(order), ElementsAre(2));
  order.Remove(2, "a");
  EXPECT_THAT(SendReady(order), ElementsAre(3));
  order.Remove(3, "a");
  EXPECT_THAT(SendReady(order), IsEmpty());
  // The key's line is gone: a new message of it goes at once.
  order.Add(4, "a");
  EXPECT_THAT(SendReady(order), ElementsAre(4));
}

TEST(KeyOrder, AMessageSentAgainGoesBeforeLaterOnes) {
  KeyOrder order = Holding({{1, "a"}, {2, "b"}});
  EXPECT_THAT(SendReady(order), ElementsAre(1, 2));
  order.Add(3, "c");
  // The connection was lost before 1 and 2 were confirmed: both go again, first.
  order.Resend(2);
  order.Resend(1);
  EXPECT_THAT(SendReady(order), ElementsAre(1, 2, 3));
}

TEST(KeyOrder, AFailedMessagesFollowersAreItsKeysLaterOnesInOrder) {
  KeyOrder order = Holding({{1, "a"}, {2, "b"}, {3, "a"}, {4, "b"}, {5, "a"}});
  EXPECT_THAT(SendReady(order), ElementsAre(1, 2));
  EXPECT_THAT(order.Followers(1), ElementsAre(3, 5));
  EXPECT_THAT(order.Followers(2), ElementsAre(4));
  // 1 failed: it and its followers are reported, none of them went to the broker.
  order.Remove(1, "a");
  order.Remove(3, "a");
  order.Remove(5, "a");
  EXPECT_THAT(SendReady(order), IsEmpty());
  order.Remove(2, "b");
  EXPECT_THAT(SendReady(order), ElementsAre(4));
  EXPECT_THAT(order.Followers(4), IsEmpty());
}

TEST(KeyOrder, AMessageReportedWhileReadyLeavesTheReadyList) {
  KeyOrder order = Holding({{1, "a"}, {2, "a"}});
  // Timed out before it was ever sent (the broker unreachable).
  order.Remove(1, "a");
  EXPECT_EQ(order.NextReady(), 2u);
  order.Clear();
  EXPECT_EQ(order.NextReady(), std::nullopt);
  EXPECT_THAT(order.Followers(2), IsEmpty());
}

}  // namespace
}  // namespace outboxd::sink
