// Secrets from files, so they stay out of argv (ps), the environment
// (/proc/<pid>/environ) and the logs: --pg-password-file PATH for every command that
// takes --pg, --kafka-secret-file KEY=PATH for every command that takes --brokers.
// Each secret file's content, with one trailing newline stripped, is the secret; it
// is handed to libpq or librdkafka in memory and redacted from every log line.
//
//   SecretFlags secrets;
//   AddPgSecretFlags(cmd, secrets);                 // in Register
//   AddKafkaSecretFlags(cmd, secrets);              // ... if the command has --brokers
//   if (absl::Status s = ApplyPgSecrets(secrets, pg); !s.ok()) return Fail(s, Phase::kStarting);
//   if (absl::Status s = ApplyKafkaSecrets(secrets, kafka_options); !s.ok()) ...
#ifndef OUTBOXD_CLI_SECRETS_H_
#define OUTBOXD_CLI_SECRETS_H_

#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kafka/publisher.h"

namespace outboxd::cli {

struct SecretFlags {
  std::string pg_password_file;
  std::vector<std::string> kafka_secret_files;  // KEY=PATH
};

// --pg-password-file (OUTBOXD_PG_PASSWORD_FILE).
void AddPgSecretFlags(CLI::App* cmd, SecretFlags& secrets);
// --kafka-secret-file KEY=PATH, repeatable (OUTBOXD_KAFKA_SECRET_FILE).
void AddKafkaSecretFlags(CLI::App* cmd, SecretFlags& secrets);

// Reads --pg-password-file into `conninfo` (see pg::ConninfoWithPassword) and marks
// every PostgreSQL password it holds (from the file or written inline) for redaction.
// An unreadable file: InvalidArgument naming the flag and the path.
absl::Status ApplyPgSecrets(const SecretFlags& secrets, std::string& conninfo);

// Adds each --kafka-secret-file property (after the --kafka ones, so a file wins) and
// marks every secret-looking property value for redaction.
absl::Status ApplyKafkaSecrets(const SecretFlags& secrets, kafka::PublisherOptions& options);

// A secret file's content without one trailing newline ("\n" or "\r\n"; any other
// whitespace is part of the secret). InvalidArgument naming the flag and the path when
// it cannot be read or is larger than 64 KiB (never quoting its content); a warning
// line with the fix (chmod 0400) when others may read it, or its group when root does
// not own it (a root-owned 0440 file, a Kubernetes Secret under fsGroup, is quiet).
absl::StatusOr<std::string> ReadSecretFile(const std::string& flag, const std::string& path);

}  // namespace outboxd::cli

#endif  // OUTBOXD_CLI_SECRETS_H_
