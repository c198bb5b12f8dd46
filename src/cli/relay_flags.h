// The flags `run` and `poll` share, registered and checked in one place: --pg first
// (AddRelayCommand), --table and --topic (AddOutboxFlags), then the sink's
// (cli/sink_flags.h), --pg-password-file, the message format, --metrics and the
// outbox column mapping (AddRelayFlags), in that order in each command's --help.
//
//   RelayFlags flags{.metrics = "127.0.0.1:9187"};
//   CLI::App* cmd = AddRelayCommand(app, "run", "Relay ...", options.conninfo);  // Register
//   ... the command's own flags ...
//   AddOutboxFlags(cmd, options.table, options.topic_template);
//   AddRelayFlags(cmd, flags, options.columns);
//   OUTBOXD_RETURN_IF_ERROR(
//       ResolveRelayFlags(flags, options.conninfo, options.table, options.format));
#ifndef OUTBOXD_CLI_RELAY_FLAGS_H_
#define OUTBOXD_CLI_RELAY_FLAGS_H_

#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "cli/common.h"
#include "cli/secrets.h"
#include "cli/sink_flags.h"
#include "outbox/event.h"
#include "outbox/message_format.h"

namespace outboxd::cli {

struct RelayFlags {
  SinkFlags sink;
  SecretFlags secrets;
  FormatFlags format;
  std::string metrics;  // HOST:PORT for /metrics and /healthz; empty: off
};

// The relay's subcommand of `app`, opening with --pg (required) into `conninfo`.
CLI::App* AddRelayCommand(CLI::App& app, const std::string& name, const std::string& description,
                          std::string& conninfo);
// --table, the outbox table the relay reads, and --topic, the template of the topic
// (routing key, subject) it publishes each event to.
void AddOutboxFlags(CLI::App* cmd, std::string& table, std::string& topic_template);
void AddRelayFlags(CLI::App* cmd, RelayFlags& flags, outbox::ColumnMapping& columns);

// --pg-password-file into `conninfo`, the sink's own checks (ResolveSinkFlags) and the
// format into `format`: the first error, InvalidArgument (exit 2) with the fix.
// CloudEvents (--format cloudevents[-json]): the default source names the conninfo's
// database and `table`; the binary mode's header prefix is the sink's binding's
// (CloudEventsPrefix).
absl::Status ResolveRelayFlags(RelayFlags& flags, std::string& conninfo, std::string_view table,
                               outbox::MessageFormat& format);
std::string CloudEventsPrefix(const SinkFlags& sink);
// --dedupe auto|on|off into `dedupe`, with `what` saying which events are looked for at
// the broker; CheckDedupe refuses "on" without a sink that can be read back (Kafka).
void AddDedupeFlag(CLI::App* cmd, std::string& dedupe, std::string_view what);
absl::Status CheckDedupe(std::string_view dedupe, const SinkFlags& sink);

}  // namespace outboxd::cli

#endif  // OUTBOXD_CLI_RELAY_FLAGS_H_
