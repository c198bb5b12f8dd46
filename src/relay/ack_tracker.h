// AckTracker: which transactions still have events the broker has not acknowledged,
// and the confirmed watermark: the end LSN of the newest transaction such that it
// and every earlier one are fully acknowledged. The slot is confirmed to this
// position and never past it (docs/architecture.md traps: "confirming on receipt",
// "confirming mid-transaction", "rows sharing one LSN" -- we track transactions,
// never rows).
//
//   AckTracker tracker(slot_confirmed_lsn);
//   uint64_t tx = tracker.Begin(begin.final_lsn, begin.commit_time);
//   tracker.AddEvent(tx);                    // once per published row; tag = tx
//   tracker.Commit(commit.end_lsn);
//   ... delivery report for tag tx ...
//   tracker.Ack(tx);                         // watermark() == commit.end_lsn
#ifndef OUTBOXD_RELAY_ACK_TRACKER_H_
#define OUTBOXD_RELAY_ACK_TRACKER_H_

#include <cstdint>
#include <deque>
#include <optional>

#include "pg/lsn.h"

namespace outboxd::relay {

class AckTracker {
 public:
  using TxId = uint64_t;

  explicit AckTracker(pg::Lsn confirmed = 0) : watermark_(confirmed) {}

  // A transaction starts (pgoutput Begin). Returns its id, used as the delivery tag
  // of each of its events. commit_time is microseconds since the Unix epoch.
  TxId Begin(pg::Lsn commit_lsn, int64_t commit_time_us);
  // One more event of the open transaction was handed to the producer.
  void AddEvent(TxId tx);
  // The open transaction ended (pgoutput Commit) at end_lsn.
  void Commit(pg::Lsn end_lsn);
  // The broker acknowledged one event of `tx`.
  void Ack(TxId tx);
  // One event of `tx` can never be acknowledged: the watermark holds before `tx`
  // until the caller resolves it (dead letter) with Ack().
  void MarkFailed(TxId tx);

  // A new session (reconnect, new producer): forgets every transaction in flight
  // (their late reports are ignored; they will be streamed again) and moves the
  // watermark to `confirmed` if that is newer.
  void Reset(pg::Lsn confirmed);
  // Reset, and the watermark becomes `confirmed` even if that is older: after a
  // failover the old timeline's positions name nothing on the new one.
  void Rebase(pg::Lsn confirmed);

  // Nothing open and nothing unacknowledged: a keepalive's position may be confirmed.
  bool Idle() const { return !open_ && txs_.empty(); }
  // Confirms a server position while idle (no-op otherwise, never backwards).
  void ConfirmIdlePosition(pg::Lsn lsn);

  pg::Lsn watermark() const { return watermark_; }
  uint64_t events_in_flight() const { return events_in_flight_; }
  size_t transactions_in_flight() const { return txs_.size(); }
  // Commit time (µs since the Unix epoch) of the oldest transaction not fully
  // acknowledged, if any: the "age of the oldest unpublished event" alert.
  std::optional<int64_t> oldest_unacked_commit_time() const;
  // Commit time (µs since the Unix epoch) of the oldest transaction not confirmed yet,
  // open or acknowledged or not: where a session that fails is stuck.
  std::optional<int64_t> unconfirmed_commit_time() const {
    if (txs_.empty()) return std::nullopt;
    return txs_.front().commit_time_us;
  }
  // Commit time (µs since the Unix epoch) of `tx` while it has events outstanding
  // (none for a stale report of a reset session): the commit-to-ack latency metric.
  std::optional<int64_t> commit_time(TxId tx) const;
  bool has_failed() const { return failed_ > 0; }

 private:
  struct Tx {
    pg::Lsn commit_lsn = 0;
    pg::Lsn end_lsn = 0;
    int64_t commit_time_us = 0;
    uint32_t outstanding = 0;
    bool committed = false;
    bool failed = false;
  };
  Tx* Find(TxId tx);
  void Advance();

  std::deque<Tx> txs_;  // in commit order; txs_[i] has id first_id_ + i
  TxId first_id_ = 0;
  bool open_ = false;
  pg::Lsn watermark_;
  uint64_t events_in_flight_ = 0;
  uint64_t failed_ = 0;
};

}  // namespace outboxd::relay

#endif  // OUTBOXD_RELAY_ACK_TRACKER_H_
