// Log format and level for every subcommand (--log-format text|json, --log-level
// trace|debug|info|warn|error, with OUTBOXD_LOG_FORMAT / OUTBOXD_LOG_LEVEL), the
// redaction of secrets from every log line, and librdkafka's log lines routed
// through the same logger.
//
//   LogFlags log_flags;
//   AddLogFlags(app, log_flags);      // after the subcommands are registered
//   app.parse(argc, argv);
//   ApplyLogFlags(log_flags);         // json: {"ts":"...","level":"info","msg":"..."}
//   RedactFromLogs(password);         // never printed, whatever line carries it
#ifndef OUTBOXD_CLI_LOGGING_H_
#define OUTBOXD_CLI_LOGGING_H_

#include <string>
#include <string_view>

#include "CLI/CLI.hpp"

namespace outboxd::cli {

struct LogFlags {
  std::string format = "text";
  std::string level = "info";
};

// The default logger ("outboxd", stderr): text format, level info.
void InitLogging();

// Adds --log-format and --log-level to every subcommand that has no subcommands of
// its own (one definition, shared by all).
void AddLogFlags(CLI::App& app, LogFlags& flags);

// Switches the default logger to the chosen format and level (values were checked
// by the flags' validators).
void ApplyLogFlags(const LogFlags& flags);

// Replaces `secret` with "[redacted]" in every later log line, whatever produced it
// (our messages, libpq's, librdkafka's). Secrets shorter than 4 characters are
// ignored (they would mangle ordinary words); call before other threads log.
void RedactFromLogs(std::string_view secret);

// For kafka::PublisherOptions::on_log: librdkafka's lines (syslog levels) as
// "kafka <facility>: <message>" at the matching level.
void LogKafka(int level, std::string_view facility, std::string_view message);

}  // namespace outboxd::cli

#endif  // OUTBOXD_CLI_LOGGING_H_
