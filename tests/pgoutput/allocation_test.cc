// DecodeInto on the hot path must not touch the heap: an Insert of up to 16 columns
// fits the Tuple's inline storage, and a wider one reuses the buffer of the previous
// row. Counted by tests/support/allocation_counter.h.
#include <string>

#include "gtest/gtest.h"
#include "pgoutput/captured_messages.h"
#include "pgoutput/decoder.h"
#include "support/allocation_counter.h"

namespace outboxd::pgoutput {
namespace {

using ::outboxd::testing::AllocationsDuring;

TEST(PgoutputDecoder, DecodeIntoInsertDoesNotAllocate) {
  const std::string insert = testing::FromHex(testing::kInsertOutbox);
  const std::string altered = testing::FromHex(testing::kInsertOutboxAltered);
  const std::string begin = testing::FromHex(testing::kBeginSingleInsert);
  const std::string commit = testing::FromHex(testing::kCommitSingleInsert);
  Message message;
  const int count = AllocationsDuring([&] {
    // A transaction as the relay sees it, into one Message switching alternatives.
    for (int i = 0; i < 100; ++i) {
      ASSERT_TRUE(DecodeInto(begin, message).ok());
      ASSERT_TRUE(DecodeInto(insert, message).ok());
      ASSERT_TRUE(DecodeInto(altered, message).ok());
      ASSERT_TRUE(DecodeInto(commit, message).ok());
    }
  });
  EXPECT_EQ(count, 0);
}

TEST(PgoutputDecoder, DecodeIntoWideInsertReusesItsBuffer) {
  // 40 NULL columns: past the inline capacity of 16.
  std::string wide = std::string("I\x00\x00\x40\x01N\x00\x28", 8) + std::string(40, 'n');
  Message message;
  ASSERT_TRUE(DecodeInto(wide, message).ok());
  ASSERT_EQ(std::get<Insert>(message).tuple.size(), 40u);
  const int count = AllocationsDuring([&] {
    for (int i = 0; i < 100; ++i) ASSERT_TRUE(DecodeInto(wide, message).ok());
  });
  EXPECT_EQ(count, 0);
}

TEST(PgoutputDecoder, CountingAllocatorSeesAllocations) {
  // Guards the two tests above against a counter that never counts.
  const int count = AllocationsDuring([] {
    auto* p = new std::string(100, 'x');
    delete p;
  });
  EXPECT_GE(count, 1);
}

}  // namespace
}  // namespace outboxd::pgoutput
