// AckTracker without PostgreSQL or Kafka: the watermark rules of docs/architecture.md.
#include "relay/ack_tracker.h"

#include <algorithm>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace outboxd::relay {
namespace {

// A transaction of one event, begun at `lsn` and committed (its end at `commit`).
AckTracker::TxId OneEventTransaction(AckTracker& t, pg::Lsn lsn, pg::Lsn commit,
                                     int64_t commit_time_us = 0) {
  const AckTracker::TxId tx = t.Begin(lsn, commit_time_us);
  t.AddEvent(tx);
  t.Commit(commit);
  return tx;
}

TEST(AckTracker, StartsAtTheSlotPosition) {
  AckTracker t(500);
  EXPECT_EQ(t.watermark(), 500u);
  EXPECT_TRUE(t.Idle());
}

TEST(AckTracker, ConfirmsATransactionOnlyAfterEveryEventIsAcked) {
  AckTracker t(100);
  auto tx = t.Begin(150, 0);
  t.AddEvent(tx);
  t.AddEvent(tx);
  t.AddEvent(tx);
  t.Commit(160);
  t.Ack(tx);
  t.Ack(tx);
  EXPECT_EQ(t.watermark(), 100u) << "confirming on receipt / on a partial ack";
  t.Ack(tx);
  EXPECT_EQ(t.watermark(), 160u);
  EXPECT_TRUE(t.Idle());
}

// Trap "confirming mid-transaction": acks of the rows seen so far must not move
// the watermark while the transaction's Commit has not been decoded.
TEST(AckTracker, NeverConfirmsInsideAnOpenTransaction) {
  AckTracker t(100);
  auto tx = t.Begin(300, 0);
  t.AddEvent(tx);
  t.Ack(tx);
  EXPECT_EQ(t.watermark(), 100u);
  EXPECT_FALSE(t.Idle());
  t.ConfirmIdlePosition(400);
  EXPECT_EQ(t.watermark(), 100u);
  t.Commit(310);
  EXPECT_EQ(t.watermark(), 310u);
}

TEST(AckTracker, OutOfOrderAcksAcrossPartitionsWaitForTheOldestTransaction) {
  AckTracker t(0);
  auto a = OneEventTransaction(t, 10, 11);
  auto b = OneEventTransaction(t, 20, 21);
  auto c = OneEventTransaction(t, 30, 31);
  t.Ack(c);
  t.Ack(b);
  EXPECT_EQ(t.watermark(), 0u) << "a is still unacknowledged";
  EXPECT_EQ(t.transactions_in_flight(), 3u);
  t.Ack(a);
  EXPECT_EQ(t.watermark(), 31u);
  EXPECT_EQ(t.transactions_in_flight(), 0u);
}

TEST(AckTracker, EmptyTransactionCompletesAtCommitBehindEarlierOnes) {
  AckTracker t(0);
  auto a = OneEventTransaction(t, 10, 11);
  t.Begin(20, 0);
  t.Commit(21);  // no outbox rows (e.g. PostgreSQL < 15 sends empty transactions)
  EXPECT_EQ(t.watermark(), 0u);
  t.Ack(a);
  EXPECT_EQ(t.watermark(), 21u);
}

// Trap "the slot restarts from the last checkpointed position": a replayed
// transaction is published again but the watermark never moves backwards.
TEST(AckTracker, ReplayedTransactionNeverMovesTheWatermarkBack) {
  AckTracker t(1000);
  auto tx = OneEventTransaction(t, 500, 510);
  t.Ack(tx);
  EXPECT_EQ(t.watermark(), 1000u);
  t.ConfirmIdlePosition(900);
  EXPECT_EQ(t.watermark(), 1000u);
}

TEST(AckTracker, IdlePositionIsConfirmedOnlyWhenNothingIsInFlight) {
  AckTracker t(0);
  auto tx = OneEventTransaction(t, 10, 11);
  t.ConfirmIdlePosition(5000);
  EXPECT_EQ(t.watermark(), 0u);
  t.Ack(tx);
  t.ConfirmIdlePosition(5000);
  EXPECT_EQ(t.watermark(), 5000u);
}

TEST(AckTracker, FailedEventHoldsTheWatermarkUntilResolved) {
  AckTracker t(0);
  auto a = OneEventTransaction(t, 10, 11);
  auto b = OneEventTransaction(t, 20, 21);
  t.MarkFailed(a);
  t.Ack(b);
  EXPECT_TRUE(t.has_failed());
  EXPECT_EQ(t.watermark(), 0u);
  t.Ack(a);  // resolved, e.g. written to the dead-letter table
  EXPECT_FALSE(t.has_failed());
  EXPECT_EQ(t.watermark(), 21u);
}

TEST(AckTracker, KnowsTheCommitTimeOfATransactionUntilItsLastEventIsAcked) {
  AckTracker t(100);
  auto first = t.Begin(150, 1'000'000);
  t.AddEvent(first);
  t.AddEvent(first);
  t.Commit(160);
  auto second = OneEventTransaction(t, 170, 180, 2'000'000);
  EXPECT_EQ(t.commit_time(first), 1'000'000);
  EXPECT_EQ(t.commit_time(second), 2'000'000);
  t.Ack(first);
  EXPECT_EQ(t.commit_time(first), 1'000'000) << "one event still outstanding";
  t.Ack(first);
  EXPECT_EQ(t.commit_time(first), std::nullopt) << "a report after the last ack is stale";
  EXPECT_EQ(t.commit_time(second + 1), std::nullopt);
  t.Reset(t.watermark());
  EXPECT_EQ(t.commit_time(second), std::nullopt) << "reset forgets in-flight transactions";
}

TEST(AckTracker, StaleAndDuplicateAcksAreIgnored) {
  AckTracker t(0);
  auto a = OneEventTransaction(t, 10, 11);
  t.Ack(a);
  t.Ack(a);
  t.Ack(a + 7);
  EXPECT_EQ(t.watermark(), 11u);
  EXPECT_EQ(t.events_in_flight(), 0u);
}

TEST(AckTracker, ResetForgetsInFlightTransactionsAndIgnoresTheirLateReports) {
  AckTracker t(100);
  auto a = OneEventTransaction(t, 150, 160);
  auto b = t.Begin(170, 0);  // the session died inside this one
  t.AddEvent(b);
  t.Reset(120);
  EXPECT_TRUE(t.Idle());
  EXPECT_EQ(t.watermark(), 120u);
  auto c = t.Begin(150, 0);  // streamed again in the new session
  EXPECT_NE(c, a);
  EXPECT_NE(c, b);
  t.AddEvent(c);
  t.Commit(160);
  t.Ack(a);  // a late report of the old session
  t.Ack(b);
  EXPECT_EQ(t.watermark(), 120u);
  t.Ack(c);
  EXPECT_EQ(t.watermark(), 160u);
  t.Reset(50);  // an older slot position (PostgreSQL crash) never moves it back
  EXPECT_EQ(t.watermark(), 160u);
}

TEST(AckTracker, OldestUnackedCommitTimeIsTheFirstIncompleteTransaction) {
  AckTracker t(0);
  EXPECT_FALSE(t.oldest_unacked_commit_time().has_value());
  auto a = OneEventTransaction(t, 10, 11, 111);
  OneEventTransaction(t, 20, 21, 222);
  EXPECT_EQ(t.oldest_unacked_commit_time(), 111);
  t.Ack(a);
  EXPECT_EQ(t.oldest_unacked_commit_time(), 222);
}

// Random interleavings: the watermark is always the end of the newest fully-acked
// prefix, and never decreases.
TEST(AckTracker, RandomAckOrderMatchesAReferenceModel) {
  std::mt19937 rng(42);
  for (int round = 0; round < 200; ++round) {
    AckTracker t(0);
    std::vector<AckTracker::TxId> pending;
    std::vector<int> remaining;
    std::vector<uint64_t> ends;
    const int txs = 1 + rng() % 30;
    for (int i = 0; i < txs; ++i) {
      auto tx = t.Begin(100 * (i + 1), 0);
      int events = rng() % 4;
      for (int e = 0; e < events; ++e) {
        t.AddEvent(tx);
        pending.push_back(tx);
      }
      t.Commit(100 * (i + 1) + 1);
      remaining.push_back(events);
      ends.push_back(100 * (i + 1) + 1);
    }
    std::shuffle(pending.begin(), pending.end(), rng);
    uint64_t last = 0;
    for (auto tx : pending) {
      t.Ack(tx);
      --remaining[tx];
      uint64_t expected = 0;
      for (size_t i = 0; i < remaining.size() && remaining[i] == 0; ++i) expected = ends[i];
      ASSERT_EQ(t.watermark(), expected);
      ASSERT_GE(t.watermark(), last);
      last = t.watermark();
    }
    EXPECT_EQ(t.watermark(), ends.back());
  }
}

// A failover: the new timeline starts below the old one's positions, which name
// nothing on it; Rebase takes the slot's position even though it is older.
TEST(AckTracker, RebaseMovesTheWatermarkBackToTheNewTimelinesPosition) {
  AckTracker t(0);
  auto a = OneEventTransaction(t, 900, 1000);
  t.Ack(a);
  ASSERT_EQ(t.watermark(), 1000u);
  t.Reset(400);
  EXPECT_EQ(t.watermark(), 1000u) << "a reset never moves it back";
  t.Rebase(400);
  EXPECT_EQ(t.watermark(), 400u);
  auto b = OneEventTransaction(t, 450, 500);
  t.Ack(a);  // a late report of the old timeline
  EXPECT_EQ(t.watermark(), 400u);
  t.Ack(b);
  EXPECT_EQ(t.watermark(), 500u);
}

}  // namespace
}  // namespace outboxd::relay
