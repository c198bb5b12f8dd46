// The fault schedule of a chaos run: which fault, when, for how long, drawn from one
// seed so that a failing run can be replayed with the same faults at the same times.
//
//   std::vector<Fault> faults = MakeSchedule(seed, absl::Minutes(5));
//   for (const Fault& f : faults) std::puts(Describe(f).c_str());
#ifndef OUTBOXD_TESTS_CHAOS_SCHEDULE_H_
#define OUTBOXD_TESTS_CHAOS_SCHEDULE_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace outboxd::chaos {

enum class FaultKind {
  kRelayKill,        // kill -9 of a relay (the active one, mostly); restarted at once
  kBrokersDown,      // every mock broker down, then up again
  kSlowBroker,       // round-trip delay injected on every broker
  kProduceErrors,    // retriable produce errors (relays switched to one request in flight)
  kPostgresRestart,  // pg_ctl restart -m immediate: a crash and recovery
  kWalsenderKill,    // pg_terminate_backend of the slot's walsender
};
inline constexpr std::array<FaultKind, 6> kAllFaultKinds = {
    FaultKind::kRelayKill,     FaultKind::kBrokersDown,     FaultKind::kSlowBroker,
    FaultKind::kProduceErrors, FaultKind::kPostgresRestart, FaultKind::kWalsenderKill};

struct Fault {
  absl::Duration at;  // from the start of the load
  FaultKind kind;
  absl::Duration length = absl::ZeroDuration();  // outage / slowness / error window
  int rtt_ms = 0;                                // kSlowBroker
  int error_code = 0;                            // kProduceErrors: a retriable Kafka error
  int error_count = 0;                           // kProduceErrors: requests that fail
  bool kill_standby = false;                     // kRelayKill: the standby instead
};

// "relay-kill", "brokers-down", ...
std::string KindName(FaultKind kind);
// One line: "relay-kill (active)", "slow-broker rtt 350 ms for 4.2s", ...
std::string Describe(const Fault& fault);

// Faults one after another from `warmup` until `run` ends. Kinds are dealt from a
// shuffled deck of all six, so every kind occurs once in each six faults (a one-
// minute run sees each of them).
std::vector<Fault> MakeSchedule(uint64_t seed, absl::Duration run,
                                absl::Duration warmup = absl::Seconds(3));

}  // namespace outboxd::chaos

#endif  // OUTBOXD_TESTS_CHAOS_SCHEDULE_H_
