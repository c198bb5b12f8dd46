// FeedbackRule: what the relay reports to PostgreSQL in a standby status update, and
// when. The whole rule, as pg_recvlogical and the apply worker's send_feedback hold
// it, read top to bottom in Decide():
//   - flush is the AckTracker's watermark: never past an unacknowledged event;
//   - a keepalive's position is confirmed only when nothing is pending (no event in
//     flight, no transaction open or held for the standbys): everything before it was
//     published or not ours (docs/architecture.md trap "idle slot pins WAL");
//   - sent on the timer (asking for a reply, so the walsender says how far it has
//     read), at once when a keepalive asked for a reply, and when the watermark moved,
//     coalesced to one message per kFeedbackCoalesce; a batched stream's feedback
//     (the bulk catch-up's, relay/bulk_stream.h) is no message and is not coalesced;
//   - the received position reported is never below the flush.
// The pipeline (relay/pipeline.cc) asks it each turn and sends what it says; it keeps
// no clock of its own (`now` is given), so tests/relay/feedback_rule_test.cc drives it.
//
//   FeedbackRule rule(interval);
//   rule.Restart(start, interval);                                  // each new stream
//   if (FeedbackRule::ConfirmsKeepalive({.in_flight = ..., .held = ...})) ...
//   if (std::optional<FeedbackRule::Report> r = rule.Decide(position, now, urgency)) {
//     OUTBOXD_RETURN_IF_ERROR(stream->SendFeedback(r->received, r->flush, r->reply));
//     rule.Sent(*r, now);
//   }
#ifndef OUTBOXD_RELAY_FEEDBACK_RULE_H_
#define OUTBOXD_RELAY_FEEDBACK_RULE_H_

#include <optional>

#include "absl/time/time.h"
#include "pg/lsn.h"
#include "relay/change_stream.h"

namespace outboxd::relay {

class FeedbackRule {
 public:
  // kNow: a keepalive asked for a reply, or the last feedback of a stop.
  enum class Urgency { kWhenDue, kNow };
  // Where the relay is when it asks.
  struct Position {
    pg::Lsn watermark = 0;  // AckTracker::watermark()
    pg::Lsn received = 0;   // newest position read from the stream
    bool batched = false;   // ChangeStream::batched()
  };
  // What to send: ChangeStream::SendFeedback's arguments.
  struct Report {
    pg::Lsn received = 0;
    pg::Lsn flush = 0;
    Reply reply = Reply::kNotNeeded;
  };
  // What is pending when a keepalive arrives.
  struct Pending {
    bool in_flight = false;  // a transaction open or not fully acknowledged (!AckTracker::Idle)
    bool held = false;       // a transaction held for the standbys (not in the tracker yet)
  };

  explicit FeedbackRule(absl::Duration interval) : interval_(interval) {}

  // A new stream from `start`, with the session's feedback interval: the first
  // Decide() sends at once.
  void Restart(pg::Lsn start, absl::Duration interval);
  // A failover: the positions sent on the old timeline name nothing on the new one.
  void Forget() { last_sent_flush_ = 0; }

  // Whether a keepalive's position may be confirmed (AckTracker::ConfirmIdlePosition).
  [[nodiscard]] static bool ConfirmsKeepalive(Pending pending) {
    return !pending.in_flight && !pending.held;
  }
  // The feedback to send now, if any.
  [[nodiscard]] std::optional<Report> Decide(const Position& position, absl::Time now,
                                             Urgency urgency) const;
  // `report` went out at `now`.
  void Sent(const Report& report, absl::Time now);
  // How long the loop may sleep before Decide() has something to send (negative:
  // already due) for a relay whose watermark is `watermark`.
  [[nodiscard]] absl::Duration UntilDue(pg::Lsn watermark, absl::Time now) const;

  absl::Duration interval() const { return interval_; }

 private:
  absl::Duration interval_;
  pg::Lsn last_sent_flush_ = 0;
  absl::Time last_feedback_ = absl::InfinitePast();
};

}  // namespace outboxd::relay

#endif  // OUTBOXD_RELAY_FEEDBACK_RULE_H_
