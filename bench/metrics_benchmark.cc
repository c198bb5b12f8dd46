// What /metrics costs the relay per acknowledged event: the by-topic counter (a cached
// lookup), the latency histogram, and the clock read and health stamp RecordAck adds.
#include <array>
#include <string>

#include "absl/time/clock.h"
#include "benchmark/benchmark.h"
#include "observe/health.h"
#include "observe/metrics.h"

namespace {

const std::array<std::string, 2> kTopics = {"pedido.confirmado", "pedido.cancelado"};

void BM_MetricsAcknowledged(benchmark::State& state) {
  outboxd::observe::Metrics metrics(outboxd::observe::RelayMode::kCdc);
  size_t i = 0;
  for (auto _ : state) {
    metrics.Acknowledged(kTopics[i++ & 1], 0.0015);
  }
  state.SetItemsProcessed(state.iterations());
  // Checked after the loop so the work cannot be dropped.
  if (metrics.Render().find("outboxd_events_published_total{topic=\"pedido.confirmado\"}") ==
      std::string::npos) {
    state.SkipWithError("no by-topic counter");
  }
}
BENCHMARK(BM_MetricsAcknowledged);

// Everything Relay::RecordAck does besides the AckTracker lookup.
void BM_RecordAckMetricsPath(benchmark::State& state) {
  outboxd::observe::Metrics metrics(outboxd::observe::RelayMode::kCdc);
  outboxd::observe::HealthState health;
  const int64_t commit_us = absl::ToUnixMicros(absl::Now());
  size_t i = 0;
  for (auto _ : state) {
    const absl::Time now = absl::Now();
    metrics.Acknowledged(kTopics[i++ & 1],
                         static_cast<double>(absl::ToUnixMicros(now) - commit_us) / 1e6);
    health.Acknowledged(now);
  }
  state.SetItemsProcessed(state.iterations());
  benchmark::DoNotOptimize(health.Snapshot());
}
BENCHMARK(BM_RecordAckMetricsPath);

}  // namespace
