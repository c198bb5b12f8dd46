// Values from outside (an outbox row, a Kafka message, a server's text) made safe for
// a text log line: control characters become escapes, so a value holding "\n" cannot
// start a forged line of its own, and "\r" or ESC cannot rewrite one on a terminal.
// Escaped: ASCII controls and DEL ("\n", "\r", "\t", else "\xHH"), the backslash
// itself ("\\", so an escape in the log always means one), and the Unicode line
// breaks some log viewers honour (U+0085, U+2028, U+2029 as "\u0085" ...). Other
// bytes, UTF-8 or not, are kept as they are. The JSON log format escapes its own way
// (base/json_string.h) on top of this.
//
// A row's or a message's value is also bounded in a log line (LogExcerpt): a 6.4 kB
// aggregate id once filled every dead-letter line with it.
//
//   spdlog::error("event {} of aggregate {}", LogExcerpt(id), LogExcerpt(aggregate_id));
//   std::string line = EscapeForLog("a\nFORGED");   // a\nFORGED, on one line
#ifndef OUTBOXD_BASE_LOG_ESCAPE_H_
#define OUTBOXD_BASE_LOG_ESCAPE_H_

#include <string>
#include <string_view>

#include "spdlog/fmt/fmt.h"

namespace outboxd {

inline void AppendEscapedForLog(std::string& out, std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  for (size_t i = 0; i < text.size(); ++i) {
    const auto u = static_cast<unsigned char>(text[i]);
    const auto next = [&](size_t k) {
      return i + k < text.size() ? static_cast<unsigned char>(text[i + k]) : 0;
    };
    if (u == '\\') {
      out.append("\\\\");
    } else if (u == '\n') {
      out.append("\\n");
    } else if (u == '\r') {
      out.append("\\r");
    } else if (u == '\t') {
      out.append("\\t");
    } else if (u < 0x20 || u == 0x7f) {
      out.append("\\x");
      out.push_back(kHex[u >> 4]);
      out.push_back(kHex[u & 0xf]);
    } else if (u == 0xC2 && next(1) == 0x85) {  // U+0085 NEXT LINE
      out.append("\\u0085");
      i += 1;
    } else if (u == 0xE2 && next(1) == 0x80 && (next(2) == 0xA8 || next(2) == 0xA9)) {
      out.append(next(2) == 0xA8 ? "\\u2028" : "\\u2029");  // LINE / PARAGRAPH SEPARATOR
      i += 2;
    } else {
      out.push_back(static_cast<char>(u));
    }
  }
}

inline std::string EscapeForLog(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  AppendEscapedForLog(out, text);
  return out;
}

// How much of a row's or a message's value a log line quotes: enough to tell values
// apart and find the row; the whole value stays in the table (and, for a dead letter,
// in `dead-letter list --json`).
inline constexpr size_t kLogValueLimit = 200;

// EscapeForLog of the value's first `limit` bytes (cut back to the start of the
// character it would split), then "… (6424 bytes)" when it was longer.
//   ExcerptForLog(std::string(6424, 'a'))   // 200 a's, then "… (6424 bytes)"
inline std::string ExcerptForLog(std::string_view text, size_t limit = kLogValueLimit) {
  if (text.size() <= limit) return EscapeForLog(text);
  size_t cut = limit;
  for (int back = 0; back < 3 && cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80;
       ++back) {
    --cut;  // a UTF-8 continuation byte: the character starts before it
  }
  std::string out = EscapeForLog(text.substr(0, cut));
  out.append("\u2026 (").append(std::to_string(text.size())).append(" bytes)");
  return out;
}

// A value to be escaped when formatted: spdlog::info("{}", LogSafe(value)). With a
// `limit`, cut as ExcerptForLog cuts (see LogExcerpt).
struct LogSafe {
  static constexpr size_t kWhole = std::string_view::npos;
  explicit LogSafe(std::string_view v, size_t limit = kWhole) : text(v), limit(limit) {}
  template <typename StringLike>
  explicit LogSafe(const StringLike& v, size_t limit = kWhole)
      : text(v.data(), v.size()), limit(limit) {}
  std::string_view text;
  size_t limit;
};

// A row's or a message's value, escaped and bounded when formatted (ExcerptForLog):
// spdlog::error("aggregate {}", LogExcerpt(aggregate_id)).
template <typename StringLike>
LogSafe LogExcerpt(const StringLike& v) {
  return LogSafe(v, kLogValueLimit);
}

}  // namespace outboxd

template <>
struct fmt::formatter<outboxd::LogSafe> : fmt::formatter<std::string_view> {
  template <typename Context>
  auto format(const outboxd::LogSafe& value, Context& ctx) const {
    const std::string escaped = outboxd::ExcerptForLog(value.text, value.limit);
    return fmt::formatter<std::string_view>::format(std::string_view(escaped), ctx);
  }
};

#endif  // OUTBOXD_BASE_LOG_ESCAPE_H_
