// DecodeInto on the hot path must not touch the heap: an Insert of up to 16 columns
// fits the Tuple's inline storage, and a wider one reuses the buffer of the previous
// row. Counted by replacing the global operator new in this test binary.
#include <atomic>
#include <cstdlib>
#include <new>
#include <string>

#include "gtest/gtest.h"
#include "pgoutput/captured_messages.h"
#include "pgoutput/decoder.h"

namespace {
std::atomic<bool> counting{false};
std::atomic<int> allocations{0};

void* CountedAlloc(std::size_t size) {
  if (counting.load(std::memory_order_relaxed)) allocations.fetch_add(1);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
}  // namespace

void* operator new(std::size_t size) { return CountedAlloc(size); }
void* operator new[](std::size_t size) { return CountedAlloc(size); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

namespace outboxd::pgoutput {
namespace {

// Counts heap allocations made while `fn` runs.
template <typename Fn>
int AllocationsDuring(Fn fn) {
  allocations = 0;
  counting = true;
  fn();
  counting = false;
  return allocations.load();
}

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
