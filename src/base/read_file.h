// ReadFile: a whole file's bytes, or the reason it cannot be read as the system words
// it (strerror: "No such file or directory", "Is a directory", "Permission denied").
// Callers wrap that reason in their own one-line message naming the flag to fix.
//
//   absl::StatusOr<std::string> text = ReadFile(path);
//   if (!text.ok()) {
//     return absl::InvalidArgumentError(absl::StrCat("cannot read config file ", path, ": ",
//                                                    text.status().message()));
//   }
#ifndef OUTBOXD_BASE_READ_FILE_H_
#define OUTBOXD_BASE_READ_FILE_H_

#include <cstddef>
#include <limits>
#include <string>

#include "absl/status/statusor.h"

namespace outboxd {

// The status code follows errno (kNotFound for ENOENT, ...); its message is strerror's.
// A file longer than `max_bytes` is OutOfRange "larger than N bytes", its content
// dropped: a secret file pointed at a log or a device must not be read whole.
absl::StatusOr<std::string> ReadFile(const std::string& path,
                                     size_t max_bytes = std::numeric_limits<size_t>::max());

}  // namespace outboxd

#endif  // OUTBOXD_BASE_READ_FILE_H_
