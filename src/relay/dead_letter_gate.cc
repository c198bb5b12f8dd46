// The dead-letter gate: which aggregates are parked, and whether an event follows
// its aggregate's first dead letter.
#include "relay/dead_letter_gate.h"

#include <utility>

#include "base/status_macros.h"
#include "outbox/stored_letter.h"

namespace outboxd::relay {
namespace {

// How often the set of aggregates with dead letters is re-read while it is not empty.
constexpr absl::Duration kRefreshInterval = absl::Seconds(2);

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
  refreshed_ = clock_();
  return absl::OkStatus();
}

absl::Status DeadLetterGate::RefreshIfDue() {
  // A replay empties an aggregate's dead letters: let its new events flow again.
  if (parked_.empty() || clock_() - refreshed_ <= kRefreshInterval) return absl::OkStatus();
  return Refresh();
}

bool DeadLetterGate::Follows(std::string_view aggregate_id, std::string_view event_id,
                             Position at) {
  if (parked_.empty()) return false;
  // This abseil's string_view is its own type: the heterogeneous lookup needs one.
  auto found = parked_.find(StoredKeyOf(aggregate_id).view);
  if (found == parked_.end()) return false;
  Parked& parked = found->second;
  if (at.commit_lsn != parked.lsn) return at.commit_lsn > parked.lsn;
  // The first dead letter's own transaction: the events before it there precede it.
  if (StoredKeyOf(event_id).view == parked.first_id) parked.passed_in = at.tx;
  return parked.passed_in == at.tx;
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
