// AckTracker: a deque of transactions in commit order; the front completes first.
#include "relay/ack_tracker.h"

#include <algorithm>
#include <cassert>

namespace outboxd::relay {

AckTracker::TxId AckTracker::Begin(pg::Lsn commit_lsn, int64_t commit_time_us) {
  assert(!open_ && "Begin inside an open transaction");
  open_ = true;
  txs_.push_back(Tx{.commit_lsn = commit_lsn, .commit_time_us = commit_time_us});
  return first_id_ + txs_.size() - 1;
}

void AckTracker::AddEvent(TxId tx) {
  Tx* t = Find(tx);
  assert(t != nullptr && !t->committed && "AddEvent to a finished transaction");
  ++t->outstanding;
  ++events_in_flight_;
}

void AckTracker::Commit(pg::Lsn end_lsn) {
  assert(open_ && !txs_.empty() && "Commit without Begin");
  open_ = false;
  Tx& t = txs_.back();
  t.end_lsn = end_lsn;
  t.committed = true;
  Advance();
}

void AckTracker::Ack(TxId tx) {
  Tx* t = Find(tx);
  if (t == nullptr || t->outstanding == 0) return;  // stale report from a reset session
  --t->outstanding;
  --events_in_flight_;
  if (t->failed && t->outstanding == 0) {
    t->failed = false;
    --failed_;
  }
  Advance();
}

void AckTracker::MarkFailed(TxId tx) {
  Tx* t = Find(tx);
  if (t == nullptr || t->failed) return;
  t->failed = true;
  ++failed_;
}

void AckTracker::Reset(pg::Lsn confirmed) {
  first_id_ += txs_.size();  // ids stay unique, so stale reports match nothing
  txs_.clear();
  open_ = false;
  events_in_flight_ = 0;
  failed_ = 0;
  watermark_ = std::max(watermark_, confirmed);
}

void AckTracker::Rebase(pg::Lsn confirmed) {
  Reset(confirmed);
  watermark_ = confirmed;
}

void AckTracker::ConfirmIdlePosition(pg::Lsn lsn) {
  if (Idle()) watermark_ = std::max(watermark_, lsn);
}

std::optional<int64_t> AckTracker::oldest_unacked_commit_time() const {
  for (const Tx& t : txs_) {
    if (t.outstanding > 0) return t.commit_time_us;
  }
  return std::nullopt;
}

std::optional<int64_t> AckTracker::commit_time(TxId tx) const {
  if (tx < first_id_ || tx - first_id_ >= txs_.size()) return std::nullopt;
  const Tx& t = txs_[tx - first_id_];
  if (t.outstanding == 0) return std::nullopt;
  return t.commit_time_us;
}

AckTracker::Tx* AckTracker::Find(TxId tx) {
  if (tx < first_id_ || tx - first_id_ >= txs_.size()) return nullptr;
  return &txs_[tx - first_id_];
}

void AckTracker::Advance() {
  while (!txs_.empty() && txs_.front().committed && txs_.front().outstanding == 0) {
    // A transaction replayed after a server crash may end before the watermark:
    // publishing it again is correct, moving the watermark back is not.
    watermark_ = std::max(watermark_, txs_.front().end_lsn);
    txs_.pop_front();
    ++first_id_;
  }
}

}  // namespace outboxd::relay
