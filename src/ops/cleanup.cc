#include "ops/cleanup.h"

#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/progress.h"
#include "base/status_macros.h"
#include "ops/partition_upkeep.h"
#include "outbox/event.h"
#include "outbox/names.h"
#include "outbox/relay_state.h"
#include "pg/identifier.h"
#include "pg/partitions.h"
#include "pg/table_name.h"

namespace outboxd::ops {
namespace {

// The cut-off as the server's timestamp, taken once so every batch agrees.
absl::StatusOr<std::string> Cutoff(pg::Connection& conn, absl::Duration age) {
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::Result r, conn.ExecParams("SELECT (now() - make_interval(secs => $1::float8))::text",
                                    {absl::StrCat(absl::ToDoubleSeconds(age))}));
  return std::string(r.Get(0, 0));
}

// With CleanupProgress::kReported: the rows `from_where` ($1 = cut-off) selects,
// counted once for the progress line's total.
absl::StatusOr<std::unique_ptr<Progress>> Report(pg::Connection& conn,
                                                 const CleanupOptions& options, std::string what,
                                                 const std::string& from_where,
                                                 const std::string& cutoff) {
  if (options.progress != CleanupProgress::kReported) return nullptr;
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::Result r, conn.ExecParams(absl::StrCat("SELECT count(*) FROM ", from_where), {cutoff}));
  int64_t eligible = 0;
  if (!absl::SimpleAtoi(std::string(r.Get(0, 0)), &eligible))
    return absl::InternalError("count(*) unreadable");
  return std::make_unique<Progress>(Progress::Options{.what = std::move(what), .total = eligible});
}

// Runs `batch_sql` ($1 = cut-off, $2 = batch size) until it deletes nothing.
absl::StatusOr<int64_t> DeleteInBatches(pg::Connection& conn, const std::string& batch_sql,
                                        const std::string& cutoff, const CleanupOptions& options,
                                        Progress* progress = nullptr) {
  int64_t total = 0;
  while (!options.stopping()) {
    OUTBOXD_ASSIGN_OR_RETURN(pg::Result r,
                             conn.ExecParams(batch_sql, {cutoff, absl::StrCat(options.batch)}));
    if (r.AffectedRows() == 0) break;
    total += r.AffectedRows();
    if (progress != nullptr) progress->Update(total);
  }
  return total;
}

// Which outbox rows may go: old enough and acknowledged, as SQL over alias "o"
// with $1 = `cutoff`. Empty `where` when nothing can tell (keep every row).
struct OutboxRule {
  std::string where;
  std::string acked;  // the acknowledged half of `where`: partitions are dropped by it
  std::string cutoff;
};

absl::StatusOr<OutboxRule> OutboxDeleteRule(pg::Connection& conn, const CleanupOptions& options,
                                            const pg::TableName& outbox, std::string& kept) {
  OUTBOXD_ASSIGN_OR_RETURN(bool dated, outbox.HasColumn(conn, options.created_at_column));
  if (!dated) {
    kept = outbox::MissingCreatedAtNote(outbox.Display(), options.created_at_column);
    return OutboxRule{};
  }
  OUTBOXD_ASSIGN_OR_RETURN(bool polled, outbox.HasColumn(conn, options.published_at_column));
  const std::string published = polled ? options.published_at_column : "";
  OUTBOXD_ASSIGN_OR_RETURN(std::string published_sql,
                           conn.QuoteIdentifier(options.published_at_column));
  OUTBOXD_ASSIGN_OR_RETURN(std::string created_sql,
                           conn.QuoteIdentifier(options.created_at_column));
  const outbox::RelayStateStore state(options.table);
  OUTBOXD_ASSIGN_OR_RETURN(bool state_exists, outbox.Sibling(state.table()).Exists(conn));
  std::string acked;
  if (state_exists) {
    OUTBOXD_ASSIGN_OR_RETURN(acked, state.AckedCondition(conn, "o", published));
  } else if (polled) {
    acked = absl::StrCat("o.", published_sql, " IS NOT NULL");
  } else {
    return OutboxRule{};  // nothing can tell an acknowledged row from another: keep them all
  }
  // The seed's rule for polled rows (published before the cut-off), and the CDC
  // analogue: created before it and acknowledged.
  std::string old = absl::StrCat("o.", created_sql, " < $1::timestamptz");
  if (polled) old = absl::StrCat("(", old, " OR o.", published_sql, " < $1::timestamptz)");
  OUTBOXD_ASSIGN_OR_RETURN(std::string cutoff, Cutoff(conn, options.retention));
  return OutboxRule{absl::StrCat(old, " AND ", acked, " IS TRUE"), acked, cutoff};
}

// Deletes the rows of one leaf that `where` (SQL over alias "o", $1 = `cutoff`)
// selects, a batch at a time. ctid, not seq: any outbox or inbox layout has it, and
// `ctid = ANY(array)` is a TID scan. A ctid is unique within one table only, so a
// partitioned table is deleted from leaf by leaf: on its root the same ctid would
// name a row in every partition. With CleanupProgress::kReported, one progress line
// per leaf (the table itself when it is not partitioned).
absl::StatusOr<int64_t> DeleteFromLeaf(pg::Connection& conn, const pg::TableName& leaf,
                                       const std::string& where, const std::string& cutoff,
                                       const CleanupOptions& options) {
  const std::string eligible = absl::StrCat(leaf.quoted, " o WHERE ", where);
  OUTBOXD_ASSIGN_OR_RETURN(
      std::unique_ptr<Progress> progress,
      Report(conn, options, absl::StrCat("cleanup of ", leaf.Display()), eligible, cutoff));
  return DeleteInBatches(
      conn,
      absl::StrCat("DELETE FROM ", leaf.quoted, " WHERE ctid = ANY(ARRAY(SELECT o.ctid FROM ",
                   eligible, " LIMIT $2))"),
      cutoff, options, progress.get());
}

// The partitions of an outbox or inbox ahead of its writers, of the width of its
// newest one; how many were created.
absl::StatusOr<int64_t> CreateAhead(pg::Connection& conn, const CleanupOptions& options,
                                    const pg::TableName& table) {
  OUTBOXD_ASSIGN_OR_RETURN(std::vector<std::string> created,
                           CreatePartitionsAhead(conn, table, PartitionInterval::kNone,
                                                 CreateOptions{.ahead = options.partitions_ahead}));
  return static_cast<int64_t>(created.size());
}

// A partitioned outbox: the partitions ahead of the writers, and the old ones
// dropped whole once acknowledged (ops/partition_upkeep.h), before the row-level
// pass deletes what is left.
absl::Status KeepPartitions(pg::Connection& conn, const CleanupOptions& options,
                            const pg::TableName& outbox, const OutboxRule& rule,
                            CleanupResult& result) {
  OUTBOXD_ASSIGN_OR_RETURN(int64_t created, CreateAhead(conn, options, outbox));
  result.partitions_created += created;
  if (rule.where.empty()) return absl::OkStatus();
  OUTBOXD_ASSIGN_OR_RETURN(DropReport dropped, DropAcknowledgedPartitions(conn, outbox, outbox,
                                                                          rule.acked, rule.cutoff));
  result.partitions_dropped += static_cast<int64_t>(dropped.dropped.size());
  result.partitions_kept = std::move(dropped.kept);
  return absl::OkStatus();
}

// Rows in a DEFAULT partition mean upkeep fell behind (no partition for their
// time): counted, so that cleanup's line, the run's metric and status say so.
absl::Status CountDefaultRows(pg::Connection& conn, const pg::Partition& leaf,
                              CleanupResult& result) {
  OUTBOXD_ASSIGN_OR_RETURN(result.default_rows, leaf.name.CountRows(conn));
  result.default_partition = leaf.name.name;
  return absl::OkStatus();
}

absl::Status CleanOutbox(pg::Connection& conn, const CleanupOptions& options,
                         CleanupResult& result) {
  if (options.created_at_column.empty()) return absl::OkStatus();
  OUTBOXD_ASSIGN_OR_RETURN(const pg::TableName outbox, pg::TableName::Parse(options.table));
  OUTBOXD_ASSIGN_OR_RETURN(OutboxRule rule,
                           OutboxDeleteRule(conn, options, outbox, result.outbox_kept));
  // A role that may delete rows but not own the table (docs/security.md) still cleans
  // row by row; the upkeep's failure is reported, not the round's.
  if (absl::Status kept = KeepPartitions(conn, options, outbox, rule, result); !kept.ok()) {
    result.partition_upkeep_error = std::string(kept.message());
  }
  OUTBOXD_ASSIGN_OR_RETURN(std::vector<pg::Partition> leaves, pg::Leaves(conn, outbox));
  for (const pg::Partition& leaf : leaves) {
    int64_t deleted = 0;
    if (!rule.where.empty()) {
      OUTBOXD_ASSIGN_OR_RETURN(deleted,
                               DeleteFromLeaf(conn, leaf.name, rule.where, rule.cutoff, options));
    }
    result.outbox_deleted += deleted;
    if (!leaf.is_default) continue;
    result.default_deleted += deleted;
    OUTBOXD_RETURN_IF_ERROR(CountDefaultRows(conn, leaf, result));
  }
  return absl::OkStatus();
}

// A partitioned inbox (inbox/inbox.h): its partitions kept ahead of the consumers,
// and each dropped whole once its range ended before the cut-off and every mark in
// it was processed before the cut-off too: a mark then lives --inbox-retention after
// its processing, as on a plain inbox, even for an event consumed long after it was
// created (the partitions are by the event's created-at). No acknowledgement to wait
// for: a mark only has to outlive the broker's redelivery.
absl::Status KeepInboxPartitions(pg::Connection& conn, const CleanupOptions& options,
                                 const pg::TableName& outbox, const pg::TableName& inbox,
                                 const std::string& cutoff, CleanupResult& result) {
  OUTBOXD_ASSIGN_OR_RETURN(int64_t created, CreateAhead(conn, options, inbox));
  result.inbox_partitions_created += created;
  OUTBOXD_ASSIGN_OR_RETURN(std::string cutoff_sql, conn.QuoteLiteral(cutoff));
  OUTBOXD_ASSIGN_OR_RETURN(
      DropReport dropped,
      DropAcknowledgedPartitions(conn, inbox, outbox,
                                 absl::StrCat("o.processado_em < ", cutoff_sql, "::timestamptz"),
                                 cutoff));
  result.inbox_partitions_dropped += static_cast<int64_t>(dropped.dropped.size());
  result.inbox_partitions_kept = std::move(dropped.kept);
  return absl::OkStatus();
}

// Row by row, as on a plain inbox; on a partitioned one only in its DEFAULT partition
// (marks without a created-at, or of periods without a partition): the others go
// whole, unless their upkeep failed.
absl::StatusOr<int64_t> CleanInbox(pg::Connection& conn, const CleanupOptions& options,
                                   CleanupResult& result) {
  if (options.inbox_table.empty()) return 0;
  OUTBOXD_ASSIGN_OR_RETURN(const pg::TableName outbox, pg::TableName::Parse(options.table));
  OUTBOXD_RETURN_IF_ERROR(pg::CheckIdentifier(options.inbox_table, "--inbox-table"));
  const pg::TableName inbox = outbox.Sibling(options.inbox_table);
  OUTBOXD_ASSIGN_OR_RETURN(bool exists, inbox.Exists(conn));
  if (!exists) return 0;
  OUTBOXD_ASSIGN_OR_RETURN(std::string cutoff, Cutoff(conn, options.inbox_retention));
  OUTBOXD_ASSIGN_OR_RETURN(bool partitioned, pg::IsPartitioned(conn, inbox));
  if (partitioned) {
    if (absl::Status kept = KeepInboxPartitions(conn, options, outbox, inbox, cutoff, result);
        !kept.ok()) {
      result.inbox_partition_upkeep_error = std::string(kept.message());
    }
  }
  const bool every_leaf = !partitioned || !result.inbox_partition_upkeep_error.empty();
  OUTBOXD_ASSIGN_OR_RETURN(std::vector<pg::Partition> leaves, pg::Leaves(conn, inbox));
  int64_t deleted = 0;
  for (const pg::Partition& leaf : leaves) {
    if (!every_leaf && !leaf.is_default) continue;
    OUTBOXD_ASSIGN_OR_RETURN(
        int64_t from_leaf,
        DeleteFromLeaf(conn, leaf.name, "o.processado_em < $1::timestamptz", cutoff, options));
    deleted += from_leaf;
  }
  return deleted;
}

}  // namespace

void LogPartitionUpkeep(const CleanupResult& done) {
  if (done.partitions_created + done.partitions_dropped > 0) {
    spdlog::info("cleanup: created {} partitions ahead, dropped {} acknowledged partitions",
                 done.partitions_created, done.partitions_dropped);
  }
  if (!done.partition_upkeep_error.empty()) {
    spdlog::warn("cleanup: partition upkeep failed ({}); rows are deleted one by one",
                 done.partition_upkeep_error);
  }
  for (const std::string& kept : done.partitions_kept) {
    spdlog::info("cleanup: kept partition {}", kept);
  }
  if (done.default_deleted + done.default_rows > 0) {
    spdlog::warn(
        "cleanup: {} rows deleted from and {} left in the DEFAULT partition {}: partition upkeep "
        "fell behind (rows outside every partition's range)",
        done.default_deleted, done.default_rows, done.default_partition);
  }
  if (done.inbox_partitions_created + done.inbox_partitions_dropped > 0) {
    spdlog::info("cleanup: created {} inbox partitions ahead, dropped {} inbox partitions",
                 done.inbox_partitions_created, done.inbox_partitions_dropped);
  }
  for (const std::string& kept : done.inbox_partitions_kept) {
    spdlog::info("cleanup: kept inbox partition {}", kept);
  }
  if (!done.inbox_partition_upkeep_error.empty()) {
    spdlog::warn("cleanup: inbox partition upkeep failed ({}); inbox rows are deleted one by one",
                 done.inbox_partition_upkeep_error);
  }
}

absl::StatusOr<CleanupResult> Cleanup(pg::Connection& conn, const CleanupOptions& options) {
  if (options.batch <= 0) return absl::InvalidArgumentError("--batch must be at least 1");
  OUTBOXD_RETURN_IF_ERROR(outbox::ParseOutboxTable(options.table).status());
  OUTBOXD_RETURN_IF_ERROR(pg::CheckIdentifier(options.created_at_column, "--created-at-column"));
  CleanupResult result;
  OUTBOXD_RETURN_IF_ERROR(CleanOutbox(conn, options, result));
  OUTBOXD_ASSIGN_OR_RETURN(result.inbox_deleted, CleanInbox(conn, options, result));
  return result;
}

CleanupJob::CleanupJob(std::string conninfo, CleanupOptions options, absl::Duration interval)
    : conninfo_(std::move(conninfo)), options_(std::move(options)), interval_(interval) {
  options_.stopping = [this] { return thread_.Stopping(); };
  thread_.Start(interval_, [this] { RunOnce(); });
}

void CleanupJob::RunOnce() {
  absl::StatusOr<CleanupResult> done = [this]() -> absl::StatusOr<CleanupResult> {
    OUTBOXD_ASSIGN_OR_RETURN(pg::Connection conn, pg::Connection::Open(conninfo_));
    return Cleanup(conn, options_);
  }();
  if (!done.ok()) {
    spdlog::warn("cleanup failed: {}; retrying in {}", done.status(),
                 absl::FormatDuration(interval_));
  } else if (done->outbox_deleted + done->inbox_deleted > 0) {
    spdlog::info("cleanup: deleted {} acknowledged outbox rows and {} inbox rows",
                 done->outbox_deleted, done->inbox_deleted);
  }
  if (done.ok()) LogPartitionUpkeep(*done);
  if (done.ok() && options_.on_done) options_.on_done(*done);
}

}  // namespace outboxd::ops
