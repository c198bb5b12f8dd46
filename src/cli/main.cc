// outboxd: the command line. Each subcommand (cli/*_command.cc) maps flags and their
// OUTBOXD_* environment variables (a flag wins) onto one module's options and turns
// the module's Status into an exit code: 0 clean stop, 2 configuration or
// environment error, 1 anything else.
#include <vector>

#include "CLI/CLI.hpp"
#include "base/log.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/logging.h"

int main(int argc, char** argv) {
  using namespace outboxd::cli;
  InitLogging();

  CLI::App app{"outboxd: publishes transactional-outbox events from PostgreSQL's WAL to Kafka"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "outboxd 0.1.0");
  std::vector<Command> commands = {RegisterSetup(app), RegisterRun(app), RegisterPoll(app),
                                   RegisterCleanup(app), RegisterStatus(app),
                                   RegisterReconcile(app), RegisterDeadLetter(app)};
  LogFlags log_flags;
  AddLogFlags(app, log_flags);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    ApplyLogFlags(log_flags);  // as far as they were parsed: the error line in that format
    return ParseFailure(app, e);
  }
  ApplyLogFlags(log_flags);
  for (const Command& command : commands) {
    if (int code = command(); code >= 0) return code;
  }
  return kExitConfig;
}
