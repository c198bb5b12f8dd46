// CatchUpPlan (relay/catch_up_plan.h): a backlog of at least --bulk-catch-up is read in
// bulk, unless the server's position is unknown, the role may not read the slot
// through SQL, or a bulk catch-up failed before in a way a retry will not fix; each
// fallback says why, and the role is asked only when bulk is on the table.
#include "relay/catch_up_plan.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace outboxd::relay {
namespace {

using ::testing::HasSubstr;
using Mode = CatchUpPlan::Mode;

constexpr uint64_t kThreshold = uint64_t{16} << 20;
constexpr pg::Lsn kStart = 0x30000000;

// A role that may read the slot, counting how often it was asked.
struct Role {
  std::string refusal;
  int asked = 0;
  CatchUpPlan::Refusal Ask() {
    return [this]() -> absl::StatusOr<std::string> {
      ++asked;
      return refusal;
    };
  }
};

CatchUpPlan::Decision Choose(const CatchUpPlan& plan, pg::Lsn start,
                             const absl::StatusOr<pg::Lsn>& server, Role& role) {
  absl::StatusOr<CatchUpPlan::Decision> decision = plan.Choose(start, server, role.Ask());
  EXPECT_TRUE(decision.ok()) << decision.status();
  return decision.value_or(CatchUpPlan::Decision{});
}

TEST(CatchUpPlan, ABacklogOfAtLeastTheThresholdIsReadInBulk) {
  CatchUpPlan plan(kThreshold);
  Role role;
  const CatchUpPlan::Decision at = Choose(plan, kStart, kStart + kThreshold, role);
  EXPECT_EQ(at.mode, Mode::kBulk) << at.reason;
  EXPECT_FALSE(at.warn);
  EXPECT_EQ(role.asked, 1);

  const CatchUpPlan::Decision below = Choose(plan, kStart, kStart + kThreshold - 1, role);
  EXPECT_EQ(below.mode, Mode::kStream);
  EXPECT_FALSE(below.warn) << "a small backlog is no fallback";
  EXPECT_THAT(below.reason, HasSubstr("below --bulk-catch-up"));
  EXPECT_EQ(role.asked, 1) << "no query for the role when bulk is out anyway";
}

TEST(CatchUpPlan, AServerBehindTheStartOrUnknownStreams) {
  CatchUpPlan plan(kThreshold);
  Role role;
  EXPECT_EQ(Choose(plan, kStart, kStart - 1, role).mode, Mode::kStream);
  EXPECT_EQ(Choose(plan, kStart, absl::UnavailableError("no connection"), role).mode,
            Mode::kStream);
  EXPECT_EQ(role.asked, 0);
}

TEST(CatchUpPlan, ThresholdZeroNeverReadsInBulk) {
  CatchUpPlan plan(0);
  Role role;
  EXPECT_EQ(Choose(plan, 0, pg::Lsn{1} << 40, role).mode, Mode::kStream);
}

TEST(CatchUpPlan, ARoleWithoutReplicationStreamsWithAWarningNamingTheFix) {
  CatchUpPlan plan(kThreshold);
  Role role{.refusal =
                "bulk catch-up needs the REPLICATION attribute on role app "
                "(ALTER ROLE app REPLICATION)"};
  const CatchUpPlan::Decision d = Choose(plan, kStart, kStart + kThreshold, role);
  EXPECT_EQ(d.mode, Mode::kStream);
  EXPECT_TRUE(d.warn);
  EXPECT_EQ(d.reason,
            "bulk catch-up needs the REPLICATION attribute on role app (ALTER ROLE app "
            "REPLICATION); streaming the backlog instead");
}

TEST(CatchUpPlan, TheRolesQueryFailingFailsTheChoice) {
  CatchUpPlan plan(kThreshold);
  const absl::StatusOr<CatchUpPlan::Decision> d =
      plan.Choose(kStart, kStart + kThreshold,
                  []() -> absl::StatusOr<std::string> { return absl::UnavailableError("lost"); });
  EXPECT_EQ(d.status().code(), absl::StatusCode::kUnavailable);
}

TEST(CatchUpPlan, AFailureARetryWillNotFixMakesEveryLaterSessionStream) {
  CatchUpPlan plan(kThreshold);
  Role role;
  // A reconnect after a lost connection tries the bulk catch-up again.
  absl::Status lost = plan.SessionEnded(absl::UnavailableError("connection lost"));
  EXPECT_EQ(lost.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(Choose(plan, kStart, kStart + kThreshold, role).mode, Mode::kBulk);

  const absl::Status marked = GiveUpBulk(absl::InternalError("temporary file size exceeds"));
  const absl::Status ended = plan.SessionEnded(marked);
  EXPECT_FALSE(GivesUpBulk(ended)) << "the mark is the plan's alone";
  EXPECT_EQ(ended.ToString(), absl::InternalError("temporary file size exceeds").ToString())
      << "what RepeatedFailure and the log see is unchanged";
  const CatchUpPlan::Decision after = Choose(plan, kStart, kStart + kThreshold, role);
  EXPECT_EQ(after.mode, Mode::kStream);
  EXPECT_TRUE(after.warn);
  EXPECT_THAT(after.reason, HasSubstr("bulk catch-up failed before"));
}

}  // namespace
}  // namespace outboxd::relay
