// EscapeForTerminal / AppendJsonForTerminal (issue 27 point 9): a dead letter's fields,
// printed by `outboxd dead-letter list`, cannot drive the terminal (title, screen,
// forged lines), and the JSON form gives a parser back the exact text.
#include "base/terminal_escape.h"

#include <string>

#include "gtest/gtest.h"

namespace outboxd {
namespace {

TEST(TerminalEscape, EscapesWhatTheLogsEscapeAndC1ControlsAndBytesThatAreNotUtf8) {
  EXPECT_EQ(EscapeForTerminal("a\nFORGED\x1b]0;title\x07\x1b[2J"),
            "a\\nFORGED\\x1b]0;title\\x07\\x1b[2J");
  EXPECT_EQ(EscapeForTerminal("csi\xc2\x9b"
                              "2J nel\xc2\x85 ls\xe2\x80\xa8"),
            "csi\\u009b2J nel\\u0085 ls\\u2028");
  EXPECT_EQ(EscapeForTerminal("\xff\xfe \x9b \xe2\x80"), "\\xff\\xfe \\x9b \\xe2\\x80");
  EXPECT_EQ(EscapeForTerminal(
                "\xc0\x8a \xed\xa0\x80 \xf4\x90\x80\x80"),  // overlong, surrogate, >U+10FFFF
            "\\xc0\\x8a \\xed\\xa0\\x80 \\xf4\\x90\\x80\\x80");
  EXPECT_EQ(EscapeForTerminal("Jo\xc3\xa3o \xe2\x82\xac \xf0\x9f\x93\xa6 back\\slash"),
            "Jo\xc3\xa3o \xe2\x82\xac \xf0\x9f\x93\xa6 back\\\\slash");
}

TEST(TerminalEscape, JsonEscapesEveryTerminalControlAndReplacesBytesThatAreNotUtf8) {
  std::string out;
  AppendJsonForTerminal(out, "{\"k\": \"a\\nb\"}\n\x1b[2J\x7f\xc2\x9b\xe2\x80\xa9 \xc3\xa3");
  EXPECT_EQ(out, "\"{\\\"k\\\": \\\"a\\\\nb\\\"}\\n\\u001b[2J\\u007f\\u009b\\u2029 \xc3\xa3\"");
  out.clear();
  AppendJsonForTerminal(out,
                        "\xff"
                        "a\xe2\x80");
  EXPECT_EQ(out, "\"\\ufffda\\ufffd\\ufffd\"");
}

}  // namespace
}  // namespace outboxd
