// outboxd: the command line. Each subcommand (cli/*_command.cc) maps flags and their
// OUTBOXD_* environment variables (a flag wins) onto one module's options and turns
// the module's Status into an exit code: 0 clean stop, 2 configuration or
// environment error, 1 anything else.
#include <vector>

#include "CLI/CLI.hpp"
#include "base/log.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "spdlog/sinks/stdout_color_sinks.h"

int main(int argc, char** argv) {
  using namespace outboxd::cli;
  auto logger = spdlog::stderr_color_mt("outboxd");
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e%z %^%l%$ %v");
  spdlog::set_default_logger(logger);

  CLI::App app{"outboxd: publishes transactional-outbox events from PostgreSQL's WAL to Kafka"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "outboxd 0.1.0");
  std::vector<Command> commands = {RegisterSetup(app), RegisterRun(app), RegisterPoll(app),
                                   RegisterCleanup(app), RegisterStatus(app),
                                   RegisterReconcile(app), RegisterDeadLetter(app)};
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return ParseFailure(app, e);
  }
  for (const Command& command : commands) {
    if (int code = command(); code >= 0) return code;
  }
  return kExitConfig;
}
