// Micro-benchmarks of the pgoutput decoder on messages captured from a real server.
// docs/performance.md's target: one Insert decoded in <= 100 ns.
//
//   build/bench/pgoutput_benchmark --benchmark_filter=BM_DecodeInsert
#include <cstdint>
#include <string>
#include <variant>

#include "benchmark/benchmark.h"
#include "pgoutput/captured_messages.h"
#include "pgoutput/decoder.h"

namespace outboxd::pgoutput {
namespace {

// Decodes `bytes` into one reused Message per iteration (the relay's hot path) and
// checks the result after the timed loop, so the work cannot be dropped.
template <typename T>
void DecodeLoop(benchmark::State& state, const std::string& bytes) {
  Message message;
  bool all_ok = true;
  for (auto _ : state) {
    all_ok &= DecodeInto(bytes, message).ok();
    benchmark::DoNotOptimize(message);
  }
  if (!all_ok || !std::holds_alternative<T>(message)) {
    state.SkipWithError("decoding failed or produced the wrong message type");
  }
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(bytes.size()));
}

void BM_DecodeInsert(benchmark::State& state) {
  const std::string bytes = testing::FromHex(testing::kInsertOutbox);
  DecodeLoop<Insert>(state, bytes);
  Message check;
  if (DecodeInto(bytes, check).ok() && std::get<Insert>(check).tuple.size() != 10) {
    state.SkipWithError("outbox Insert should have 10 columns");
  }
}
BENCHMARK(BM_DecodeInsert);

void BM_DecodeBegin(benchmark::State& state) {
  DecodeLoop<Begin>(state, testing::FromHex(testing::kBeginSingleInsert));
}
BENCHMARK(BM_DecodeBegin);

void BM_DecodeCommit(benchmark::State& state) {
  DecodeLoop<Commit>(state, testing::FromHex(testing::kCommitSingleInsert));
}
BENCHMARK(BM_DecodeCommit);

void BM_DecodeRelation(benchmark::State& state) {
  DecodeLoop<Relation>(state, testing::FromHex(testing::kRelationOutbox));
}
BENCHMARK(BM_DecodeRelation);

// The allocating entry point, for comparison: a fresh Message per call.
void BM_DecodeInsertFresh(benchmark::State& state) {
  const std::string bytes = testing::FromHex(testing::kInsertOutbox);
  int64_t columns = 0;
  for (auto _ : state) {
    absl::StatusOr<Message> message = Decode(bytes);
    columns += message.ok() ? static_cast<int64_t>(std::get<Insert>(*message).tuple.size()) : 0;
  }
  if (columns != 10 * state.iterations()) state.SkipWithError("decoding failed");
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_DecodeInsertFresh);

// Inserts of N text columns of 16 bytes: cost per column, and the step past the
// Tuple's inline capacity of 16 (heap storage, reused across calls).
void BM_DecodeInsertColumns(benchmark::State& state) {
  const int columns = static_cast<int>(state.range(0));
  std::string bytes("I\x00\x00\x40\x01N", 6);
  bytes.push_back(static_cast<char>(columns >> 8));
  bytes.push_back(static_cast<char>(columns & 0xff));
  for (int i = 0; i < columns; ++i)
    bytes += std::string("t\x00\x00\x00\x10", 5) + std::string(16, 'v');
  DecodeLoop<Insert>(state, bytes);
}
BENCHMARK(BM_DecodeInsertColumns)->RangeMultiplier(2)->Range(1, 64);

}  // namespace
}  // namespace outboxd::pgoutput
