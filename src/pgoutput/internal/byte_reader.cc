// Error paths of ByteReader, kept out of line so the inlined reads stay small.
#include "pgoutput/internal/byte_reader.h"

#include "absl/strings/str_cat.h"

namespace outboxd::pgoutput::internal {

absl::Status ByteReader::Truncated(const char* field, size_t need, size_t left) {
  return absl::InvalidArgumentError(
      absl::StrCat("truncated ", field, ": need ", need, " bytes, ", left, " left"));
}

absl::Status ByteReader::Unterminated(const char* field, size_t left) {
  return absl::InvalidArgumentError(
      absl::StrCat("unterminated string ", field, ": no NUL in the last ", left, " bytes"));
}

absl::Status ByteReader::TrailingBytes(const char* message, size_t left) {
  return absl::InvalidArgumentError(
      absl::StrCat(left, " trailing bytes after the end of the ", message, " message"));
}

}  // namespace outboxd::pgoutput::internal
