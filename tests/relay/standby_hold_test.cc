// StandbyHold: a held transaction of any size keeps at most its budget in memory, and
// gives every message back in order, from memory then from its file.
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

}  // namespace
}  // namespace outboxd::relay
