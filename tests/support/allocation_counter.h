// Counts heap allocations, for tests that hold a hot path to zero of them. Linking
// outboxd_test_allocations replaces the global operator new of the test binary.
//
//   EXPECT_EQ(testing::AllocationsDuring([&] { DecodeInto(insert, message); }), 0);
#ifndef OUTBOXD_TESTS_SUPPORT_ALLOCATION_COUNTER_H_
#define OUTBOXD_TESTS_SUPPORT_ALLOCATION_COUNTER_H_

#include <cstddef>
#include <functional>

namespace outboxd::testing {

// Heap allocations (operator new and new[]) made while `fn` runs.
int AllocationsDuring(const std::function<void()>& fn);
// The size of the largest single one of them, in bytes (0: none).
size_t LargestAllocationDuring(const std::function<void()>& fn);

}  // namespace outboxd::testing

#endif  // OUTBOXD_TESTS_SUPPORT_ALLOCATION_COUNTER_H_
