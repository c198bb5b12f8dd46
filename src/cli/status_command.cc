// outboxd status: the dashboard (ops/status.h) as an aligned table or JSON on stdout.
// With --max-age, exit 1 when the oldest unacknowledged (CDC) or pending (polling)
// event is older: a cron-ready alert.
#include <iostream>

#include "absl/time/time.h"
#include "base/log.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/secrets.h"
#include "ops/status.h"
#include "pg/connection.h"

namespace outboxd::cli {
namespace {

struct StatusCommand {
  PgFlags pg;
  ops::StatusOptions options;
  bool json = false;
  DurationFlag max_age{""};
  std::string mode = "auto";
  std::string source = "table";
  CLI::Option* slot_flag = nullptr;

  CLI::App* Register(CLI::App& app) {
    CLI::App* cmd = app.add_subcommand(
        "status", "Slot, lag and the age of the oldest unacknowledged event");
    AddPgFlags(cmd, pg);
    Flag(cmd, "table", options.table, "Outbox table ([schema.]name)")->capture_default_str();
    slot_flag = Flag(cmd, "slot", options.slot,
                     "Logical replication slot; when it is missing or another database's, an "
                     "error unless the database never had a CDC relay (see --mode)")
                    ->capture_default_str();
    Flag(cmd, "mode", mode,
         "cdc (read the slot), poll (the polling relay's columns) or auto: cdc, or poll when "
         "the slot is not named and the database never had a CDC relay")
        ->capture_default_str()
        ->check(CLI::IsMember({"auto", "cdc", "poll"}));
    Flag(cmd, "source", source,
         "The relay's --source: with messages (WAL-only) the slot's backlog is shown instead "
         "of outbox row counts")
        ->check(CLI::IsMember({"table", "messages", "both"}))
        ->capture_default_str();
    Switch(cmd, "json", json, "Print one JSON object instead of the table");
    Flag(cmd, "max-age", max_age,
         "Exit 1 when the oldest unacknowledged event is older than this");
    Flag(cmd, "created-at-column", options.created_at_column, "Column with the creation time")
        ->capture_default_str();
    return cmd;
  }

  int Run() {
    options.mode = mode == "cdc"    ? ops::StatusMode::kCdc
                   : mode == "poll" ? ops::StatusMode::kPoll
                                    : ops::StatusMode::kAuto;
    options.wal_only = source == "messages";
    // A slot from the config file is not counted by CLI11; it differs from the default.
    options.slot_given = slot_flag->count() > 0 || options.slot != ops::StatusOptions().slot;
    absl::StatusOr<pg::Connection> conn = ConnectPg(pg);
    if (!conn.ok()) return Fail(conn.status(), Phase::kStarting);
    absl::StatusOr<ops::OutboxStatus> status = ops::QueryStatus(*conn, options);
    if (!status.ok()) return Fail(status.status(), Phase::kStarting);
    std::cout << (json ? ops::FormatStatusJson(*status) : ops::FormatStatusTable(*status));
    std::cout.flush();
    if (!status->age_unknown.empty()) {
      spdlog::warn("{}", status->age_unknown);
      if (!max_age.text.empty()) {
        spdlog::error(
            "--max-age {} cannot be judged without the created-at column; alert on "
            "unacked instead",
            max_age.text);
        return kExitConfig;
      }
    }
    if (!max_age.text.empty() && status->wal_only) {
      spdlog::error("--max-age {} cannot be judged with --source messages (no table holds the "
                    "events); alert on backlog_bytes instead",
                    max_age.text);
      return kExitConfig;
    }
    if (!max_age.text.empty() && status->oldest_age_s() > absl::ToDoubleSeconds(max_age.value)) {
      spdlog::error("the oldest {} event is {:.1f}s old, more than --max-age {}",
                    status->mode == "cdc" ? "unacknowledged" : "pending", status->oldest_age_s(),
                    max_age.text);
      return kExitFailure;
    }
    return kExitOk;
  }
};

}  // namespace

Command RegisterStatus(CLI::App& app) { return RegisterCommand<StatusCommand>(app); }

}  // namespace outboxd::cli
