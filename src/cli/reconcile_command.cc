// outboxd reconcile: business rows with no outbox event in the window. Missing ids go
// to stdout, one per line (for scripts); the summary goes to the log. Exit 1 when any
// is missing: a cron-ready check.
#include <iostream>

#include "base/log.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/secrets.h"
#include "ops/reconcile.h"
#include "pg/connection.h"

namespace outboxd::cli {
namespace {

struct ReconcileCommand {
  PgFlags pg;
  ops::ReconcileOptions options;
  DurationFlag since{"24h"};

  CLI::App* Register(CLI::App& app) {
    CLI::App* cmd = app.add_subcommand(
        "reconcile", "List business rows that have no outbox event (a path that bypassed it)");
    AddPgFlags(cmd, pg);
    Flag(cmd, "expect", options.expect_sql,
         "SQL returning the aggregate ids that should have an event ($1 = window start)")
        ->required();
    Flag(cmd, "type", options.type, "Event type each of them should have")->required();
    Flag(cmd, "since", since, "Window: events created within this duration")
        ->capture_default_str();
    Flag(cmd, "table", options.table, "Outbox table ([schema.]name)")->capture_default_str();
    Flag(cmd, "aggregate-column", options.columns.aggregate_id, "Column with the aggregate id")
        ->capture_default_str();
    Flag(cmd, "type-column", options.columns.type, "Column with the event type")
        ->capture_default_str();
    Flag(cmd, "created-at-column", options.columns.created_at, "Column with the creation time")
        ->capture_default_str();
    return cmd;
  }

  int Run() {
    options.since = since.value;
    absl::StatusOr<pg::Connection> conn = ConnectPg(pg);
    if (!conn.ok()) return Fail(conn.status(), Phase::kStarting);
    absl::StatusOr<ops::ReconcileReport> report = ops::Reconcile(*conn, options);
    if (!report.ok()) return Fail(report.status(), Phase::kStarting);
    for (const std::string& id : report->missing) std::cout << id << "\n";
    std::cout.flush();
    if (report->missing.empty()) {
      spdlog::info("reconcile: all {} expected rows have a {} event since {}", report->expected,
                   options.type, report->window_start);
      return kExitOk;
    }
    spdlog::error(
        "reconcile: {} of {} expected rows have no {} event since {}: a code path "
        "bypassed the outbox",
        report->missing.size(), report->expected, options.type, report->window_start);
    return kExitFailure;
  }
};

}  // namespace

Command RegisterReconcile(CLI::App& app) { return RegisterCommand<ReconcileCommand>(app); }

}  // namespace outboxd::cli
