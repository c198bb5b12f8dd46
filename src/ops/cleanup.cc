#include "ops/cleanup.h"

#include <memory>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/progress.h"
#include "base/status_macros.h"
#include "outbox/names.h"
#include "outbox/event.h"
#include "outbox/relay_state.h"
#include "pg/identifier.h"
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

// ctid, not seq: any outbox layout has it, and `ctid = ANY(array)` is a TID scan.
absl::StatusOr<int64_t> CleanOutbox(pg::Connection& conn, const CleanupOptions& options,
                                    std::string& kept) {
  if (options.created_at_column.empty()) return 0;
  OUTBOXD_ASSIGN_OR_RETURN(const pg::TableName outbox, pg::TableName::Parse(options.table));
  OUTBOXD_ASSIGN_OR_RETURN(bool dated, outbox.HasColumn(conn, options.created_at_column));
  if (!dated) {
    kept = outbox::MissingCreatedAtNote(outbox.Display(), options.created_at_column);
    return 0;
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
    return 0;  // nothing can tell an acknowledged row from another: keep them all
  }
  // The seed's rule for polled rows (published before the cut-off), and the CDC
  // analogue: created before it and acknowledged.
  std::string old = absl::StrCat("o.", created_sql, " < $1::timestamptz");
  if (polled) old = absl::StrCat("(", old, " OR o.", published_sql, " < $1::timestamptz)");
  OUTBOXD_ASSIGN_OR_RETURN(std::string cutoff, Cutoff(conn, options.retention));
  const std::string eligible =
      absl::StrCat(outbox.quoted, " o WHERE ", old, " AND ", acked, " IS TRUE");
  OUTBOXD_ASSIGN_OR_RETURN(
      std::unique_ptr<Progress> progress,
      Report(conn, options, absl::StrCat("cleanup of ", outbox.Display()), eligible, cutoff));
  return DeleteInBatches(
      conn,
      absl::StrCat("DELETE FROM ", outbox.quoted, " WHERE ctid = ANY(ARRAY(SELECT o.ctid FROM ",
                   eligible, " LIMIT $2))"),
      cutoff, options, progress.get());
}

absl::StatusOr<int64_t> CleanInbox(pg::Connection& conn, const CleanupOptions& options) {
  if (options.inbox_table.empty()) return 0;
  OUTBOXD_ASSIGN_OR_RETURN(const pg::TableName outbox, pg::TableName::Parse(options.table));
  OUTBOXD_RETURN_IF_ERROR(pg::CheckIdentifier(options.inbox_table, "--inbox-table"));
  const pg::TableName inbox = outbox.Sibling(options.inbox_table);
  OUTBOXD_ASSIGN_OR_RETURN(bool exists, inbox.Exists(conn));
  if (!exists) return 0;
  OUTBOXD_ASSIGN_OR_RETURN(std::string cutoff, Cutoff(conn, options.inbox_retention));
  const std::string eligible = absl::StrCat(inbox.quoted, " WHERE processado_em < $1::timestamptz");
  OUTBOXD_ASSIGN_OR_RETURN(
      std::unique_ptr<Progress> progress,
      Report(conn, options, absl::StrCat("cleanup of ", inbox.Display()), eligible, cutoff));
  return DeleteInBatches(
      conn,
      absl::StrCat("DELETE FROM ", inbox.quoted, " WHERE ctid = ANY(ARRAY(SELECT ctid FROM ",
                   eligible, " LIMIT $2))"),
      cutoff, options, progress.get());
}

}  // namespace

absl::StatusOr<CleanupResult> Cleanup(pg::Connection& conn, const CleanupOptions& options) {
  if (options.batch <= 0) return absl::InvalidArgumentError("--batch must be at least 1");
  OUTBOXD_RETURN_IF_ERROR(outbox::ParseOutboxTable(options.table).status());
  OUTBOXD_RETURN_IF_ERROR(pg::CheckIdentifier(options.created_at_column, "--created-at-column"));
  CleanupResult result;
  OUTBOXD_ASSIGN_OR_RETURN(result.outbox_deleted, CleanOutbox(conn, options, result.outbox_kept));
  OUTBOXD_ASSIGN_OR_RETURN(result.inbox_deleted, CleanInbox(conn, options));
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
}

}  // namespace outboxd::ops
