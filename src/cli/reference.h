// The configuration reference, docs/configuration.md, generated from the commands'
// own flag definitions (one source of truth): for every command, each flag with its
// environment variable, its key in the --config file, its default and its help text.
// Flags in the hidden group "" (test-only) are left out.
//
//   build/bin/outboxd --help-reference > docs/configuration.md
//
// tests/cli checks that the committed file equals this output.
#ifndef OUTBOXD_CLI_REFERENCE_H_
#define OUTBOXD_CLI_REFERENCE_H_

#include <string>

#include "CLI/CLI.hpp"

namespace outboxd::cli {

// The whole document, markdown: precedence, file format, an example file, then one
// table per command in registration order.
std::string ConfigurationReference(const CLI::App& app);

}  // namespace outboxd::cli

#endif  // OUTBOXD_CLI_REFERENCE_H_
