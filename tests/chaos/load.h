// The steady mixed load of a chaos run, written by a few threads each on its own
// connection (reconnecting whenever PostgreSQL goes away):
//   - single-row transactions and multi-row ones (several INSERTs, or one INSERT with
//     many VALUES rows: rows that share one LSN), over a fixed set of aggregates;
//   - rolled-back transactions, whose ids are recorded: they must never appear;
//   - now and then a poison event (a JSON scalar payload, or a type that makes an
//     invalid topic name) on an aggregate of its own that already has published
//     events; later events of that aggregate keep coming and must follow it into
//     the dead-letter table.
// What counts as committed is what the outbox table holds afterwards (a COMMIT cut by
// a crash may or may not have happened), so the load keeps no list of commits.
//
//   Load load(conninfo, seed, {.transactions_per_second = 100});
//   ... faults ...
//   load.Stop();
//   for (const std::string& id : load.RolledBack()) ...
#ifndef OUTBOXD_TESTS_CHAOS_LOAD_H_
#define OUTBOXD_TESTS_CHAOS_LOAD_H_

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/time/time.h"
#include "pg/connection.h"

namespace outboxd::chaos {

// The topics normal events go to (created by the broker at start); an aggregate's
// events all go to one of them.
inline const std::vector<std::string> kTopics = {"chaos.a", "chaos.b"};

struct LoadOptions {
  double transactions_per_second = 100;  // all threads together
  int threads = 2;
  int aggregates = 40;
  absl::Duration poison_every = absl::Seconds(12);
  int max_poison = 40;
  // Every other poison event has an invalid topic (Kafka) / an unroutable routing key
  // (RabbitMQ); off, all are scalar payloads.
  bool invalid_topic_poison = true;
};

struct LoadCounts {
  int64_t committed_transactions = 0;  // COMMIT answered OK (a few more may be in doubt)
  int64_t failed_transactions = 0;     // errors (PostgreSQL away): in doubt or not done
  int64_t rollbacks = 0;
  int64_t poison_scalar = 0;
  int64_t poison_topic = 0;
};

class Load {
 public:
  Load(std::string conninfo, uint64_t seed, LoadOptions options);
  ~Load();  // Stop()s

  void Stop();
  LoadCounts Counts() const;
  // Ids returned by INSERTs whose transaction was rolled back.
  absl::flat_hash_set<std::string> RolledBack() const;
  // Ids of poison events inserted (committed or not: the table tells).
  absl::flat_hash_set<std::string> Poison() const;
  // Commits one event of a fresh aggregate and returns its id once COMMIT said OK,
  // retrying through outages; std::nullopt if `timeout` passed first.
  std::optional<std::string> CommitMarker(absl::Duration timeout);

 private:
  void RunThread(int index, uint64_t seed);
  absl::Status Single(pg::Connection& conn, std::mt19937_64& rng, int64_t n);
  absl::Status MultiRow(pg::Connection& conn, std::mt19937_64& rng, int64_t n);
  absl::Status Rollback(pg::Connection& conn, std::mt19937_64& rng, int64_t n);
  absl::Status Poison(pg::Connection& conn, int k);
  // A random normal aggregate, or now and then one that has a dead letter.
  std::string PickAggregate(std::mt19937_64& rng);

  const std::string conninfo_;
  const LoadOptions options_;
  std::atomic<bool> stop_{false};
  std::atomic<int> poisoned_count_{0};
  mutable std::mutex mu_;
  LoadCounts counts_;                             // guarded by mu_
  absl::flat_hash_set<std::string> rolled_back_;  // guarded by mu_
  absl::flat_hash_set<std::string> poison_;       // guarded by mu_
  std::vector<std::string> poisoned_aggregates_;  // guarded by mu_
  std::atomic<int> markers_{0};
  std::vector<std::thread> threads_;
};

}  // namespace outboxd::chaos

#endif  // OUTBOXD_TESTS_CHAOS_LOAD_H_
