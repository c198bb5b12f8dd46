// outboxd: the command line. Each subcommand (cli/*_command.cc) maps flags and their
// OUTBOXD_* environment variables (a flag wins) onto one module's options and turns
// the module's Status into an exit code: 0 clean stop, 2 configuration or
// environment error, 1 anything else. Every command also reads --config FILE
// (cli/config_file.h) and the log flags (cli/logging.h); `outboxd --help-reference`
// prints docs/configuration.md.
#include <iostream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "base/log.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/config_file.h"
#include "cli/logging.h"
#include "cli/reference.h"

int main(int argc, char** argv) {
  using namespace outboxd::cli;
  InitLogging();

  CLI::App app{
      "outboxd: publishes transactional-outbox events from PostgreSQL's WAL to Kafka or "
      "RabbitMQ"};
  std::vector<Command> commands = RegisterCommands(app);
  LogFlags log_flags;
  AddLogFlags(app, log_flags);
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args == std::vector<std::string>{"--help-reference"}) {
    std::cout << ConfigurationReference(app);
    return kExitOk;
  }
  if (absl::Status s = LoadConfigFile(app, args); !s.ok()) {
    ApplyLogFlags(log_flags);
    return Fail(s, Phase::kStarting);
  }
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
