// Shared by the subcommands: flags with their OUTBOXD_* environment variables, exit
// codes, durations, the outbox's column and format flags, the stop signal. Each
// sink's flags are in cli/sink_flags.h.
//
//   Flag(cmd, "pg", pg, "PostgreSQL conninfo")->required();   // --pg or OUTBOXD_PG
//   if (!status.ok()) return Fail(status, Phase::kStarting);
#ifndef OUTBOXD_CLI_COMMON_H_
#define OUTBOXD_CLI_COMMON_H_

#include <string>
#include <type_traits>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/stop_signal.h"
#include "outbox/event.h"
#include "outbox/message_format.h"

namespace outboxd::cli {

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitConfig = 2;

// When a command failed: before it did any work, an unreachable server is something
// only a person can fix (exit 2); once it ran, it is an outage (exit 1).
enum class Phase { kStarting, kRunning };

// Logs the error and returns the exit code: 2 for configuration and environment
// errors (and, while kStarting, an unreachable server), 1 otherwise.
int Fail(const absl::Status& status, Phase phase);

// A command-line parse error as one log line with the fix, e.g.
//   "--brokers is required (or set OUTBOXD_BROKERS); see outboxd run --help"
// and its exit code (2; 0 for --help and --version, which print as usual).
int ParseFailure(const CLI::App& app, const CLI::ParseError& error);

// OUTBOXD_<NAME> for flag --<name> (dashes become underscores).
std::string EnvName(const std::string& name);

// A repeatable flag's variable holds one value per line (OUTBOXD_KAFKA=$'acks=all\n
// linger.ms=5'): no value of those flags (a librdkafka KEY=VALUE, a KEY=PATH, a
// NAME=/json/pointer) holds a newline, while commas, semicolons and spaces all occur in
// librdkafka values. Empty lines are skipped. PEM text goes through a file instead.
inline constexpr char kRepeatableSeparator = '\n';

// Adds --<name> with its environment variable; a flag wins over its variable.
template <typename T>
CLI::Option* Flag(CLI::App* app, const std::string& name, T& value, const std::string& help) {
  CLI::Option* option = app->add_option("--" + name, value, help)->envname(EnvName(name));
  if constexpr (std::is_same_v<T, std::vector<std::string>>) {
    option->delimiter(kRepeatableSeparator);
  }
  return option;
}

// A switch (--json, no value) with its environment variable.
inline CLI::Option* Switch(CLI::App* app, const std::string& name, bool& value,
                           const std::string& help) {
  return app->add_flag("--" + name, value, help)->envname(EnvName(name));
}

// --id-column ... --created-at-column: the outbox column mapping (same flags for run
// and poll).
void AddColumnFlags(CLI::App* cmd, outbox::ColumnMapping& columns);
// --headers-column: the row's own headers (outbox/message_format.h), for setup and run.
void AddHeadersColumnFlag(CLI::App* cmd, outbox::ColumnMapping& columns);

// --format json|envelope|protobuf, --header NAME=/json/pointer (repeatable) and
// --key-pointer /json/pointer: the message format (outbox/message_format.h), same
// flags for run, poll and dead-letter replay.
struct FormatFlags {
  std::string format = "json";
  std::vector<std::string> headers;
  std::string key_pointer;
  std::string ce_source;  // empty: pg::DefaultCloudEventSource
};
void AddFormatFlags(CLI::App* cmd, FormatFlags& flags);
// InvalidArgument (exit 2) with the fix for an unknown format, a bad pointer, or a
// header name given twice.
absl::Status ResolveFormat(const FormatFlags& flags, outbox::MessageFormat& format);

// A duration flag ("500ms", "7d"): the text as given, and its value, which CLI11
// fills as it reads the flag (its Flag overload below), so `value` is always the
// default or what was given. A bad duration is a parse error (exit 2):
//   "--since: bad duration "1x": write a whole number and a unit, e.g. 500ms, ...".
// An empty default means "not given" (value zero).
struct DurationFlag {
  explicit DurationFlag(std::string default_text);
  std::string text;
  absl::Duration value;
};
CLI::Option* Flag(CLI::App* app, const std::string& name, DurationFlag& flag,
                  const std::string& help);

// SIGTERM and SIGINT notify `stop` until the returned guard is destroyed.
class StopOnSignals {
 public:
  explicit StopOnSignals(StopSignal* stop);
  ~StopOnSignals();
};

}  // namespace outboxd::cli

#endif  // OUTBOXD_CLI_COMMON_H_
