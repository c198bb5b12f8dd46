// Upkeep of an outbox range-partitioned by its created-at column (docs/operations.md,
// "A partitioned outbox"): partitions created ahead of the writers, and
// old partitions dropped whole once every row in them is acknowledged. The same for
// an inbox partitioned by the event's created-at, where a row counts as acknowledged
// once processed before the inbox's cut-off (ops/cleanup.cc). Dropping a
// partition writes a few kB of WAL where deleting its rows one by one writes their
// size again, leaves dead tuples for vacuum and makes the walsender that serves the
// relay read through all of it (issue 19 measured 91 kB against 43 MB for 200,000 rows).
//
//   OUTBOXD_ASSIGN_OR_RETURN(std::vector<std::string> made,
//                            CreatePartitionsAhead(conn, outbox, PartitionInterval::kDay,
//                                                  {.ahead = 3, .with_default = true}));
//   OUTBOXD_ASSIGN_OR_RETURN(DropReport dropped,
//                            DropAcknowledgedPartitions(conn, outbox, outbox, acked_sql, cutoff));
//
// A partition is dropped only when its range ends before the cut-off and no row in
// it fails `acked_sql` (the row-level cleanup's rule, ops/cleanup.h), checked again
// after it is detached, when no writer can reach it any more. With a DEFAULT
// partition PostgreSQL refuses DETACH ... CONCURRENTLY, so the detach, the check
// and the DROP run in one transaction under a short lock_timeout (the detach holds
// an ACCESS EXCLUSIVE lock on the outbox for a catalog update; a writer waits at
// most that long, and a kill leaves the partition attached). Without one it is
// DETACH ... CONCURRENTLY (writers never wait), the partition recorded first in
// outboxd's own ledger (ops/internal/detach_ledger.h) so that a round killed half-way
// finishes the detach (FINALIZE) or drops the detached table at the next round.
//
// Upkeep reads and drops only tables the catalog or that ledger proves to be the
// parent's own partitions: a leaf of the parent owned by its owner (or a superuser),
// or a partition the ledger recorded while it was one. Nothing is looked up by name
// or comment, so another role's table (its row-level security policies, its
// columns' casts and operators, its triggers) is never read from or dropped. A
// table an older outboxd detached, known only by its comment, is reported in
// DropReport::kept with the DROP TABLE to run by hand.
#ifndef OUTBOXD_OPS_PARTITION_UPKEEP_H_
#define OUTBOXD_OPS_PARTITION_UPKEEP_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "pg/connection.h"
#include "pg/table_name.h"

namespace outboxd::ops {

// The width of one partition, in UTC: a day, an ISO week (from Monday), a month.
enum class PartitionInterval { kNone, kDay, kWeek, kMonth };

// "day", "week", "month"; "" and "none" are kNone.
absl::StatusOr<PartitionInterval> ParsePartitionInterval(std::string_view text);
std::string_view PartitionIntervalName(PartitionInterval interval);

struct CreateOptions {
  int ahead = 3;              // partitions after the current period's
  bool with_default = false;  // create the DEFAULT partition where missing
  // Each CREATE waits at most this long for its lock (outboxd setup: forever).
  std::string lock_timeout = "2s";
};

// Creates, where missing, the partitions `<outbox>_p<YYYYMMDD>` (the period's first
// day, UTC) from the current period through `ahead` periods after it, continuing
// after the last range that already exists. kNone: the width of the newest range
// partition (a day, 7 days from a Monday, a calendar month), or nothing when it is
// none of those. Returns the names created. A period whose rows already sit in the
// DEFAULT partition cannot get its own (PostgreSQL would have to move them): it is
// skipped, and its rows stay in DEFAULT until cleanup deletes them.
absl::StatusOr<std::vector<std::string>> CreatePartitionsAhead(pg::Connection& conn,
                                                               const pg::TableName& outbox,
                                                               PartitionInterval interval,
                                                               const CreateOptions& options);

struct DropReport {
  std::vector<std::string> dropped;  // partition names
  // Partitions old enough that were kept, with why: "outbox_p20261201 holds
  // unacknowledged rows".
  std::vector<std::string> kept;
};

// Drops the partitions of `table` (the outbox or the inbox) whose range ends at or
// before `cutoff` (timestamptz text) and whose rows all satisfy `acked_sql` (a
// condition over alias "o" that is TRUE for an acknowledged row). The ledger of
// detached partitions lives beside `outbox`. No-op on a plain table.
absl::StatusOr<DropReport> DropAcknowledgedPartitions(pg::Connection& conn,
                                                      const pg::TableName& table,
                                                      const pg::TableName& outbox,
                                                      const std::string& acked_sql,
                                                      const std::string& cutoff);

}  // namespace outboxd::ops

#endif  // OUTBOXD_OPS_PARTITION_UPKEEP_H_
