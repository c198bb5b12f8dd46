// FeedbackRule (relay/feedback_rule.h): what a standby status update reports and when,
// on a clock the test gives: coalesced, on the timer with a reply asked, at once when
// asked, never a received position below the flush, a keepalive's position confirmed
// only with nothing pending, and a batched stream's confirmations never held back.
#include "relay/feedback_rule.h"

#include "gtest/gtest.h"

namespace outboxd::relay {
namespace {

using Urgency = FeedbackRule::Urgency;

constexpr absl::Duration kInterval = absl::Seconds(10);
const absl::Time kStart = absl::FromUnixSeconds(1796299200);

// A rule whose stream (re)started at `start`, nothing sent yet.
FeedbackRule Restarted(pg::Lsn start) {
  FeedbackRule rule(kInterval);
  rule.Restart(start, kInterval);
  return rule;
}

// A rule whose stream started at `start` and has sent its first feedback at kStart.
FeedbackRule Started(pg::Lsn start) {
  FeedbackRule rule = Restarted(start);
  std::optional<FeedbackRule::Report> first =
      rule.Decide({.watermark = start, .received = start}, kStart, Urgency::kWhenDue);
  EXPECT_TRUE(first.has_value()) << "a new stream's first feedback is due at once";
  if (first) rule.Sent(*first, kStart);
  return rule;
}

TEST(RelayFeedbackRule, ANewStreamReportsAtOnceAskingForAReply) {
  const std::optional<FeedbackRule::Report> report =
      Restarted(100).Decide({.watermark = 100, .received = 100}, kStart, Urgency::kWhenDue);
  ASSERT_TRUE(report.has_value());
  EXPECT_EQ(report->flush, 100u);
  EXPECT_EQ(report->reply, Reply::kRequested);
}

TEST(RelayFeedbackRule, AMovedWatermarkIsReportedAtMostOncePerTenMilliseconds) {
  FeedbackRule rule = Started(100);
  const FeedbackRule::Position moved{.watermark = 200, .received = 300};
  EXPECT_FALSE(rule.Decide(moved, kStart + absl::Milliseconds(9), Urgency::kWhenDue))
      << "within 10 ms of the last feedback";
  EXPECT_EQ(rule.UntilDue(moved.watermark, kStart + absl::Milliseconds(9)), absl::Milliseconds(10));
  const std::optional<FeedbackRule::Report> report =
      rule.Decide(moved, kStart + absl::Milliseconds(10), Urgency::kWhenDue);
  ASSERT_TRUE(report.has_value());
  EXPECT_EQ(report->flush, 200u);
  EXPECT_EQ(report->received, 300u);
  EXPECT_EQ(report->reply, Reply::kNotNeeded) << "not the timer's";
  rule.Sent(*report, kStart + absl::Milliseconds(10));
  EXPECT_FALSE(rule.Decide(moved, kStart + absl::Seconds(1), Urgency::kWhenDue))
      << "nothing new, the timer not due";
}

TEST(RelayFeedbackRule, TheTimerReportsAnUnmovedWatermarkAndAsksForAReply) {
  FeedbackRule rule = Started(100);
  const FeedbackRule::Position still{.watermark = 100, .received = 100};
  EXPECT_FALSE(rule.Decide(still, kStart + kInterval - absl::Milliseconds(1), Urgency::kWhenDue));
  EXPECT_EQ(rule.UntilDue(still.watermark, kStart + absl::Seconds(4)), absl::Seconds(6));
  const std::optional<FeedbackRule::Report> report =
      rule.Decide(still, kStart + kInterval, Urgency::kWhenDue);
  ASSERT_TRUE(report.has_value());
  EXPECT_EQ(report->reply, Reply::kRequested);
}

TEST(RelayFeedbackRule, AKeepaliveAskingForAReplyIsAnsweredAtOnce) {
  FeedbackRule rule = Started(100);
  const std::optional<FeedbackRule::Report> report =
      rule.Decide({.watermark = 100, .received = 150}, kStart, Urgency::kNow);
  ASSERT_TRUE(report.has_value());
  EXPECT_EQ(report->flush, 100u);
  EXPECT_EQ(report->received, 150u);
}

TEST(RelayFeedbackRule, TheReceivedPositionIsNeverBelowTheFlush) {
  // A backfill's watermark (its consistent point) is past anything read from a stream.
  const std::optional<FeedbackRule::Report> report =
      Restarted(0).Decide({.watermark = 500, .received = 0}, kStart, Urgency::kNow);
  ASSERT_TRUE(report.has_value());
  EXPECT_EQ(report->received, 500u);
}

TEST(RelayFeedbackRule, ABatchedStreamsConfirmationsAreNotCoalesced) {
  FeedbackRule rule = Started(100);
  const std::optional<FeedbackRule::Report> report =
      rule.Decide({.watermark = 200, .received = 200, .batched = true}, kStart, Urgency::kWhenDue);
  ASSERT_TRUE(report.has_value()) << "the bulk catch-up's next chunk waits for it";
  EXPECT_EQ(report->flush, 200u);
}

TEST(RelayFeedbackRule, AKeepalivesPositionIsConfirmedOnlyWithNothingPending) {
  EXPECT_TRUE(FeedbackRule::ConfirmsKeepalive({}));
  EXPECT_FALSE(FeedbackRule::ConfirmsKeepalive({.in_flight = true}));
  EXPECT_FALSE(FeedbackRule::ConfirmsKeepalive({.held = true}))
      << "a transaction held for the standbys lies before the keepalive's position";
}

TEST(RelayFeedbackRule, AFailoverForgetsTheFlushSentOnTheOldTimeline) {
  FeedbackRule rule = Started(5000);
  rule.Forget();
  // The new timeline's slot position, below the old one, is new to the rule.
  EXPECT_TRUE(rule.Decide({.watermark = 5000, .received = 5000}, kStart + absl::Milliseconds(10),
                          Urgency::kWhenDue))
      << "the watermark differs from the forgotten flush";
}

}  // namespace
}  // namespace outboxd::relay
