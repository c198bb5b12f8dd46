// The relay's produce path per event: the five contract headers built on the stack
// and Publisher::Produce (librdkafka copies key, value and headers into its queue),
// with delivery reports served every 1,000 events as the relay's loop does. Against
// librdkafka's mock cluster in this process (one broker, one partition); the broker's
// own work runs on librdkafka's threads, so "CPU" here is the enqueue side only.
#include <array>
#include <cstdint>
#include <span>
#include <string>

#include "absl/time/time.h"
#include "benchmark/benchmark.h"
#include "kafka/mock_cluster.h"
#include "kafka/publisher.h"

namespace outboxd::kafka {
namespace {

void BM_ProduceEnqueueWithHeaders(benchmark::State& state) {
  auto cluster = MockCluster::Create(1);
  if (!cluster.ok() || !(*cluster)->CreateTopic("bench", 1, 1).ok()) {
    state.SkipWithError("mock cluster did not start");
    return;
  }
  int64_t acked = 0;
  auto publisher = Publisher::Create({.brokers = (*cluster)->bootstraps()},
                                     [&acked](const DeliveryReport& r) { acked += r.status.ok(); });
  if (!publisher.ok()) {
    state.SkipWithError("publisher did not start");
    return;
  }
  const std::string payload(state.range(0), 'x');
  const std::string lsn = "0/16B3748";
  int64_t produced = 0;
  for (auto _ : state) {
    const std::array<Header, 5> headers = {{{"id", "0b6f3c1e-2b1a-4c55-9d2e-7f00d1c0ffee"},
                                            {"type", "pedido.confirmado"},
                                            {"aggregate_id", "pedido-77"},
                                            {"created_at", "2026-12-02T12:22:45.123+00:00"},
                                            {"lsn", lsn}}};
    absl::Status s = (*publisher)->Produce({.topic = "bench",
                                            .key = "pedido-77",
                                            .value = payload,
                                            .headers = std::span<const Header>(headers).first(
                                                static_cast<size_t>(state.range(1))),
                                            .tag = static_cast<uint64_t>(produced)});
    if (!s.ok()) {
      (*publisher)->Poll(10);  // queue full: serve reports and go on
      continue;
    }
    if (++produced % 1000 == 0) (*publisher)->Poll(0);
  }
  // After the timed loop: every enqueued event must reach the broker.
  if (!(*publisher)->Flush(absl::Seconds(60)).ok() || acked != produced) {
    state.SkipWithError("not every produced event was acknowledged");
  }
  state.SetItemsProcessed(produced);
  state.SetBytesProcessed(produced * static_cast<int64_t>(payload.size()));
}
// Args: payload bytes, headers (0 shows what the five contract headers cost).
BENCHMARK(BM_ProduceEnqueueWithHeaders)
    ->Args({200, 5})
    ->Args({200, 0})
    ->Args({1024, 5})
    ->Iterations(200000);

}  // namespace
}  // namespace outboxd::kafka
