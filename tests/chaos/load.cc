#include "chaos/load.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"

namespace outboxd::chaos {
namespace {

// The topic-valid type of an aggregate: its events all land in one topic.
std::string TypeOf(const std::string& aggregate) {
  return kTopics[std::hash<std::string>{}(aggregate) % kTopics.size()];
}

// One VALUES row; every string here is ours (no quoting needed).
std::string Row(const std::string& aggregate, const std::string& type, const std::string& payload) {
  return absl::StrCat("('", aggregate, "', '", type, "', '", payload, "')");
}

std::string Payload(int64_t n, int part) {
  return absl::StrCat(R"({"n": )", n, R"(, "part": )", part, "}");
}

constexpr char kInsert[] = "INSERT INTO outbox (aggregate_id, tipo, payload) VALUES ";

}  // namespace

Load::Load(std::string conninfo, uint64_t seed, LoadOptions options)
    : conninfo_(std::move(conninfo)), options_(options) {
  for (int i = 0; i < options_.threads; ++i) {
    threads_.emplace_back([this, i, seed] { RunThread(i, seed * 7919 + i); });
  }
}

Load::~Load() { Stop(); }

void Load::Stop() {
  stop_ = true;
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
}

LoadCounts Load::Counts() const {
  std::lock_guard lock(mu_);
  return counts_;
}

absl::flat_hash_set<std::string> Load::RolledBack() const {
  std::lock_guard lock(mu_);
  return rolled_back_;
}

absl::flat_hash_set<std::string> Load::Poison() const {
  std::lock_guard lock(mu_);
  return poison_;
}

void Load::RunThread(int index, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::optional<pg::Connection> conn;
  const absl::Duration period = absl::Seconds(options_.threads / options_.transactions_per_second);
  absl::Time next = absl::Now();
  absl::Time next_poison = absl::Now() + options_.poison_every;
  for (int64_t n = 0; !stop_; ++n) {
    next = std::max(next + period, absl::Now() - absl::Seconds(1));  // no burst after a stall
    absl::SleepFor(next - absl::Now());
    if (!conn) {
      absl::StatusOr<pg::Connection> c = pg::Connection::Open(conninfo_);
      if (!c.ok()) {
        absl::SleepFor(absl::Milliseconds(100));
        continue;
      }
      conn.emplace(std::move(*c));
    }
    const int dice = static_cast<int>(rng() % 100);
    absl::Status status;
    if (index == 0 && absl::Now() >= next_poison && poisoned_count_ < options_.max_poison) {
      next_poison += options_.poison_every;
      status = Poison(*conn, poisoned_count_++);
    } else if (dice < 10) {
      status = Rollback(*conn, rng, n);
    } else if (dice < 45) {
      status = MultiRow(*conn, rng, n);
    } else {
      status = Single(*conn, rng, n);
    }
    std::lock_guard lock(mu_);
    if (status.ok()) {
      ++counts_.committed_transactions;
    } else {
      ++counts_.failed_transactions;
      conn.reset();  // PostgreSQL went away (or the session is in an unknown state)
    }
  }
}

std::string Load::PickAggregate(std::mt19937_64& rng) {
  if (rng() % 100 < 3) {
    std::lock_guard lock(mu_);
    if (!poisoned_aggregates_.empty()) {
      return poisoned_aggregates_[rng() % poisoned_aggregates_.size()];
    }
  }
  return absl::StrCat("agg-", rng() % options_.aggregates);
}

absl::Status Load::Single(pg::Connection& conn, std::mt19937_64& rng, int64_t n) {
  const std::string aggregate = PickAggregate(rng);
  return conn.Exec(absl::StrCat(kInsert, Row(aggregate, TypeOf(aggregate), Payload(n, 0))))
      .status();
}

// Half the time several INSERT statements, half the time one INSERT of several rows
// (which share one LSN: the trap that lost rows in a peer). Aggregates may repeat
// within the transaction, so order inside a transaction is checked too.
absl::Status Load::MultiRow(pg::Connection& conn, std::mt19937_64& rng, int64_t n) {
  const int rows = 2 + static_cast<int>(rng() % 5);
  const bool one_statement = rng() % 2 == 0;
  std::string sql = one_statement ? kInsert : "BEGIN; ";
  for (int r = 0; r < rows; ++r) {
    const std::string aggregate = PickAggregate(rng);
    const std::string row = Row(aggregate, TypeOf(aggregate), Payload(n, r));
    absl::StrAppend(&sql, one_statement ? (r ? ", " : "") : kInsert, row,
                    one_statement ? "" : "; ");
  }
  if (!one_statement) absl::StrAppend(&sql, "COMMIT");
  return conn.Exec(sql).status();
}

// The ids are known from RETURNING before the ROLLBACK is sent: COMMIT never is, so
// they can never have been committed, whatever happens to the connection.
absl::Status Load::Rollback(pg::Connection& conn, std::mt19937_64& rng, int64_t n) {
  OUTBOXD_RETURN_IF_ERROR(conn.Exec("BEGIN").status());
  std::string sql = kInsert;
  const int rows = 1 + static_cast<int>(rng() % 3);
  for (int r = 0; r < rows; ++r) {
    const std::string aggregate = PickAggregate(rng);
    absl::StrAppend(&sql, r ? ", " : "", Row(aggregate, TypeOf(aggregate), Payload(n, r)));
  }
  absl::StatusOr<pg::Result> inserted = conn.Exec(absl::StrCat(sql, " RETURNING id::text"));
  OUTBOXD_RETURN_IF_ERROR(inserted.status());
  {
    std::lock_guard lock(mu_);
    for (int i = 0; i < inserted->rows(); ++i)
      rolled_back_.insert(std::string(inserted->Get(i, 0)));
    ++counts_.rollbacks;
  }
  return conn.Exec("ROLLBACK").status();
}

// Aggregate poison-K: two published events, then (in one transaction) the poison
// event and one more event that must follow it into the dead-letter table. Even K: a
// JSON scalar payload; odd K: a type that renders an invalid topic name.
absl::Status Load::Poison(pg::Connection& conn, int k) {
  const std::string aggregate = absl::StrCat("poison-", k);
  const std::string type = TypeOf(aggregate);
  OUTBOXD_RETURN_IF_ERROR(conn.Exec(absl::StrCat(kInsert, Row(aggregate, type, Payload(k, 0)), ", ",
                                                 Row(aggregate, type, Payload(k, 1))))
                              .status());
  const bool scalar = k % 2 == 0 || !options_.invalid_topic_poison;
  const std::string poison =
      scalar ? Row(aggregate, type, "42") : Row(aggregate, "chaos bad topic!", Payload(k, 2));
  OUTBOXD_RETURN_IF_ERROR(conn.Exec("BEGIN").status());
  absl::StatusOr<pg::Result> inserted =
      conn.Exec(absl::StrCat(kInsert, poison, " RETURNING id::text"));
  OUTBOXD_RETURN_IF_ERROR(inserted.status());
  {
    std::lock_guard lock(mu_);
    poison_.insert(std::string(inserted->Get(0, 0)));
    ++(scalar ? counts_.poison_scalar : counts_.poison_topic);
  }
  OUTBOXD_RETURN_IF_ERROR(
      conn.Exec(absl::StrCat(kInsert, Row(aggregate, type, Payload(k, 3)), "; COMMIT")).status());
  std::lock_guard lock(mu_);
  poisoned_aggregates_.push_back(aggregate);
  return absl::OkStatus();
}

std::optional<std::string> Load::CommitMarker(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  const std::string aggregate = absl::StrCat("marker-", markers_++);
  while (absl::Now() < deadline) {
    absl::StatusOr<pg::Connection> conn = pg::Connection::Open(conninfo_);
    if (conn.ok()) {
      absl::StatusOr<pg::Result> r = conn->Exec(absl::StrCat(
          kInsert, Row(aggregate, TypeOf(aggregate), Payload(0, 0)), " RETURNING id::text"));
      if (r.ok()) return std::string(r->Get(0, 0));
    }
    absl::SleepFor(absl::Milliseconds(200));
  }
  return std::nullopt;
}

}  // namespace outboxd::chaos
