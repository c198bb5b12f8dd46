#include "support/allocation_counter.h"

#include <atomic>
#include <cstdlib>
#include <new>

namespace {
std::atomic<bool> counting{false};
std::atomic<int> allocations{0};
std::atomic<std::size_t> largest{0};

void* CountedAlloc(std::size_t size) {
  if (counting.load(std::memory_order_relaxed)) {
    allocations.fetch_add(1);
    std::size_t seen = largest.load();
    while (size > seen && !largest.compare_exchange_weak(seen, size)) {
    }
  }
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

namespace outboxd::testing {
namespace {

// Runs `fn` with both figures reset and counted.
void CountDuring(const std::function<void()>& fn) {
  allocations = 0;
  largest = 0;
  counting = true;
  fn();
  counting = false;
}

}  // namespace

int AllocationsDuring(const std::function<void()>& fn) {
  CountDuring(fn);
  return allocations.load();
}

size_t LargestAllocationDuring(const std::function<void()>& fn) {
  CountDuring(fn);
  return largest.load();
}

}  // namespace outboxd::testing
