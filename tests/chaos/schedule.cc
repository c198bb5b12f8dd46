#include "chaos/schedule.h"

#include <algorithm>
#include <random>

#include "absl/strings/str_cat.h"

namespace outboxd::chaos {
namespace {

// Retriable produce errors the 2.0.2 mock handles correctly with one request in
// flight: NOT_LEADER_FOR_PARTITION (6) and NOT_ENOUGH_REPLICAS (19). Never
// REQUEST_TIMED_OUT (7): the mock loses the retried batch outright.
constexpr std::array<int, 2> kRetriableErrors = {6, 19};

absl::Duration Uniform(std::mt19937_64& rng, absl::Duration lo, absl::Duration hi) {
  std::uniform_int_distribution<int64_t> ms(absl::ToInt64Milliseconds(lo),
                                            absl::ToInt64Milliseconds(hi));
  return absl::Milliseconds(ms(rng));
}

int UniformInt(std::mt19937_64& rng, int lo, int hi) {
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

// The fault's own parameters and how long it keeps the system busy (a guess used
// only to space the schedule; the driver runs faults one at a time regardless).
absl::Duration Fill(std::mt19937_64& rng, Fault& f) {
  switch (f.kind) {
    case FaultKind::kRelayKill:
      f.kill_standby = UniformInt(rng, 0, 3) == 0;
      return absl::Seconds(1);
    case FaultKind::kBrokersDown:
      f.length = Uniform(rng, absl::Seconds(2), absl::Seconds(6));
      return f.length;
    case FaultKind::kSlowBroker:
      f.length = Uniform(rng, absl::Seconds(2), absl::Seconds(6));
      f.rtt_ms = UniformInt(rng, 50, 800);
      return f.length;
    case FaultKind::kProduceErrors:
      f.length = Uniform(rng, absl::Seconds(1), absl::Seconds(3));
      f.error_code = kRetriableErrors[UniformInt(rng, 0, kRetriableErrors.size() - 1)];
      f.error_count = UniformInt(rng, 1, 8);
      return f.length + absl::Seconds(4);  // two relay restarts around the window
    case FaultKind::kPostgresRestart:
      return absl::Seconds(3);
    case FaultKind::kWalsenderKill:
    case FaultKind::kConnectionsClosed:
      return absl::Seconds(1);
    case FaultKind::kNodeRestart:
      return absl::Seconds(10);  // a boot takes 5-15 s
    case FaultKind::kMemoryAlarm:
      f.length = Uniform(rng, absl::Seconds(2), absl::Seconds(6));
      return f.length + absl::Seconds(2);  // two rabbitmqctl calls
    case FaultKind::kServerDown:
      f.length = Uniform(rng, absl::Milliseconds(200), absl::Seconds(4));
      return f.length + absl::Seconds(1);  // a start takes well under a second
    case FaultKind::kServerPause:
      // Up to 8 s: a pause past the sink's ack wait (5 s, src/nats/sink.h) makes the
      // relay publish again what the server will store when it resumes.
      f.length = Uniform(rng, absl::Seconds(2), absl::Seconds(8));
      return f.length;
    case FaultKind::kPromote:
    case FaultKind::kSwitchover:
      return absl::Seconds(12);  // promote ~1 s, the rebuild (pg_basebackup) ~5-10 s
    case FaultKind::kPathBlackhole:
      // Past the relays' 3 s receive timeout (chaos_main.cc) at times, not always.
      f.length = Uniform(rng, absl::Seconds(1), absl::Seconds(8));
      return f.length + absl::Seconds(2);  // the reconnect
    case FaultKind::kPathSpike:
      f.length = absl::Seconds(2);
      return f.length;
    case FaultKind::kPathThrottle:
      f.length = Uniform(rng, absl::Seconds(2), absl::Seconds(6));
      return f.length;
    case FaultKind::kPathReset:
      return absl::Seconds(1);
  }
  return absl::Seconds(1);
}

}  // namespace

std::string KindName(FaultKind kind) {
  switch (kind) {
    case FaultKind::kRelayKill:
      return "relay-kill";
    case FaultKind::kBrokersDown:
      return "brokers-down";
    case FaultKind::kSlowBroker:
      return "slow-broker";
    case FaultKind::kProduceErrors:
      return "produce-errors";
    case FaultKind::kPostgresRestart:
      return "postgres-restart";
    case FaultKind::kWalsenderKill:
      return "walsender-kill";
    case FaultKind::kConnectionsClosed:
      return "connections-closed";
    case FaultKind::kNodeRestart:
      return "node-kill-restart";
    case FaultKind::kMemoryAlarm:
      return "memory-alarm";
    case FaultKind::kServerDown:
      return "server-kill-restart";
    case FaultKind::kServerPause:
      return "server-pause";
    case FaultKind::kPromote:
      return "promote";
    case FaultKind::kSwitchover:
      return "switchover";
    case FaultKind::kPathBlackhole:
      return "pg-path-blackhole";
    case FaultKind::kPathSpike:
      return "pg-path-spike";
    case FaultKind::kPathThrottle:
      return "pg-path-64kBps";
    case FaultKind::kPathReset:
      return "pg-path-reset";
  }
  return "?";
}

std::string Describe(const Fault& f) {
  const std::string length = absl::FormatDuration(absl::Trunc(f.length, absl::Milliseconds(100)));
  switch (f.kind) {
    case FaultKind::kRelayKill:
      return absl::StrCat(KindName(f.kind), f.kill_standby ? " (standby)" : " (active)");
    case FaultKind::kBrokersDown:
    case FaultKind::kMemoryAlarm:
    case FaultKind::kServerDown:
    case FaultKind::kServerPause:
    case FaultKind::kPathBlackhole:
    case FaultKind::kPathSpike:
    case FaultKind::kPathThrottle:
      return absl::StrCat(KindName(f.kind), " for ", length);
    case FaultKind::kSlowBroker:
      return absl::StrCat(KindName(f.kind), " rtt ", f.rtt_ms, " ms for ", length);
    case FaultKind::kProduceErrors:
      return absl::StrCat(KindName(f.kind), " code ", f.error_code, " x", f.error_count, " within ",
                          length);
    default:
      return KindName(f.kind);
  }
}

std::vector<Fault> MakeSchedule(uint64_t seed, absl::Duration run,
                                const std::vector<FaultKind>& kinds, absl::Duration warmup) {
  std::mt19937_64 rng(seed);
  std::vector<Fault> faults;
  std::vector<FaultKind> deck;
  absl::Duration at = warmup;
  while (true) {
    if (deck.empty()) {
      deck = kinds;
      std::shuffle(deck.begin(), deck.end(), rng);
    }
    Fault f{.at = at, .kind = deck.back()};
    absl::Duration busy = Fill(rng, f);
    if (at + busy > run) break;
    deck.pop_back();
    faults.push_back(f);
    at += busy + Uniform(rng, absl::Milliseconds(500), absl::Seconds(3));
  }
  return faults;
}

}  // namespace outboxd::chaos
