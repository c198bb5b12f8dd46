// Values from a table made safe for a terminal: `outboxd dead-letter list` prints
// what any writer of the outbox put in a row, and a terminal acts on what it is sent
// (ESC sequences set its title or clear the screen, a newline starts a line that
// looks like another letter, C1 controls such as U+009B are CSI to some terminals).
// The text form escapes as the logs do (base/log_escape.h) and further: C1 controls
// as "\u0080".."\u009f", and every byte that is not part of valid UTF-8 as "\xHH", so
// what is printed is plain printable text on one line. The JSON form keeps the value
// exact for a program (a JSON parser gives back the same text) while no character a
// terminal acts on is sent raw: DEL, C1 controls and the Unicode line breaks become
// \u escapes too.
//
//   std::printf("%s\n", EscapeForTerminal("a\x1b]0;pwned\x07").c_str());  // a\x1b]0;pwned\x07
//   std::string line = "{\"error\":";
//   AppendJsonForTerminal(line, error);
#ifndef OUTBOXD_BASE_TERMINAL_ESCAPE_H_
#define OUTBOXD_BASE_TERMINAL_ESCAPE_H_

#include <cstddef>
#include <string>
#include <string_view>

namespace outboxd {

// The length of the valid UTF-8 sequence at text[i] (no overlong form, surrogate or
// code point above U+10FFFF), or 0 when the byte there starts none.
size_t Utf8SequenceLength(std::string_view text, size_t i);

// `text` as printable text for a terminal line (see above).
void AppendEscapedForTerminal(std::string& out, std::string_view text);
std::string EscapeForTerminal(std::string_view text);

// `text` as a quoted JSON string (RFC 8259) with every terminal control escaped;
// bytes that are not UTF-8 become U+FFFD (JSON holds text only).
void AppendJsonForTerminal(std::string& out, std::string_view text);

}  // namespace outboxd

#endif  // OUTBOXD_BASE_TERMINAL_ESCAPE_H_
