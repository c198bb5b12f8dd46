// A JSON string literal (RFC 8259 section 7), for the envelope value format and the
// JSON log lines: quotes, backslashes and control characters escaped, UTF-8 as is.
// Log lines may carry any bytes (a server's message, a bad payload), so they ask for
// bytes that are not UTF-8 to become U+FFFD and every line to parse; the envelope's
// fields are PostgreSQL text and skip that check on the hot path.
//
//   std::string out;
//   AppendJsonString(out, "agg \"7\"");                          // "agg \"7\""
//   AppendJsonString(out, raw, InvalidUtf8::kReplace);
#ifndef OUTBOXD_BASE_JSON_STRING_H_
#define OUTBOXD_BASE_JSON_STRING_H_

#include <cstddef>
#include <string>
#include <string_view>

namespace outboxd {

enum class InvalidUtf8 { kKeep, kReplace };

namespace json_internal {

// Length of the valid UTF-8 sequence starting at s[i], or 0 if it is not one.
inline size_t Utf8Length(std::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  const size_t n = c < 0x80           ? 1
                   : (c >> 5) == 0x6  ? 2
                   : (c >> 4) == 0xE  ? 3
                   : (c >> 3) == 0x1E ? 4
                                      : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
  }
  return n;
}

// Whether a byte is copied as it is: printable ASCII other than the quote and the
// backslash, and (kKeep only) any byte of a multi-byte sequence. A table, so the scan
// costs a load per byte.
struct PlainBytes {
  bool keep[256] = {};
  bool replace[256] = {};
  constexpr PlainBytes() {
    for (int u = 0x20; u < 256; ++u) {
      keep[u] = u != '"' && u != '\\';
      replace[u] = keep[u] && u < 0x80;
    }
  }
};
inline constexpr PlainBytes kPlainBytes;

}  // namespace json_internal

// Appends `text` to `out` as a quoted JSON string. Runs of bytes that need no escape
// are appended whole (the CloudEvents structured format escapes nine attributes per
// event; a byte at a time, that was a third of its encoding time).
inline void AppendJsonString(std::string& out, std::string_view text,
                             InvalidUtf8 invalid = InvalidUtf8::kKeep) {
  static constexpr char kHex[] = "0123456789abcdef";
  out.push_back('"');
  const bool* plain = invalid == InvalidUtf8::kKeep ? json_internal::kPlainBytes.keep
                                                    : json_internal::kPlainBytes.replace;
  for (size_t i = 0; i < text.size();) {
    size_t run = i;
    while (run < text.size() && plain[static_cast<unsigned char>(text[run])]) ++run;
    out.append(text.data() + i, run - i);
    if (run == text.size()) break;
    i = run;
    const char c = text[i];
    const auto u = static_cast<unsigned char>(c);
    switch (c) {
      case '"': out.append("\\\""); break;
      case '\\': out.append("\\\\"); break;
      case '\b': out.append("\\b"); break;
      case '\f': out.append("\\f"); break;
      case '\n': out.append("\\n"); break;
      case '\r': out.append("\\r"); break;
      case '\t': out.append("\\t"); break;
      default:
        if (u < 0x20) {
          out.append("\\u00");
          out.push_back(kHex[u >> 4]);
          out.push_back(kHex[u & 0xf]);
        } else {  // u >= 0x80 with kReplace
          const size_t n = json_internal::Utf8Length(text, i);
          if (n == 0) {
            out.append("\\ufffd");
          } else {
            out.append(text.substr(i, n));
            i += n;
            continue;
          }
        }
    }
    ++i;
  }
  out.push_back('"');
}

}  // namespace outboxd

#endif  // OUTBOXD_BASE_JSON_STRING_H_
