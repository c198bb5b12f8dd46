// The fault schedule of a chaos run: which fault, when, for how long, drawn from one
// seed so that a failing run can be replayed with the same faults at the same times.
//
//   std::vector<Fault> faults = MakeSchedule(seed, absl::Minutes(5));
//   for (const Fault& f : faults) std::puts(Describe(f).c_str());
#ifndef OUTBOXD_TESTS_CHAOS_SCHEDULE_H_
#define OUTBOXD_TESTS_CHAOS_SCHEDULE_H_

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
  // RabbitMQ (--sink rabbitmq):
  kConnectionsClosed,  // rabbitmqctl close_all_connections: relays and reader reconnect
  kNodeRestart,        // kill -9 of the node, then a start on the same data
  kMemoryAlarm,        // vm_memory_high_watermark near 0 for a while: publishers blocked
  // NATS (--sink nats):
  kServerDown,   // kill -9 of nats-server, down a while, then a start on the same store
  kServerPause,  // SIGSTOP of nats-server a while (past the sink's 5 s ack wait at times)
  // PostgreSQL failover (--replica, scripts/pg-ha): the standby is promoted and the
  // old primary rebuilt as its standby.
  kPromote,     // the primary dies first (kill -9): a failover
  kSwitchover,  // the primary stops first (fast shutdown): a planned switchover
  // The path between the relays and PostgreSQL (--network, support/fault_proxy.h):
  kPathBlackhole,  // nothing forwarded, every socket open: a half-open connection
  kPathSpike,      // a 2 s stall of every byte, then all at once
  kPathThrottle,   // 64 kB/s each way
  kPathReset,      // every connection reset (RST)
};
// The faults of a run against the mock Kafka cluster.
inline const std::vector<FaultKind> kKafkaFaultKinds = {
    FaultKind::kRelayKill,     FaultKind::kBrokersDown,     FaultKind::kSlowBroker,
    FaultKind::kProduceErrors, FaultKind::kPostgresRestart, FaultKind::kWalsenderKill};
// The faults of a run against a RabbitMQ node.
inline const std::vector<FaultKind> kRabbitFaultKinds = {
    FaultKind::kRelayKill, FaultKind::kConnectionsClosed, FaultKind::kNodeRestart,
    FaultKind::kMemoryAlarm, FaultKind::kPostgresRestart};
// The faults of a run against a NATS server (JetStream, file storage).
inline const std::vector<FaultKind> kNatsFaultKinds = {
    FaultKind::kRelayKill, FaultKind::kServerDown, FaultKind::kServerPause,
    FaultKind::kPostgresRestart, FaultKind::kWalsenderKill};

// The faults of a run with the relays behind a fault proxy (--network): the path's,
// and the relay's and broker's own around them.
inline const std::vector<FaultKind> kNetworkFaultKinds = {
    FaultKind::kPathBlackhole, FaultKind::kPathSpike, FaultKind::kPathThrottle,
    FaultKind::kPathReset,     FaultKind::kRelayKill, FaultKind::kSlowBroker};

// The faults of a run on a primary and its standby (--replica): the failovers, and
// the relay's own faults around them.
inline const std::vector<FaultKind> kReplicaFaultKinds = {
    FaultKind::kPromote, FaultKind::kSwitchover, FaultKind::kRelayKill, FaultKind::kWalsenderKill};

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
// shuffled deck of `kinds`, so every kind occurs once in each len(kinds) faults (a
// one-minute run sees each of them).
std::vector<Fault> MakeSchedule(uint64_t seed, absl::Duration run,
                                const std::vector<FaultKind>& kinds = kKafkaFaultKinds,
                                absl::Duration warmup = absl::Seconds(3));

}  // namespace outboxd::chaos

#endif  // OUTBOXD_TESTS_CHAOS_SCHEDULE_H_
