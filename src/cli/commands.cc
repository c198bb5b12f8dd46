#include "cli/commands.h"

#include <vector>

#include "cli/config_file.h"

namespace outboxd::cli {

std::vector<Command> RegisterCommands(CLI::App& app) {
  app.require_subcommand(1);
  app.set_version_flag("--version", "outboxd " OUTBOXD_VERSION);
  std::vector<Command> commands = {
      RegisterSetup(app),  RegisterRun(app),       RegisterPoll(app),      RegisterCleanup(app),
      RegisterStatus(app), RegisterReconcile(app), RegisterDeadLetter(app)};
  AddConfigFlags(app);
  return commands;
}

}  // namespace outboxd::cli
