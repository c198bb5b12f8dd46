// /healthz's verdict: healthy only while connected and, with events in flight, while
// the broker acknowledged something within the stall threshold.
#include "observe/health.h"

#include "gtest/gtest.h"

namespace outboxd::observe {
namespace {

const absl::Time kNow = absl::FromUnixSeconds(1'800'000'000);
const absl::Duration kStall = absl::Seconds(30);

TEST(Health, IsUnhealthyWhileNotConnectedWithTheGivenReason) {
  HealthVerdict v = CheckHealth({.connected = false}, kStall, kNow, "not connected to PostgreSQL");
  EXPECT_FALSE(v.healthy);
  EXPECT_EQ(v.reason, "not connected to PostgreSQL");
}

TEST(Health, IsHealthyWhenConnectedAndNothingIsInFlightHoweverOldTheLastAck) {
  HealthVerdict v = CheckHealth(
      {.connected = true, .in_flight = 0, .last_progress = kNow - absl::Hours(5)}, kStall, kNow);
  EXPECT_TRUE(v.healthy);
  EXPECT_EQ(v.reason, "ok");
}

TEST(Health, IsHealthyWhileTheBrokerAcknowledgedWithinTheThreshold) {
  EXPECT_TRUE(
      CheckHealth({.connected = true, .in_flight = 40, .last_progress = kNow - absl::Seconds(29)},
                  kStall, kNow)
          .healthy);
}

TEST(Health, SaysHowLongTheBrokerHasBeenSilentAndWithHowManyEventsInFlight) {
  HealthVerdict v =
      CheckHealth({.connected = true, .in_flight = 40, .last_progress = kNow - absl::Seconds(42)},
                  kStall, kNow);
  EXPECT_FALSE(v.healthy);
  EXPECT_EQ(v.reason, "no broker acknowledgement for 42s with 40 events in flight");
}

// Issue 16: a transaction held for a --standby-slot is not the broker's fault; the
// verdict names the slot it waits for.
TEST(Health, NamesTheStandbySlotAHeldTransactionWaitsFor) {
  HealthVerdict v = CheckHealth({.connected = true,
                                 .in_flight = 1,
                                 .last_progress = kNow - absl::Seconds(42),
                                 .held_by = "node_b"},
                                kStall, kNow);
  EXPECT_FALSE(v.healthy);
  EXPECT_EQ(v.reason,
            "publishing held for 42s: waiting for --standby-slot node_b to flush a committed "
            "transaction (is its standby down or its WAL receiver stuck?)");
  EXPECT_TRUE(CheckHealth({.connected = true,
                           .in_flight = 1,
                           .last_progress = kNow - absl::Seconds(2),
                           .held_by = "node_b"},
                          kStall, kNow)
                  .healthy);
}

// Issue 20 point 1: a slot about to lose WAL is a 503 with its reason, before a stall,
// until the relay clears it.
// Issue 27 point 3: between the sessions of a relay stuck on one position nothing is
// in flight and it is connected most of the time, so only the stuck reason shows it.
TEST(HealthState, AStuckRelayIsUnhealthyAndNotReadyUntilCleared) {
  HealthState state;
  state.SetConnected(true);
  state.SetStuck("stuck: 3 sessions in a row failed at 0/16B3748; last error: x");
  for (const HealthVerdict& v : {CheckHealth(state.Snapshot(), kStall, kNow),
                                 CheckReadiness(state.Snapshot(), kStall, kNow)}) {
    EXPECT_FALSE(v.healthy);
    EXPECT_EQ(v.reason, "stuck: 3 sessions in a row failed at 0/16B3748; last error: x");
  }
  state.SetConnected(false);  // between two sessions: still the reason that matters
  EXPECT_EQ(CheckHealth(state.Snapshot(), kStall, kNow).reason.substr(0, 6), "stuck:");
  state.SetConnected(true);
  state.SetStuck("");
  EXPECT_TRUE(CheckHealth(state.Snapshot(), kStall, kNow).healthy);
}

TEST(HealthState, AnUnreservedSlotIsUnhealthyUntilCleared) {
  HealthState state;
  state.SetConnected(true);
  state.SetSlotProblem("replication slot outboxd is about to lose WAL");
  HealthVerdict v = CheckHealth(state.Snapshot(), kStall, kNow);
  EXPECT_FALSE(v.healthy);
  EXPECT_EQ(v.reason, "replication slot outboxd is about to lose WAL");
  state.SetSlotProblem("");
  EXPECT_TRUE(CheckHealth(state.Snapshot(), kStall, kNow).healthy);
}

// Issue 20 point 15: "in flight" is the gauge's figure; failed attempts are named apart.
TEST(Health, NamesFailedAttemptsApartFromTheEventsInFlight) {
  HealthVerdict v = CheckHealth({.connected = true,
                                 .in_flight = 0,
                                 .failed_attempts = 4,
                                 .last_progress = kNow - absl::Seconds(36)},
                                kStall, kNow);
  EXPECT_FALSE(v.healthy);
  EXPECT_EQ(v.reason,
            "no broker acknowledgement for 36s with 0 events in flight and 4 failed "
            "attempts");
}

TEST(HealthState, StartsTheStallClockAtTheFirstFailedAttemptWithNothingInFlight) {
  HealthState state;
  state.SetConnected(true);
  state.Acknowledged(kNow - absl::Hours(1));
  state.SetFailedAttempts(1, kNow - absl::Seconds(36));  // the clock starts here
  state.SetInFlight(1, kNow - absl::Seconds(20));        // a retry: it keeps running
  state.SetInFlight(0, kNow - absl::Seconds(19));
  state.SetFailedAttempts(2, kNow - absl::Seconds(19));
  HealthInputs in = state.Snapshot();
  EXPECT_EQ(in.in_flight, 0u);
  EXPECT_EQ(in.failed_attempts, 2u);
  EXPECT_EQ(in.last_progress, kNow - absl::Seconds(36));
  EXPECT_FALSE(CheckHealth(in, kStall, kNow).healthy);
  state.Acknowledged(kNow);
  state.SetFailedAttempts(0, kNow);
  EXPECT_TRUE(CheckHealth(state.Snapshot(), kStall, kNow).healthy);
}

TEST(HealthState, StartsTheStallClockWhenEventsGoInFlightAfterNone) {
  HealthState state;
  state.SetConnected(true);
  state.Acknowledged(kNow - absl::Hours(1));  // the last ack of a quiet hour
  state.SetInFlight(0, kNow - absl::Minutes(1));
  state.SetInFlight(3, kNow - absl::Seconds(5));  // 0 -> 3: the clock starts here
  state.SetInFlight(7, kNow - absl::Seconds(1));  // more: the clock keeps running
  HealthInputs in = state.Snapshot();
  EXPECT_TRUE(in.connected);
  EXPECT_EQ(in.in_flight, 7u);
  EXPECT_EQ(in.last_progress, kNow - absl::Seconds(5));
  EXPECT_TRUE(CheckHealth(in, kStall, kNow).healthy);
  EXPECT_FALSE(CheckHealth(in, absl::Seconds(2), kNow).healthy);
}

TEST(HealthState, IsUnhealthyBeforeTheRelayReportsAnything) {
  EXPECT_FALSE(CheckHealth(HealthState().Snapshot(), kStall, kNow).healthy);
}

// /readyz: a standby is ready (it can take over); otherwise the same as /healthz.
TEST(Readiness, IsReadyForAStandbyThatHealthzCallsUnhealthy) {
  HealthInputs standby{.connected = false, .standing_by = true};
  EXPECT_FALSE(CheckHealth(standby, kStall, kNow).healthy);
  HealthVerdict v = CheckReadiness(standby, kStall, kNow);
  EXPECT_TRUE(v.healthy);
  EXPECT_EQ(v.reason, "standing by: another relay holds the slot");
}

TEST(Readiness, FollowsHealthzForAStreamingRelay) {
  HealthInputs ok{.connected = true, .in_flight = 40, .last_progress = kNow - absl::Seconds(5)};
  HealthInputs stalled{
      .connected = true, .in_flight = 40, .last_progress = kNow - absl::Seconds(42)};
  EXPECT_TRUE(CheckReadiness(ok, kStall, kNow).healthy);
  HealthVerdict v = CheckReadiness(stalled, kStall, kNow);
  EXPECT_FALSE(v.healthy);
  EXPECT_EQ(v.reason, "no broker acknowledgement for 42s with 40 events in flight");
}

TEST(Readiness, IsNotReadyWhenNeitherStreamingNorStandingBy) {
  HealthVerdict v = CheckReadiness({.connected = false, .standing_by = false}, kStall, kNow,
                                   "not streaming from PostgreSQL");
  EXPECT_FALSE(v.healthy);
  EXPECT_EQ(v.reason, "not streaming from PostgreSQL");
}

TEST(HealthState, ReportsStandingByUntilTheRelaySaysOtherwise) {
  HealthState state;
  state.SetStandingBy(true);
  EXPECT_TRUE(state.Snapshot().standing_by);
  state.SetStandingBy(false);
  EXPECT_FALSE(state.Snapshot().standing_by);
}

}  // namespace
}  // namespace outboxd::observe
