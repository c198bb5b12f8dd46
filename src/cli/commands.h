// The subcommands. Each registers its flags on the app and, when parsed, runs and
// returns the process exit code.
#ifndef OUTBOXD_CLI_COMMANDS_H_
#define OUTBOXD_CLI_COMMANDS_H_

#include <functional>
#include <memory>
#include <vector>

#include "CLI/CLI.hpp"

namespace outboxd::cli {

// Registers the subcommand; the returned function runs it after parsing (-1 when
// another subcommand was chosen).
using Command = std::function<int()>;

// For a command type with `CLI::App* Register(CLI::App&)` and `int Run()`.
template <typename T>
Command RegisterCommand(CLI::App& app) {
  auto command = std::make_shared<T>();
  CLI::App* cmd = command->Register(app);
  return [command, cmd] { return cmd->parsed() ? command->Run() : -1; };
}

// Every subcommand in `outboxd --help` order, --version, and --config on each command
// (cli/config_file.h): the whole command line, for main and the tests.
std::vector<Command> RegisterCommands(CLI::App& app);

Command RegisterSetup(CLI::App& app);
Command RegisterRun(CLI::App& app);
Command RegisterPoll(CLI::App& app);
Command RegisterReconcile(CLI::App& app);
Command RegisterDeadLetter(CLI::App& app);
Command RegisterCleanup(CLI::App& app);
Command RegisterStatus(CLI::App& app);

}  // namespace outboxd::cli

#endif  // OUTBOXD_CLI_COMMANDS_H_
