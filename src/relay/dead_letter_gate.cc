// The dead-letter gate: which aggregates are parked, and whether an event follows
// its aggregate's first dead letter.
#include "relay/dead_letter_gate.h"

#include <utility>

#include "base/status_macros.h"
#include "outbox/stored_letter.h"

namespace outboxd::relay {
namespace {

// The table keys letters by their stored key and id (outbox/stored_letter.h): unique
// to the value, and the value itself for all but the odd poison key, which alone pays
// for the copy.
struct StoredKeyOf {
  explicit StoredKeyOf(std::string_view key) : plain(outbox::IsPlainKey(key)) {
    if (plain) {
      view = absl::string_view(key.data(), key.size());
    } else {
      copy = outbox::StoredKey(key);
      view = copy;
    }
  }
  StoredKeyOf(const StoredKeyOf&) = delete;  // `view` may point into `copy`
  bool plain;
  std::string copy;
  absl::string_view view;
};

}  // namespace

absl::Status DeadLetterGate::Refresh() {
  OUTBOXD_ASSIGN_OR_RETURN(const absl::Time as_of, table_->Now());
  OUTBOXD_ASSIGN_OR_RETURN(auto stored, table_->Aggregates());
  absl::flat_hash_map<std::string, Parked> fresh;
  for (auto& [aggregate, first] : stored) {
    // An unreadable LSN counts as 0: every event of the aggregate then follows.
    Parked parked{.lsn = pg::ParseLsn(first.lsn).value_or(0), .first_id = first.id};
    // A refresh can fall inside the first letter's own transaction: keep knowing
    // that the relay already passed it there.
    auto old = parked_.find(aggregate);
    if (old != parked_.end() && old->second.first_id == parked.first_id) {
      parked.passed_in = old->second.passed_in;
    }
    fresh.emplace(aggregate, std::move(parked));
  }
  parked_ = std::move(fresh);
  read_as_of_ = as_of;
  return absl::OkStatus();
}

DeadLetterGate::Parked* DeadLetterGate::Find(std::string_view aggregate_id) {
  auto found = parked_.find(StoredKeyOf(aggregate_id).view);
  return found == parked_.end() ? nullptr : &found->second;
}

absl::StatusOr<bool> DeadLetterGate::Follows(std::string_view aggregate_id,
                                             std::string_view event_id, Position at) {
  if (parked_.empty()) return false;
  Parked* parked = Find(aggregate_id);
  if (parked == nullptr) return false;
  // Committed after the last read: a replay may have freed the aggregate since.
  if (at.commit_time > read_as_of_) {
    OUTBOXD_RETURN_IF_ERROR(Refresh());
    parked = Find(aggregate_id);
    if (parked == nullptr) return false;
  }
  if (at.commit_lsn != parked->lsn) return at.commit_lsn > parked->lsn;
  // The first dead letter's own transaction: the events before it there precede it.
  if (StoredKeyOf(event_id).view == parked->first_id) parked->passed_in = at.tx;
  return parked->passed_in == at.tx;
}

bool DeadLetterGate::IsParked(std::string_view aggregate_id) const {
  return parked_.contains(StoredKeyOf(aggregate_id).view);
}

absl::Status DeadLetterGate::Store(const outbox::DeadLetter& letter, AckTracker::TxId tx) {
  OUTBOXD_RETURN_IF_ERROR(table_->Insert(letter));
  const std::string first_id = outbox::StoredKey(letter.id);
  auto [parked, added] = parked_.try_emplace(
      outbox::StoredKey(letter.aggregate_id),
      Parked{.lsn = pg::ParseLsn(letter.lsn).value_or(0), .first_id = first_id});
  if (parked->second.first_id == first_id) parked->second.passed_in = tx;
  return absl::OkStatus();
}

}  // namespace outboxd::relay
