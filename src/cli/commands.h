// The subcommands. Each registers its flags on the app and, when parsed, runs and
// returns the process exit code.
#ifndef OUTBOXD_CLI_COMMANDS_H_
#define OUTBOXD_CLI_COMMANDS_H_

#include <functional>

#include "CLI/CLI.hpp"

namespace outboxd::cli {

// Registers the subcommand; the returned function runs it after parsing.
using Command = std::function<int()>;

Command RegisterSetup(CLI::App& app);
Command RegisterRun(CLI::App& app);
Command RegisterPoll(CLI::App& app);
Command RegisterReconcile(CLI::App& app);
Command RegisterDeadLetter(CLI::App& app);

}  // namespace outboxd::cli

#endif  // OUTBOXD_CLI_COMMANDS_H_
