#include "base/terminal_escape.h"

#include "base/log_escape.h"

namespace outboxd {
namespace {

constexpr char kHex[] = "0123456789abcdef";

void AppendHexByte(std::string& out, const char* prefix, unsigned char byte) {
  out.append(prefix);
  out.push_back(kHex[byte >> 4]);
  out.push_back(kHex[byte & 0xf]);
}

void AppendU16(std::string& out, unsigned code) {
  out.append("\\u");
  for (int shift = 12; shift >= 0; shift -= 4) out.push_back(kHex[(code >> shift) & 0xf]);
}

// The code point of the valid sequence of `n` bytes at text[i].
unsigned CodePoint(std::string_view text, size_t i, size_t n) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(text[i + k]); };
  if (n == 1) return b(0);
  unsigned code = b(0) & (0x7f >> n);
  for (size_t k = 1; k < n; ++k) code = (code << 6) | (b(k) & 0x3f);
  return code;
}

bool IsTerminalControl(unsigned code) {
  return code < 0x20 || code == 0x7f || (code >= 0x80 && code <= 0x9f) || code == 0x2028 ||
         code == 0x2029;
}

}  // namespace

size_t Utf8SequenceLength(std::string_view text, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(text[i + k]); };
  const unsigned char c = b(0);
  if (c < 0x80) return 1;
  const size_t n = c >= 0xC2 && c <= 0xDF   ? 2
                   : c >= 0xE0 && c <= 0xEF ? 3
                   : c >= 0xF0 && c <= 0xF4 ? 4
                                            : 0;
  if (n == 0 || i + n > text.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(k) & 0xC0) != 0x80) return 0;
  }
  // The second byte's range rules out overlong forms, surrogates and > U+10FFFF.
  if ((c == 0xE0 && b(1) < 0xA0) || (c == 0xED && b(1) > 0x9F) || (c == 0xF0 && b(1) < 0x90) ||
      (c == 0xF4 && b(1) > 0x8F)) {
    return 0;
  }
  return n;
}

void AppendEscapedForTerminal(std::string& out, std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const size_t n = Utf8SequenceLength(text, i);
    if (n == 0) {
      AppendHexByte(out, "\\x", static_cast<unsigned char>(text[i]));
      ++i;
      continue;
    }
    const unsigned code = CodePoint(text, i, n);
    if (code >= 0x80 && code <= 0x9f) {
      AppendU16(out, code);
    } else {
      AppendEscapedForLog(out, text.substr(i, n));
    }
    i += n;
  }
}

std::string EscapeForTerminal(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  AppendEscapedForTerminal(out, text);
  return out;
}

void AppendJsonForTerminal(std::string& out, std::string_view text) {
  out.push_back('"');
  for (size_t i = 0; i < text.size();) {
    const size_t n = Utf8SequenceLength(text, i);
    const unsigned code = n == 0 ? 0xfffd : CodePoint(text, i, n);
    i += n == 0 ? 1 : n;
    if (code == '"' || code == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(code));
    } else if (code == '\n' || code == '\r' || code == '\t') {
      out.append(code == '\n' ? "\\n" : code == '\r' ? "\\r" : "\\t");
    } else if (IsTerminalControl(code) || code == 0xfffd) {
      AppendU16(out, code);
    } else {
      out.append(text.substr(i - n, n));
    }
  }
  out.push_back('"');
}

}  // namespace outboxd
