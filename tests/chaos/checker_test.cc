// The chaos checker on hand-made runs: it must see loss, disorder and rolled-back
// events, and must not call a redelivered window disorder.
#include "chaos/checker.h"

#include "gtest/gtest.h"

namespace outboxd::chaos {
namespace {

// Events e1..e4 of aggregate "a", one transaction each, in commit order.
CheckInput FourEvents() {
  CheckInput in;
  for (int i = 1; i <= 4; ++i) {
    in.outbox.push_back({.id = "e" + std::to_string(i), .seq = i, .aggregate = "a"});
  }
  return in;
}

Delivery At(int64_t offset, const std::string& id) {
  const std::string lsn = "0/" + std::to_string(100 + 10 * (id.back() - '0'));
  return {.partition = 0, .offset = offset, .id = id, .aggregate = "a", .lsn = lsn};
}

TEST(ChaosChecker, EverythingDeliveredOnceInOrderPasses) {
  CheckInput in = FourEvents();
  in.deliveries = {At(0, "e1"), At(1, "e2"), At(2, "e3"), At(3, "e4")};
  Verdict v = Check(in);
  EXPECT_TRUE(v.ok());
  EXPECT_EQ(v.published, 4);
  EXPECT_EQ(v.duplicates, 0);
}

TEST(ChaosChecker, ARedeliveredWindowIsDuplicatesNotDisorder) {
  CheckInput in = FourEvents();
  in.deliveries = {At(0, "e1"), At(1, "e2"), At(2, "e3"), At(3, "e2"), At(4, "e3"), At(5, "e4")};
  Verdict v = Check(in);
  EXPECT_TRUE(v.ok()) << v.examples[0];
  EXPECT_EQ(v.duplicates, 2);
}

TEST(ChaosChecker, AnEventFirstSeenAfterALaterOneIsDisorder) {
  CheckInput in = FourEvents();
  in.deliveries = {At(0, "e1"), At(1, "e3"), At(2, "e2"), At(3, "e4")};
  Verdict v = Check(in);
  EXPECT_FALSE(v.ok());
  EXPECT_EQ(v.disorder, 1);
}

TEST(ChaosChecker, AMissingEventIsLost) {
  CheckInput in = FourEvents();
  in.deliveries = {At(0, "e1"), At(1, "e2"), At(2, "e4")};
  Verdict v = Check(in);
  EXPECT_EQ(v.lost, 1);
  EXPECT_FALSE(v.ok());
}

TEST(ChaosChecker, DeadLettersCountAfterKafkaAndMustFollowIt) {
  CheckInput in = FourEvents();
  in.poison = {"e3"};
  in.deliveries = {At(0, "e1"), At(1, "e2")};
  in.dead_letters = {{"e3", "a", "0/130"}, {"e4", "a", "0/140"}, {"e2", "a", "0/120"}};
  Verdict v = Check(in);
  EXPECT_TRUE(v.ok()) << v.examples[0];
  EXPECT_EQ(v.duplicates, 1);  // e2 replayed into the table after it was published
  EXPECT_EQ(v.in_both, 1);

  // e4 published while e3, before it, is dead-lettered: a consumer that replays the
  // dead letters would see e3 after e4.
  in.deliveries.push_back(At(2, "e4"));
  in.dead_letters = {{"e3", "a", "0/130"}};
  v = Check(in);
  EXPECT_EQ(v.disorder, 1);
}

TEST(ChaosChecker, PoisonInKafkaRolledBackAndUnknownEventsFail) {
  CheckInput in = FourEvents();
  in.poison = {"e4"};
  in.rolled_back = {"r1"};
  in.deliveries = {At(0, "e1"), At(1, "e2"), At(2, "e3"), At(3, "e4"), At(4, "r1"), At(5, "x9")};
  Verdict v = Check(in);
  EXPECT_EQ(v.poison_published, 1);
  EXPECT_EQ(v.rolled_back_seen, 1);
  EXPECT_EQ(v.unknown, 1);
  EXPECT_FALSE(v.ok());
}

TEST(ChaosChecker, RowsOfOneTransactionAreOrderedBySeq) {
  CheckInput in;
  in.outbox = {{.id = "a1", .seq = 1, .aggregate = "a"}, {.id = "a2", .seq = 2, .aggregate = "a"}};
  in.deliveries = {{.partition = 0, .offset = 0, .id = "a2", .aggregate = "a", .lsn = "0/50"},
                   {.partition = 0, .offset = 1, .id = "a1", .aggregate = "a", .lsn = "0/50"}};
  EXPECT_EQ(Check(in).disorder, 1);
}

TEST(ChaosChecker, OneEventWithTwoLsnsIsReported) {
  CheckInput in = FourEvents();
  in.deliveries = {At(0, "e1"), At(1, "e2"), At(2, "e3"), At(3, "e4"), At(4, "e4")};
  in.deliveries.back().lsn = "0/999";
  EXPECT_EQ(Check(in).lsn_mismatch, 1);
}

// A failover: e5 was published from the old primary and lost with it (a ghost, not a
// failure); the re-created slot's backfill republished e3 and first published e4,
// both under its consistent point (a second lsn header for e3: a duplicate).
TEST(ChaosChecker, AfterAFailoverAnEventMissingFromTheTableIsAGhostNotAFailure) {
  CheckInput in = FourEvents();
  in.failover = true;
  Delivery backfilled_again = At(4, "e3");
  backfilled_again.lsn = "0/900";
  Delivery backfilled = At(5, "e4");
  backfilled.lsn = "0/900";
  in.deliveries = {At(0, "e1"), At(1, "e2"),      At(2, "e3"),
                   At(3, "e5"), backfilled_again, backfilled};
  Verdict v = Check(in);
  EXPECT_TRUE(v.ok()) << v.examples[0];
  EXPECT_EQ(v.ghosts, 1);
  EXPECT_EQ(v.duplicates, 1);
  EXPECT_EQ(v.lost, 0);

  in.failover = false;  // the same run without a failover: a stranger and a mismatch
  v = Check(in);
  EXPECT_FALSE(v.ok());
  EXPECT_EQ(v.ghosts, 0);
  EXPECT_EQ(v.unknown, 1);
  EXPECT_EQ(v.lsn_mismatch, 1);
}

}  // namespace
}  // namespace outboxd::chaos
