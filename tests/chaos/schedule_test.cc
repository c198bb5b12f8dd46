// The fault schedule: every kind of a sink's deck occurs in the short runs the ctests
// make (chaos_one_minute: Kafka, 60 s; chaos_rabbitmq: RabbitMQ, 45 s; chaos_nats:
// NATS, 45 s), whatever the seed, and a seed replays the same schedule.
#include "chaos/schedule.h"

#include <set>

#include "gtest/gtest.h"

namespace outboxd::chaos {
namespace {

std::set<FaultKind> Kinds(const std::vector<Fault>& faults) {
  std::set<FaultKind> kinds;
  for (const Fault& f : faults) kinds.insert(f.kind);
  return kinds;
}

TEST(ChaosSchedule, AShortRunSeesEveryKindOfItsSink) {
  for (uint64_t seed = 0; seed < 500; ++seed) {
    EXPECT_EQ(Kinds(MakeSchedule(seed, absl::Seconds(60), kKafkaFaultKinds)).size(),
              kKafkaFaultKinds.size())
        << "Kafka, seed " << seed;
    EXPECT_EQ(Kinds(MakeSchedule(seed, absl::Seconds(45), kRabbitFaultKinds)),
              std::set<FaultKind>(kRabbitFaultKinds.begin(), kRabbitFaultKinds.end()))
        << "RabbitMQ, seed " << seed;
    EXPECT_EQ(Kinds(MakeSchedule(seed, absl::Seconds(45), kNatsFaultKinds)),
              std::set<FaultKind>(kNatsFaultKinds.begin(), kNatsFaultKinds.end()))
        << "NATS, seed " << seed;
  }
}

TEST(ChaosSchedule, ASeedReplaysTheSameFaults) {
  const std::vector<Fault> a = MakeSchedule(42, absl::Minutes(5), kRabbitFaultKinds);
  const std::vector<Fault> b = MakeSchedule(42, absl::Minutes(5), kRabbitFaultKinds);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(Describe(a[i]), Describe(b[i]));
    EXPECT_EQ(a[i].at, b[i].at);
  }
}

// chaos_failover (a minute): 45 s on a primary and its standby see a promote and a
// switchover already.
TEST(ChaosSchedule, AShortReplicaRunSeesEveryFailoverKind) {
  for (uint64_t seed = 0; seed < 500; ++seed) {
    EXPECT_EQ(Kinds(MakeSchedule(seed, absl::Seconds(45), kReplicaFaultKinds)),
              std::set<FaultKind>(kReplicaFaultKinds.begin(), kReplicaFaultKinds.end()))
        << "replica, seed " << seed;
  }
}

}  // namespace
}  // namespace outboxd::chaos
