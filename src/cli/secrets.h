// Secrets from files, so they stay out of argv (ps), the environment
// (/proc/<pid>/environ) and the logs: --pg-password-file PATH for every command that
// takes --pg; the sinks' secret files (--kafka-secret-file, --amqp-url-file,
// --nats-url-file; --nats-creds-file only checked, libnats reads it) are read with
// ReadSecretFile too (cli/sink_flags.h). Each secret file's content, with
// one trailing newline stripped, is the secret; it is handed to libpq (or the
// broker's client) in memory and redacted from every log line.
//
//   SecretFlags secrets;
//   PgFlags pg;
//   AddPgFlags(cmd, pg);                            // in Register: --pg, --pg-password-file
//   absl::StatusOr<pg::Connection> conn = ConnectPg(pg);   // the password read, redacted
#ifndef OUTBOXD_CLI_SECRETS_H_
#define OUTBOXD_CLI_SECRETS_H_

#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pg/connection.h"

namespace outboxd::cli {

struct SecretFlags {
  std::string pg_password_file;
};

// --pg-password-file (OUTBOXD_PG_PASSWORD_FILE).
void AddPgSecretFlags(CLI::App* cmd, SecretFlags& secrets);

// --pg (required) and --pg-password-file side by side, for the commands that work on
// the database alone (setup, cleanup, status, reconcile, dead-letter).
struct PgFlags {
  std::string conninfo;
  SecretFlags secrets;
};
void AddPgFlags(CLI::App* cmd, PgFlags& flags);

// ApplyPgSecrets, then a connection to that database.
absl::StatusOr<pg::Connection> ConnectPg(PgFlags& flags);

// Reads --pg-password-file into `conninfo` (see pg::ConninfoWithPassword) and marks
// every PostgreSQL password it holds (from the file or written inline) for redaction.
// An unreadable file: InvalidArgument naming the flag and the path.
absl::Status ApplyPgSecrets(const SecretFlags& secrets, std::string& conninfo);

// A secret file's content without one trailing newline ("\n" or "\r\n"; any other
// whitespace is part of the secret). InvalidArgument naming the flag and the path when
// it cannot be read or is larger than 64 KiB (never quoting its content); a warning
// line with the fix (chmod 0400) when others may read it, or its group when root does
// not own it (a root-owned 0440 file, a Kubernetes Secret under fsGroup, is quiet).
absl::StatusOr<std::string> ReadSecretFile(const std::string& flag, const std::string& path);

}  // namespace outboxd::cli

#endif  // OUTBOXD_CLI_SECRETS_H_
