// StandbyHold (relay/standby_hold.h): a committed transaction is released only once
// every named standby has flushed past its commit (a missing one holds it), the hold
// names whom it waits for, and a failover forgets the standbys' positions; a held
// transaction of any size keeps at most its budget in memory, and gives every message
// back in order, from memory then from its file.
#include "relay/standby_hold.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "support/scripted_stream.h"

namespace outboxd::relay {
namespace {

namespace bytes = test::pgoutput_bytes;

// A transaction of `rows` inserts of about `size` bytes each, as pgoutput sends it.
std::vector<std::string> Transaction(int rows, size_t size, pg::Lsn commit, pg::Lsn end) {
  std::vector<std::string> messages = {bytes::Begin(commit, 12345, 700)};
  for (int i = 0; i < rows; ++i) {
    messages.push_back(bytes::Insert(16385, {absl::StrCat("id-", i), "A", "t",
                                             std::string(size, 'x'), "2026-12-04 00:00:00+00"}));
  }
  messages.push_back(bytes::Commit(commit, end, 12345));
  return messages;
}

TEST(StandbyHold, ABigTransactionStaysWithinItsMemoryBudgetAndComesBackInOrder) {
  const std::vector<std::string> tx = Transaction(2000, 2600, 0x5000000, 0x5000030);
  StandbyHold hold(64 * 1024);
  for (const std::string& m : tx) ASSERT_TRUE(hold.Add(m).ok());
  EXPECT_LE(hold.memory_bytes(), 64u * 1024);
  EXPECT_GT(hold.spilled_bytes(), 2000u * 2600 - 64 * 1024);
  EXPECT_TRUE(hold.committed());
  EXPECT_EQ(hold.end(), 0x5000030u);
  EXPECT_EQ(hold.commit_time_pg_us(), 12345);
  EXPECT_EQ(hold.events(), 2000u);

  for (size_t i = 0; i < tx.size(); ++i) {
    absl::StatusOr<std::optional<std::string_view>> next = hold.Next();
    ASSERT_TRUE(next.ok()) << next.status();
    ASSERT_TRUE(next->has_value()) << "message " << i;
    ASSERT_EQ(**next, tx[i]) << "message " << i;
  }
  EXPECT_EQ(hold.events(), 0u);
  absl::StatusOr<std::optional<std::string_view>> done = hold.Next();
  ASSERT_TRUE(done.ok());
  EXPECT_FALSE(done->has_value());
  EXPECT_TRUE(hold.empty());
  EXPECT_FALSE(hold.committed());
  EXPECT_EQ(hold.memory_bytes() + hold.spilled_bytes(), 0u);
}

TEST(StandbyHold, ASmallTransactionNeverTouchesAFileAndClearForgetsIt) {
  const std::vector<std::string> tx = Transaction(3, 100, 0x6000000, 0x6000030);
  StandbyHold hold(64 * 1024);
  for (size_t i = 0; i + 1 < tx.size(); ++i) ASSERT_TRUE(hold.Add(tx[i]).ok());
  EXPECT_FALSE(hold.committed()) << "no Commit yet";
  EXPECT_EQ(hold.events(), 3u);
  EXPECT_EQ(hold.spilled_bytes(), 0u);
  hold.Clear();
  EXPECT_TRUE(hold.empty());
  EXPECT_EQ(hold.events(), 0u);
  EXPECT_EQ(hold.commit_time_pg_us(), 0);
}

TEST(StandbyHold, ATruncatedCommitIsAnError) {
  StandbyHold hold(1024);
  EXPECT_EQ(hold.Add(std::string("C\0\0", 3)).code(), absl::StatusCode::kDataLoss);
}

// Takes every released message; the count.
size_t TakeReleased(StandbyHold& hold) {
  size_t taken = 0;
  while (true) {
    absl::StatusOr<std::optional<std::string_view>> next = hold.Released();
    EXPECT_TRUE(next.ok()) << next.status();
    if (!next.ok() || !next->has_value()) return taken;
    ++taken;
  }
}

TEST(StandbyHold, ACommittedTransactionWaitsUntilEveryStandbyFlushedItsCommit) {
  const std::vector<std::string> tx = Transaction(2, 100, 0x7000000, 0x7000030);
  StandbyHold hold(64 * 1024);
  hold.SetStandbys({{.slot = "a", .flush = 0x7000000}, {.slot = "b", .flush = 0x7000030}});
  for (size_t i = 0; i + 1 < tx.size(); ++i) ASSERT_TRUE(hold.Add(tx[i]).ok());
  EXPECT_FALSE(hold.waiting()) << "not committed yet: the stream is read on";
  EXPECT_EQ(TakeReleased(hold), 0u) << "nothing before its Commit";
  ASSERT_TRUE(hold.Add(tx.back()).ok());

  EXPECT_TRUE(hold.waiting()) << "standby a is behind its commit's end";
  EXPECT_EQ(hold.WaitingFor(), std::vector<std::string>{"a"});
  EXPECT_EQ(TakeReleased(hold), 0u);

  hold.SetStandbys({{.slot = "a", .flush = 0x7000030}, {.slot = "b", .flush = 0x7000030}});
  EXPECT_FALSE(hold.waiting());
  EXPECT_TRUE(hold.WaitingFor().empty());
  EXPECT_EQ(TakeReleased(hold), tx.size()) << "every message, once";
  EXPECT_TRUE(hold.empty());
  EXPECT_FALSE(hold.committed());
}

TEST(StandbyHold, AMissingStandbySlotHoldsEverythingAndIsNamed) {
  const std::vector<std::string> tx = Transaction(1, 100, 0x8000000, 0x8000030);
  StandbyHold hold(64 * 1024);
  // Session::ReadStandbys: a slot that is missing (or has no position) reads 0.
  hold.SetStandbys({{.slot = "a", .flush = 0x9000000}, {.slot = "gone", .flush = 0}});
  for (const std::string& m : tx) ASSERT_TRUE(hold.Add(m).ok());
  EXPECT_TRUE(hold.waiting());
  EXPECT_EQ(hold.WaitingFor(), std::vector<std::string>{"gone"});
  EXPECT_EQ(TakeReleased(hold), 0u);
}

TEST(StandbyHold, NothingIsWaitedForWhenNothingCommittedIsHeld) {
  StandbyHold hold(1024);
  hold.SetStandbys({{.slot = "a", .flush = 0}, {.slot = "b", .flush = 0}});
  EXPECT_FALSE(hold.waiting());
  EXPECT_TRUE(hold.WaitingFor().empty());
}

TEST(StandbyHold, AFailoverForgetsTheStandbysPositionsAndClearKeepsThem) {
  const std::vector<std::string> tx = Transaction(1, 100, 0xA000000, 0xA000030);
  StandbyHold hold(64 * 1024);
  hold.SetStandbys({{.slot = "a", .flush = 0xB000000}});
  for (const std::string& m : tx) ASSERT_TRUE(hold.Add(m).ok());
  EXPECT_FALSE(hold.waiting());
  hold.Forget();  // read on the old timeline
  EXPECT_TRUE(hold.waiting()) << "no position until the standbys are read again";
  hold.Clear();  // a session's end: the transaction is streamed again
  for (const std::string& m : tx) ASSERT_TRUE(hold.Add(m).ok());
  hold.SetStandbys({{.slot = "a", .flush = 0xB000000}});
  hold.Clear();
  for (const std::string& m : tx) ASSERT_TRUE(hold.Add(m).ok());
  EXPECT_FALSE(hold.waiting()) << "the standbys' positions outlive the transaction";
  EXPECT_EQ(TakeReleased(hold), tx.size());
}

}  // namespace
}  // namespace outboxd::relay
