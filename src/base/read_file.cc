#include "base/read_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace outboxd {
namespace {

absl::Status ErrnoStatus(int error) {
  return absl::Status(absl::ErrnoToStatusCode(error), std::strerror(error));
}

}  // namespace

// open(2) and read(2), not std::ifstream: a directory opens fine and fails only on
// read, with EISDIR, and errno is always the one that stopped the read.
absl::StatusOr<std::string> ReadFile(const std::string& path, size_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno);
  std::string text;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n > 0) {
      if (static_cast<size_t>(n) > max_bytes - text.size()) {
        ::close(fd);
        return absl::OutOfRangeError(absl::StrCat("larger than ", max_bytes, " bytes"));
      }
      text.append(buf, n);
    } else if (n == 0) {
      break;
    } else if (errno != EINTR) {
      const int error = errno;
      ::close(fd);
      return ErrnoStatus(error);
    }
  }
  ::close(fd);
  return text;
}

}  // namespace outboxd
