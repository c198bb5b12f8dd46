// --config FILE (or OUTBOXD_CONFIG) on every subcommand: an optional TOML file whose
// values become the chosen command's defaults, so that a flag wins over its OUTBOXD_*
// variable, the variable over the file, and the file over the built-in default.
//
//   # outboxd.toml: keys are flag names without the dashes
//   pg = "host=db dbname=app user=outboxd"
//   brokers = "kafka1:9092"
//   kafka = ["linger.ms=5", "acks=all"]   # a repeatable flag takes an array
//   [cleanup]                              # only for `outboxd cleanup`
//   retention = "3d"
//
//   AddConfigFlags(app);                                  // after the subcommands
//   if (absl::Status s = LoadConfigFile(app, args); !s.ok()) return Fail(s, Phase::kStarting);
//   app.parse(argc, argv);
//
// CLI11 reads its own config files before the environment (file > env) and checks
// required flags during the parse, so the file is read before the parse instead: its
// values are stored in the flags' variables as if they were the built-in defaults,
// and a flag the file supplies is no longer required. A [command] table (a nested one,
// [dead-letter.replay], for a nested command) overrides the top-level keys for that
// command. A top-level key the chosen command lacks is ignored, so one file serves
// run and cleanup; a key no command knows, or a value of the wrong type, is an error
// naming the file, the line, the key and the fix.
#ifndef OUTBOXD_CLI_CONFIG_FILE_H_
#define OUTBOXD_CLI_CONFIG_FILE_H_

#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"

namespace outboxd::cli {

// The TOML type a flag takes in the file: a switch (--json) a boolean, --max-in-flight
// an integer, --max-in-flight-bytes an integer or a string with a suffix ("64MiB"),
// --kafka an array of strings, everything else (durations too: "10s") a string.
enum class ConfigType { kBoolean, kInteger, kSize, kNumber, kString, kStringArray };
ConfigType ConfigTypeOf(const CLI::Option& option);
const char* ConfigTypeName(ConfigType type);  // "string", "array of strings", ...

// The flag's key in the file ("max-in-flight" for --max-in-flight), or "" for those
// a file cannot set (--config, --help).
std::string ConfigKey(const CLI::Option& option);

// Adds --config FILE (OUTBOXD_CONFIG) to every command that takes flags.
void AddConfigFlags(CLI::App& app);

// Finds the file (--config in `args`, else OUTBOXD_CONFIG; none: nothing to do) and
// the command `args` names, checks the whole file and applies it to that command.
// `args` is argv without the program name. Does nothing for --help and --version, or
// when `args` names no command that takes flags (the parse then reports it).
absl::Status LoadConfigFile(CLI::App& app, const std::vector<std::string>& args);

}  // namespace outboxd::cli

#endif  // OUTBOXD_CLI_CONFIG_FILE_H_
