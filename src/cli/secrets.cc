#include "cli/secrets.h"

#include <libpq-fe.h>
#include <sys/stat.h>

#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/read_file.h"
#include "base/status_macros.h"
#include "cli/common.h"
#include "cli/logging.h"
#include "pg/connection.h"

namespace outboxd::cli {
namespace {

// A password, a key or a JAAS line fits many times over; a bigger file is the wrong
// path (a log, a device), and reading it whole would hold it all in memory.
constexpr size_t kMaxSecretFileBytes = 64 * 1024;

// Who may read a secret file without a warning: its owner only (0600, 0400) or, when
// root owns it, its group too (0640, 0440). The second is how Kubernetes mounts a
// Secret for a pod that runs as a non-root user: the kubelet makes each file owned by
// root, group fsGroup, and adds 0440 to defaultMode, so the pod reads it through its
// group (deploy/kubernetes/base/deployment.yaml). Only root could have given the group
// that access, as PostgreSQL reasons for its server key, which it accepts on the same
// terms. Anything for others, group write, or group access to a file not owned by root
// is worth a warning: ssh refuses such a key and libpq ignores such a ~/.pgpass. The
// file is read anyway (a mounted Secret may be 0644), but the operator hears about it.
[[nodiscard]] bool OpenTooWide(const struct stat& st) {
  const mode_t too_wide = st.st_uid == 0 ? (S_IWGRP | S_IXGRP | S_IRWXO) : (S_IRWXG | S_IRWXO);
  return (st.st_mode & too_wide) != 0;
}

void WarnIfOthersCanRead(const std::string& flag, const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !OpenTooWide(st)) return;
  spdlog::warn(
      "--{} {} is open to group or others (mode {:04o}, owner uid {}); run chmod 0400 on it "
      "(0440 if root owns it and outboxd reads it through its group)",
      flag, path, st.st_mode & 07777, st.st_uid);
}

// The password written in the conninfo itself (key=value or URI), if any.
std::string InlinePassword(const std::string& conninfo) {
  std::unique_ptr<PQconninfoOption, decltype(&PQconninfoFree)> options(
      PQconninfoParse(conninfo.c_str(), nullptr), &PQconninfoFree);
  if (options == nullptr) return "";
  for (PQconninfoOption* o = options.get(); o->keyword != nullptr; ++o) {
    if (std::strcmp(o->keyword, "password") == 0 && o->val != nullptr) return o->val;
  }
  return "";
}

}  // namespace

void AddPgSecretFlags(CLI::App* cmd, SecretFlags& secrets) {
  Flag(cmd, "pg-password-file", secrets.pg_password_file,
       "File holding the PostgreSQL password (kept out of argv, environment and logs)");
}

void AddPgFlags(CLI::App* cmd, PgFlags& flags) {
  Flag(cmd, "pg", flags.conninfo, "PostgreSQL conninfo or URI")->required();
  AddPgSecretFlags(cmd, flags.secrets);
}

absl::StatusOr<pg::Connection> ConnectPg(PgFlags& flags) {
  OUTBOXD_RETURN_IF_ERROR(ApplyPgSecrets(flags.secrets, flags.conninfo));
  return pg::Connection::Open(flags.conninfo);
}

absl::StatusOr<std::string> ReadSecretFile(const std::string& flag, const std::string& path) {
  absl::StatusOr<std::string> read = ReadFile(path, kMaxSecretFileBytes);
  if (read.status().code() == absl::StatusCode::kOutOfRange) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, " ", path,
                                                   ": larger than 64 KiB, so not a secret file; "
                                                   "give the file that holds only the secret"));
  }
  if (!read.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, " ", path, ": cannot read it (",
                                                   read.status().message(),
                                                   "); give a file this user can read"));
  }
  WarnIfOthersCanRead(flag, path);
  std::string secret = *std::move(read);
  if (secret.ends_with("\r\n")) {
    secret.resize(secret.size() - 2);
  } else if (secret.ends_with("\n")) {
    secret.pop_back();
  }
  return secret;
}

absl::Status ApplyPgSecrets(const SecretFlags& secrets, std::string& conninfo) {
  RedactFromLogs(InlinePassword(conninfo));
  if (secrets.pg_password_file.empty()) return absl::OkStatus();
  OUTBOXD_ASSIGN_OR_RETURN(std::string password,
                           ReadSecretFile("pg-password-file", secrets.pg_password_file));
  RedactFromLogs(password);
  OUTBOXD_ASSIGN_OR_RETURN(conninfo, pg::ConninfoWithPassword(conninfo, password));
  return absl::OkStatus();
}

}  // namespace outboxd::cli
