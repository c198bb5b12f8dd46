// Cleanup: deletes outbox rows older than the retention whose events the broker has
// acknowledged, and inbox rows processed before the inbox retention, in short batches
// (each DELETE its own transaction, no long locks), looping until a batch deletes
// nothing. A row is acknowledged when the polling relay marked it published, or when
// the CDC relay recorded a position past it (outbox/relay_state.h). An
// unacknowledged row is never deleted, whatever its age: a lost slot can still be
// re-synced from the table. A partitioned outbox or inbox gets its partitions ahead,
// and old ones are dropped whole (ops/partition_upkeep.h).
//
//   CleanupOptions options{.retention = absl::Hours(24 * 7)};
//   OUTBOXD_ASSIGN_OR_RETURN(CleanupResult done, Cleanup(conn, options));
//
// PostgreSQL-side, the role needs SELECT and DELETE on the outbox and the inbox, and
// SELECT on the relay-state table: nothing else.
#ifndef OUTBOXD_OPS_CLEANUP_H_
#define OUTBOXD_OPS_CLEANUP_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/periodic_thread.h"
#include "pg/connection.h"

namespace outboxd::ops {

struct CleanupResult;

// `outboxd cleanup` counts the rows it will delete first and shows its progress
// (base/progress.h); the job inside `run` logs one line per round instead.
enum class CleanupProgress { kSilent, kReported };

struct CleanupOptions {
  std::string table = "outbox";
  // Empty, or missing from the table (a Debezium outbox table): outbox rows have no
  // age to compare, so they are all kept (and CleanupResult says why).
  std::string created_at_column = "criado_em";
  std::string published_at_column = "publicado_em";  // ignored if the table has none
  std::string inbox_table = "inbox";                 // beside the outbox; "" to skip
  absl::Duration retention = absl::Hours(24 * 7);
  absl::Duration inbox_retention = absl::Hours(24 * 30);
  int batch = 5000;
  // A partitioned outbox or inbox: partitions kept ready ahead of the current period.
  int partitions_ahead = 3;
  CleanupProgress progress = CleanupProgress::kSilent;
  // Checked between batches: cleanup inside `outboxd run` stops with the relay.
  std::function<bool()> stopping = [] { return false; };
  // CleanupJob: called after each round that succeeded (the run's metrics).
  std::function<void(const CleanupResult&)> on_done;
};

struct CleanupResult {
  int64_t outbox_deleted = 0;
  int64_t inbox_deleted = 0;
  // Why every outbox row was kept, when the table has no created-at column (empty
  // otherwise, and when created_at_column is empty: the caller knows then).
  std::string outbox_kept;
  // A partitioned outbox (ops/partition_upkeep.h): partitions created ahead and
  // dropped whole, the old ones kept with why, and the DEFAULT partition's rows
  // (deleted this round, left after it): any there means upkeep fell behind.
  int64_t partitions_created = 0;
  int64_t partitions_dropped = 0;
  std::vector<std::string> partitions_kept;
  std::string partition_upkeep_error;  // e.g. the role does not own the outbox
  std::string default_partition;
  int64_t default_deleted = 0;
  int64_t default_rows = 0;
  // A partitioned inbox: partitions created ahead and dropped whole (inbox_deleted
  // counts the rows deleted one by one, from its DEFAULT partition).
  int64_t inbox_partitions_created = 0;
  int64_t inbox_partitions_dropped = 0;
  std::vector<std::string> inbox_partitions_kept;  // old ones kept, with why
  std::string inbox_partition_upkeep_error;
};

// The log lines for the partition upkeep of one round (nothing on a plain outbox and inbox).
void LogPartitionUpkeep(const CleanupResult& done);

absl::StatusOr<CleanupResult> Cleanup(pg::Connection& conn, const CleanupOptions& options);

// The same cleanup inside `outboxd run`: at start, then every `interval`, on its own
// thread and connection (the relay loop never waits for a DELETE). Failures are
// logged and retried at the next interval.
//
//   CleanupJob job(conninfo, CleanupOptions{}, absl::Hours(1));   // stops when destroyed
class CleanupJob {
 public:
  CleanupJob(std::string conninfo, CleanupOptions options, absl::Duration interval);
  CleanupJob(const CleanupJob&) = delete;
  CleanupJob& operator=(const CleanupJob&) = delete;

 private:
  void RunOnce();

  std::string conninfo_;
  CleanupOptions options_;
  absl::Duration interval_;
  PeriodicThread thread_;  // last: destroyed, so stopped, before the members RunOnce reads
};

}  // namespace outboxd::ops

#endif  // OUTBOXD_OPS_CLEANUP_H_
