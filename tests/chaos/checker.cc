#include "chaos/checker.h"

#include <algorithm>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/status_macros.h"
#include "pg/lsn.h"

namespace outboxd::chaos {
namespace {

constexpr size_t kMaxExamples = 12;

// Commit order: the transaction's commit LSN, then the row's place in it.
struct CommitPosition {
  pg::Lsn lsn = 0;
  int64_t seq = 0;
  bool operator<(const CommitPosition& o) const {
    return std::tie(lsn, seq) < std::tie(o.lsn, o.seq);
  }
};

// Kafka: when the producer made each copy, which says which fault made the second.
std::string ProducedAt(const Delivery& first, const Delivery& again) {
  if (first.created_ms < 0 || again.created_ms < 0) return "";
  auto at = [](int64_t ms) {
    return absl::FormatTime("%H:%M:%E3S", absl::FromUnixMillis(ms), absl::UTCTimeZone());
  };
  return absl::StrCat(" (produced at ", at(first.created_ms), " and ", at(again.created_ms), ")");
}

std::string Show(const CommitPosition& p) { return absl::StrCat(pg::FormatLsn(p.lsn), "#", p.seq); }

// The deduplicating consumer of the header comment.
class Replay {
 public:
  Replay(const absl::flat_hash_map<std::string, const OutboxRow*>& outbox, const CheckInput& input,
         Verdict& verdict)
      : outbox_(outbox), input_(input), v_(verdict) {}

  void Consume(const std::string& id, const std::string& aggregate, const std::string& lsn_text,
               const char* where) {
    if (!kept_.insert(id).second) {
      ++v_.duplicates;
      return;
    }
    auto row = outbox_.find(id);
    if (row == outbox_.end()) {
      const bool rolled_back = input_.rolled_back.contains(id);
      if (!rolled_back && input_.failover) {
        ++v_.ghosts;
        Example(absl::StrCat("ghost event ", id, " (aggregate ", aggregate, ", lsn ", lsn_text,
                             ") in ", where, ": not on the surviving timeline"));
        return;
      }
      ++(rolled_back ? v_.rolled_back_seen : v_.unknown);
      Example(absl::StrCat(rolled_back ? "rolled-back" : "never-written", " event ", id, " in ",
                           where));
      return;
    }
    absl::StatusOr<pg::Lsn> lsn = pg::ParseLsn(lsn_text);
    CommitPosition at{lsn.value_or(0), row->second->seq};
    auto [last, fresh] = last_.try_emplace(aggregate, at);
    if (fresh) return;
    if (at < last->second) {
      ++v_.disorder;
      Example(absl::StrCat("aggregate ", aggregate, ": event ", id, " at ", Show(at),
                           " first seen in ", where, " after ", Show(last->second)));
      return;
    }
    last->second = at;
  }

  bool Kept(const std::string& id) const { return kept_.contains(id); }
  void Example(std::string line) {
    if (v_.examples.size() < kMaxExamples) v_.examples.push_back(std::move(line));
  }

 private:
  const absl::flat_hash_map<std::string, const OutboxRow*>& outbox_;
  const CheckInput& input_;
  Verdict& v_;
  absl::flat_hash_set<std::string> kept_;
  absl::flat_hash_map<std::string, CommitPosition> last_;
};

}  // namespace

absl::Status ReadTables(pg::Connection& conn, CheckInput& input) {
  OUTBOXD_ASSIGN_OR_RETURN(pg::Result r,
                           conn.Exec("SELECT seq, id::text, aggregate_id FROM outbox"));
  input.outbox.clear();
  input.outbox.reserve(r.rows());
  for (int i = 0; i < r.rows(); ++i) {
    OutboxRow row{.id = std::string(r.Get(i, 1)), .aggregate = std::string(r.Get(i, 2))};
    if (!absl::SimpleAtoi(absl::string_view(r.Get(i, 0).data(), r.Get(i, 0).size()), &row.seq)) {
      return absl::InternalError("outbox seq is not a number");
    }
    input.outbox.push_back(std::move(row));
  }
  OUTBOXD_ASSIGN_OR_RETURN(
      r, conn.Exec("SELECT id, aggregate_id, lsn FROM outbox_dead_letter ORDER BY seq"));
  input.dead_letters.clear();
  for (int i = 0; i < r.rows(); ++i) {
    input.dead_letters.push_back(
        {std::string(r.Get(i, 0)), std::string(r.Get(i, 1)), std::string(r.Get(i, 2))});
  }
  return absl::OkStatus();
}

Verdict Check(const CheckInput& input) {
  absl::flat_hash_map<std::string, const OutboxRow*> outbox;
  outbox.reserve(input.outbox.size());
  for (const OutboxRow& row : input.outbox) outbox.emplace(row.id, &row);
  Verdict v{.committed = static_cast<int64_t>(outbox.size()),
            .messages = static_cast<int64_t>(input.deliveries.size()),
            .dead_lettered = static_cast<int64_t>(input.dead_letters.size())};
  Replay replay(outbox, input, v);

  std::vector<const Delivery*> kafka;
  kafka.reserve(input.deliveries.size());
  for (const Delivery& d : input.deliveries) kafka.push_back(&d);
  std::stable_sort(kafka.begin(), kafka.end(), [](const Delivery* a, const Delivery* b) {
    return std::tie(a->partition, a->offset) < std::tie(b->partition, b->offset);
  });
  // Each event's first copy at the broker: a later one is a duplicate, said with both places.
  absl::flat_hash_map<std::string, const Delivery*> first_of;
  for (const Delivery* d : kafka) {
    auto [first, fresh] = first_of.try_emplace(d->id, d);
    if (!fresh) {
      const Delivery& f = *first->second;
      if (v.duplicates < 3) {
        replay.Example(absl::StrCat("duplicate event ", d->id, " (aggregate ", d->aggregate,
                                    ") at partition ", f.partition, " offset ", f.offset,
                                    " and again at partition ", d->partition, " offset ", d->offset,
                                    ProducedAt(f, *d)));
      }
      if (f.lsn != d->lsn && !input.failover) {
        ++v.lsn_mismatch;
        replay.Example(
            absl::StrCat("event ", d->id, " published with lsn ", f.lsn, " and ", d->lsn));
      }
    }
    replay.Consume(d->id, d->aggregate, d->lsn, "the broker");
  }
  for (const std::string& id : input.poison) {
    if (first_of.contains(id)) {
      ++v.poison_published;
      replay.Example(absl::StrCat("poison event ", id, " was published to the broker"));
    }
  }
  for (const DeadLetterRow& l : input.dead_letters) {
    if (first_of.contains(l.id)) ++v.in_both;
    replay.Consume(l.id, l.aggregate, l.lsn, "dead letters");
  }

  for (const OutboxRow& row : input.outbox) {
    if (first_of.contains(row.id)) ++v.published;
    if (input.rolled_back.contains(row.id)) {
      ++v.rolled_back_seen;
      replay.Example(absl::StrCat("rolled-back event ", row.id, " is in the outbox table"));
    }
    if (replay.Kept(row.id)) continue;
    ++v.lost;
    replay.Example(absl::StrCat("lost: event ", row.id, " (seq ", row.seq, ", aggregate ",
                                row.aggregate, ") is in neither the broker nor the dead letters"));
  }
  return v;
}

}  // namespace outboxd::chaos
