// Hand-written scanners over the ABNF of www.w3.org/TR/trace-context (3.2.2 and
// 3.3.1): the values are short and checked per event, so no regex and no allocation
// beyond the key list of a tracestate (at most 32 views, on the stack). The character
// tests are lambdas, which the compiler inlines into the scans; passed as function
// pointers they were a call per character, a fifth of an event's encoding with a trace
// context (bench/message_format_benchmark.cc).
#include "outbox/trace_context.h"

#include <algorithm>
#include <array>

namespace outboxd::outbox {
namespace {

constexpr size_t kVersion00Size = 55;  // 2 + 1 + 32 + 1 + 16 + 1 + 2
constexpr size_t kMaxMembers = 32;

constexpr auto IsLowerHex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); };

bool AllLowerHex(std::string_view s) { return std::all_of(s.begin(), s.end(), IsLowerHex); }

bool AllZeros(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c == '0'; });
}

constexpr auto IsLcAlpha = [](char c) { return c >= 'a' && c <= 'z'; };
constexpr auto IsDigit = [](char c) { return c >= '0' && c <= '9'; };

constexpr auto IsKeyChar = [](char c) {
  return IsLcAlpha(c) || IsDigit(c) || c == '_' || c == '-' || c == '*' || c == '/';
};

// `first` for the first character, then up to `max_rest` key characters.
template <typename First>
bool IsKeyPart(std::string_view s, First first, size_t max_rest) {
  if (s.empty() || s.size() > max_rest + 1 || !first(s[0])) return false;
  return std::all_of(s.begin() + 1, s.end(), IsKeyChar);
}

constexpr auto IsTenantStart = [](char c) { return IsLcAlpha(c) || IsDigit(c); };

bool IsKey(std::string_view key) {
  const size_t at = key.find('@');
  if (at == std::string_view::npos) return IsKeyPart(key, IsLcAlpha, 255);
  return IsKeyPart(key.substr(0, at), IsTenantStart, 240) &&
         IsKeyPart(key.substr(at + 1), IsLcAlpha, 13);
}

// nblk-chr = %x21-2B / %x2D-3C / %x3E-7E; chr = %x20 / nblk-chr; 0*255chr nblk-chr.
bool IsValue(std::string_view value) {
  if (value.empty() || value.size() > 256 || value.back() == ' ') return false;
  return std::all_of(value.begin(), value.end(),
                     [](char c) { return c >= 0x20 && c <= 0x7e && c != ',' && c != '='; });
}

std::string_view TrimOws(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

std::optional<std::string_view> TraceparentDefect(std::string_view value) {
  if (value.size() < kVersion00Size || value[2] != '-' || value[35] != '-' || value[52] != '-') {
    return "malformed";
  }
  const std::string_view version = value.substr(0, 2);
  const std::string_view trace_id = value.substr(3, 32);
  const std::string_view parent_id = value.substr(36, 16);
  const std::string_view flags = value.substr(53, 2);
  if (!AllLowerHex(version) || !AllLowerHex(trace_id) || !AllLowerHex(parent_id) ||
      !AllLowerHex(flags)) {
    return "malformed";
  }
  if (version == "ff") return "bad_version";
  // Version 00 is exactly 55 characters; a later version may add "-" and more.
  if (value.size() > kVersion00Size && (version == "00" || value[kVersion00Size] != '-')) {
    return "malformed";
  }
  if (AllZeros(trace_id)) return "zero_trace_id";
  if (AllZeros(parent_id)) return "zero_parent_id";
  return std::nullopt;
}

std::optional<std::string_view> TracestateDefect(std::string_view value) {
  std::array<std::string_view, kMaxMembers> keys;
  size_t members = 0;
  for (size_t start = 0; start <= value.size();) {
    size_t comma = value.find(',', start);
    if (comma == std::string_view::npos) comma = value.size();
    const std::string_view member = TrimOws(value.substr(start, comma - start));
    start = comma + 1;
    if (member.empty()) continue;  // empty list-members are allowed (3.3.1.1)
    if (members == kMaxMembers) return "too_many_members";
    const size_t eq = member.find('=');
    if (eq == std::string_view::npos || !IsKey(member.substr(0, eq)) ||
        !IsValue(member.substr(eq + 1))) {
      return "malformed";
    }
    const std::string_view key = member.substr(0, eq);
    if (std::find(keys.begin(), keys.begin() + members, key) != keys.begin() + members) {
      return "duplicate_key";
    }
    keys[members++] = key;
  }
  return std::nullopt;
}

}  // namespace outboxd::outbox
