// The flags `run` and `poll` share, registered and checked in one place: the sink's
// (cli/sink_flags.h), --pg-password-file, the message format, --metrics and the
// outbox column mapping, in that order in each command's --help.
//
//   RelayFlags flags{.metrics = "127.0.0.1:9187"};
//   AddRelayFlags(cmd, flags, options.columns);                          // in Register
//   OUTBOXD_RETURN_IF_ERROR(ResolveRelayFlags(flags, options.conninfo, options.format));
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

void AddRelayFlags(CLI::App* cmd, RelayFlags& flags, outbox::ColumnMapping& columns);

// --pg-password-file into `conninfo`, the sink's own checks (ResolveSinkFlags) and the
// format into `format`: the first error, InvalidArgument (exit 2) with the fix.
absl::Status ResolveRelayFlags(RelayFlags& flags, std::string& conninfo,
                               outbox::MessageFormat& format);

}  // namespace outboxd::cli

#endif  // OUTBOXD_CLI_RELAY_FLAGS_H_
