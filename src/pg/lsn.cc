// LSN text form: two hex numbers "HI/LO", the high and low 32 bits, upper-case
// without leading zeros (what pg_lsn_out prints).
#include "pg/lsn.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace outboxd::pg {
namespace {

// Parses 1..8 hex digits; absl's parser would also accept a sign or "0x".
bool ParseHex32(std::string_view text, uint32_t& out) {
  if (text.empty() || text.size() > 8) return false;
  uint32_t value = 0;
  for (char c : text) {
    uint32_t digit;
    if (c >= '0' && c <= '9') {
      digit = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      digit = c - 'a' + 10;
    } else if (c >= 'A' && c <= 'F') {
      digit = c - 'A' + 10;
    } else {
      return false;
    }
    value = value << 4 | digit;
  }
  out = value;
  return true;
}

}  // namespace

std::string FormatLsn(Lsn lsn) {
  return absl::StrFormat("%X/%X", static_cast<uint32_t>(lsn >> 32), static_cast<uint32_t>(lsn));
}

absl::StatusOr<Lsn> ParseLsn(std::string_view text) {
  size_t slash = text.find('/');
  uint32_t hi = 0;
  uint32_t lo = 0;
  if (slash == std::string_view::npos || !ParseHex32(text.substr(0, slash), hi) ||
      !ParseHex32(text.substr(slash + 1), lo)) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid LSN \"", std::string(text.substr(0, 40)),
                     "\": expected two hex numbers like 16/B374D848"));
  }
  return static_cast<Lsn>(hi) << 32 | lo;
}

}  // namespace outboxd::pg
