// AckTracker's per-event cost on the relay's hot path: Begin/AddEvent/Commit as the
// stream is read, then Ack as delivery reports arrive, with `window` transactions in
// flight between the two (the producer's pipeline), one event per transaction as in
// the benchmarks' single-row load.
#include <cstdint>

#include "benchmark/benchmark.h"
#include "relay/ack_tracker.h"

namespace outboxd::relay {
namespace {

void BM_AckTrackerRecordAckWatermark(benchmark::State& state) {
  const int64_t window = state.range(0);
  AckTracker tracker(0);
  pg::Lsn lsn = 1000;
  AckTracker::TxId oldest = 0;
  int64_t in_flight = 0;
  for (auto _ : state) {
    AckTracker::TxId tx = tracker.Begin(lsn, 0);
    tracker.AddEvent(tx);
    tracker.Commit(lsn + 50);
    lsn += 100;
    if (++in_flight > window) {
      tracker.Ack(oldest++);
      --in_flight;
    }
    benchmark::DoNotOptimize(tracker.watermark());
  }
  while (in_flight-- > 0) tracker.Ack(oldest++);
  // Every transaction acknowledged: the watermark is the last one's end.
  if (tracker.watermark() != lsn - 50 || tracker.events_in_flight() != 0) {
    state.SkipWithError("watermark did not reach the last commit");
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_AckTrackerRecordAckWatermark)->Arg(1)->Arg(100)->Arg(10000);

}  // namespace
}  // namespace outboxd::relay
