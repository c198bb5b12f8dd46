// FeedbackRule: the standby status updates' content and timing, in one place.
#include "relay/feedback_rule.h"

#include <algorithm>

namespace outboxd::relay {
namespace {

// Confirmations are batched: at most one feedback message per this interval unless
// the server asks for a reply.
constexpr absl::Duration kFeedbackCoalesce = absl::Milliseconds(10);

}  // namespace

void FeedbackRule::Restart(pg::Lsn start, absl::Duration interval) {
  interval_ = interval;
  last_sent_flush_ = start;
  last_feedback_ = absl::InfinitePast();
}

std::optional<FeedbackRule::Report> FeedbackRule::Decide(const Position& position, absl::Time now,
                                                         Urgency urgency) const {
  const pg::Lsn flush = position.watermark;
  // A batched stream's feedback is no message to the server, and the bulk catch-up's
  // next step (the slot's advance at a chunk's end) waits for it: not coalesced.
  const bool moved =
      flush != last_sent_flush_ && (position.batched || now - last_feedback_ >= kFeedbackCoalesce);
  const bool due = now - last_feedback_ >= interval_;
  if (urgency != Urgency::kNow && !moved && !due) return std::nullopt;
  // On the timer, ask for a reply: the walsender answers with a keepalive carrying
  // how far it has read, even while it is catching up through other tables' WAL and
  // would otherwise send nothing until it is done. With nothing pending that position
  // is confirmed (ConfirmsKeepalive), so the slot, and the horizon it proves for the
  // recorded position, keep moving during a long catch-up.
  return Report{.received = std::max(position.received, flush),
                .flush = flush,
                .reply = due ? Reply::kRequested : Reply::kNotNeeded};
}

void FeedbackRule::Sent(const Report& report, absl::Time now) {
  last_sent_flush_ = report.flush;
  last_feedback_ = now;
}

absl::Duration FeedbackRule::UntilDue(pg::Lsn watermark, absl::Time now) const {
  if (watermark != last_sent_flush_) return kFeedbackCoalesce;
  return interval_ - (now - last_feedback_);
}

}  // namespace outboxd::relay
