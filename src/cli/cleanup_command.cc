// outboxd cleanup: one pass of the outbox and inbox cleanup (ops/cleanup.h), for cron
// or a Kubernetes CronJob; `outboxd run --cleanup-interval` runs the same job itself.
#include "base/log.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/secrets.h"
#include "ops/cleanup.h"
#include "pg/connection.h"

namespace outboxd::cli {
namespace {

struct CleanupCommand {
  PgFlags pg;
  ops::CleanupOptions options;
  DurationFlag retention{"7d"};
  DurationFlag inbox_retention{"30d"};

  CLI::App* Register(CLI::App& app) {
    CLI::App* cmd = app.add_subcommand(
        "cleanup", "Delete acknowledged outbox rows and old inbox rows, in short batches");
    AddPgFlags(cmd, pg);
    Flag(cmd, "table", options.table, "Outbox table ([schema.]name)")->capture_default_str();
    Flag(cmd, "retention", retention,
         "Delete acknowledged outbox rows older than this (never an unacknowledged one)")
        ->capture_default_str();
    Flag(cmd, "batch", options.batch, "Rows per DELETE (each its own short transaction)")
        ->capture_default_str();
    Flag(cmd, "inbox-retention", inbox_retention,
         "Delete inbox rows processed longer ago than this (longer than the broker can redeliver)")
        ->capture_default_str();
    Flag(cmd, "inbox-table", options.inbox_table, "Inbox table, beside the outbox (empty: skip)")
        ->capture_default_str();
    Flag(cmd, "created-at-column", options.created_at_column, "Column with the creation time")
        ->capture_default_str();
    Flag(cmd, "partitions-ahead", options.partitions_ahead,
         "A partitioned outbox or inbox: partitions kept ready after the current one")
        ->capture_default_str();
    return cmd;
  }

  int Run() {
    options.retention = retention.value;
    options.inbox_retention = inbox_retention.value;
    options.progress = ops::CleanupProgress::kReported;
    absl::StatusOr<pg::Connection> conn = ConnectPg(pg);
    if (!conn.ok()) return Fail(conn.status(), Phase::kStarting);
    absl::StatusOr<ops::CleanupResult> done = ops::Cleanup(*conn, options);
    if (!done.ok()) return Fail(done.status(), Phase::kStarting);
    if (!done->outbox_kept.empty()) spdlog::warn("{}", done->outbox_kept);
    spdlog::info(
        "cleanup: deleted {} acknowledged outbox rows older than {} and {} inbox rows older "
        "than {}",
        done->outbox_deleted, retention.text, done->inbox_deleted, inbox_retention.text);
    ops::LogPartitionUpkeep(*done);
    return kExitOk;
  }
};

}  // namespace

Command RegisterCleanup(CLI::App& app) { return RegisterCommand<CleanupCommand>(app); }

}  // namespace outboxd::cli
