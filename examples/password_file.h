// --pg-password-file for the example binaries, so docker-compose.yml can hand them the
// PostgreSQL password as a secret file instead of in the environment, as it does
// `outboxd` (whose own reading, with the permission warning, is src/cli/secrets.h).
//
//   absl::StatusOr<std::string> pg = outboxd::examples::WithPasswordFile(flags.pg, path);
#ifndef OUTBOXD_EXAMPLES_PASSWORD_FILE_H_
#define OUTBOXD_EXAMPLES_PASSWORD_FILE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "base/read_file.h"
#include "pg/connection.h"

namespace outboxd::examples {

// `conninfo` with the password held in the file at `path` (one trailing newline
// stripped); `conninfo` itself when `path` is empty. InvalidArgument naming the flag and
// the path, never the content, when the file cannot be read or holds over 64 KiB.
inline absl::StatusOr<std::string> WithPasswordFile(const std::string& conninfo,
                                                    const std::string& path) {
  if (path.empty()) return conninfo;
  absl::StatusOr<std::string> password = ReadFile(path, 64 * 1024);
  if (!password.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--pg-password-file ", path, ": cannot read it (", password.status().message(),
                     "); give a file this user can read"));
  }
  if (password->ends_with("\r\n")) {
    password->resize(password->size() - 2);
  } else if (password->ends_with("\n")) {
    password->pop_back();
  }
  return pg::ConninfoWithPassword(conninfo, *password);
}

}  // namespace outboxd::examples

#endif  // OUTBOXD_EXAMPLES_PASSWORD_FILE_H_
