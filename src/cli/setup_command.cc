// outboxd setup: tables, publication and slot, idempotently; --poll-only: the tables.
#include "base/log.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/secrets.h"
#include "ops/setup.h"
#include "pg/connection.h"
#include "pg/server_checks.h"

namespace outboxd::cli {
namespace {

struct SetupCommand {
  PgFlags pg;
  ops::SetupOptions options;
  std::string partition_by;
  std::string inbox_partition_by;

  CLI::App* Register(CLI::App& app) {
    CLI::App* cmd = app.add_subcommand("setup", "Create the outbox tables, publication and slot");
    AddPgFlags(cmd, pg);
    Flag(cmd, "table", options.table, "Outbox table")->capture_default_str();
    Flag(cmd, "publication", options.publication, "Publication name")->capture_default_str();
    Flag(cmd, "slot", options.slot, "Logical replication slot name")->capture_default_str();
    AddColumnFlags(cmd, options.columns);
    AddHeadersColumnFlag(cmd, options.columns);
    Switch(cmd, "poll-only", options.poll_only,
           "Only the tables and index, for outboxd poll: no publication or slot, so "
           "wal_level = replica and a role without REPLICATION will do");
    Switch(cmd, "recreate-slot", options.recreate_slot,
         "Drop the slot; run then recreates it and republishes the rows after the last "
         "acknowledged position (recovery from wal_status lost)");
    Flag(cmd, "partition-by", partition_by,
         "Create the outbox partitioned by the created-at column, one partition per day, week "
         "or month (UTC), with a DEFAULT partition; cleanup drops acknowledged partitions whole")
        ->check(CLI::IsMember({"day", "week", "month"}));
    Flag(cmd, "inbox-partition-by", inbox_partition_by,
         "Create the inbox partitioned by the event's created-at, one partition per day, week "
         "or month (UTC), with a DEFAULT partition; cleanup drops partitions older than "
         "--inbox-retention whole")
        ->check(CLI::IsMember({"day", "week", "month"}));
    Switch(cmd, "require-not-null", options.require_not_null,
           "Refuse an existing outbox table whose mapped columns allow NULL (without it, a "
           "warning: run dead-letters a row with a NULL there)");
    Switch(cmd, "keep-public-emit-message", options.keep_public_emit_message,
           "Leave EXECUTE on pg_logical_emit_message with PUBLIC (without it, setup run by a "
           "superuser grants it only to outboxd_emit's owner, so no other role can put a "
           "message of any size in the relay's stream)");
    Flag(cmd, "partitions-ahead", options.partitions_ahead,
         "With --partition-by or --inbox-partition-by: partitions created after the current one")
        ->capture_default_str();
    return cmd;
  }

  int Run() {
    absl::StatusOr<ops::PartitionInterval> interval = ops::ParsePartitionInterval(partition_by);
    if (!interval.ok()) return Fail(interval.status(), Phase::kStarting);
    options.partition_by = *interval;
    interval = ops::ParsePartitionInterval(inbox_partition_by);
    if (!interval.ok()) return Fail(interval.status(), Phase::kStarting);
    options.inbox_partition_by = *interval;
    absl::StatusOr<pg::Connection> conn = ConnectPg(pg);
    if (!conn.ok()) return Fail(conn.status(), Phase::kStarting);
    // Before Setup creates anything: without REPLICATION it would create the tables
    // and the publication, then fail on the slot.
    absl::Status status =
        options.poll_only ? absl::OkStatus() : pg::CheckReplicationPrivilege(*conn);
    ops::SetupReport report;
    if (status.ok()) status = ops::Setup(*conn, options, &report);
    if (!status.ok()) return Fail(status, Phase::kStarting);
    for (const std::string& what : report.created) spdlog::info("setup: {}", what);
    for (const std::string& note : report.notes) spdlog::warn("setup: {}", note);
    if (options.poll_only) {
      spdlog::info("ready for outboxd poll: table {} (no publication, no slot)", options.table);
    } else {
      spdlog::info("ready: table {}, publication {}, slot {}", options.table, options.publication,
                   options.slot);
    }
    return kExitOk;
  }
};

}  // namespace

Command RegisterSetup(CLI::App& app) { return RegisterCommand<SetupCommand>(app); }

}  // namespace outboxd::cli
