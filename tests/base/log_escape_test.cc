// EscapeForLog / LogSafe (issue 13, point 6): a value from a row cannot start a log
// line of its own or rewrite one on a terminal.
#include "base/log_escape.h"

#include <string>

#include "absl/strings/string_view.h"
#include "gtest/gtest.h"

namespace outboxd {
namespace {

TEST(LogEscape, ControlCharactersAndLineBreaksBecomeEscapes) {
  EXPECT_EQ(EscapeForLog("a\nFORGED line"), "a\\nFORGED line");
  EXPECT_EQ(EscapeForLog("cr\rtab\tesc\x1b[2Kdel\x7f"), "cr\\rtab\\tesc\\x1b[2Kdel\\x7f");
  EXPECT_EQ(EscapeForLog(std::string("nul\0end", 7)), "nul\\x00end");
  EXPECT_EQ(EscapeForLog("back\\slash"), "back\\\\slash");  // an escape always means one
  EXPECT_EQ(EscapeForLog("nel\xc2\x85ls\xe2\x80\xa8ps\xe2\x80\xa9"),
            "nel\\u0085ls\\u2028ps\\u2029");
}

TEST(LogEscape, OrdinaryTextAndOtherBytesAreKept) {
  EXPECT_EQ(EscapeForLog("pedido-42 {\"n\": 1}"), "pedido-42 {\"n\": 1}");
  EXPECT_EQ(EscapeForLog("Jo\xc3\xa3o \xe2\x82\xac"), "Jo\xc3\xa3o \xe2\x82\xac");
  EXPECT_EQ(EscapeForLog("\xff\xfe"), "\xff\xfe");  // not UTF-8: left to the JSON format
  EXPECT_EQ(EscapeForLog("\xe2\x80"), "\xe2\x80");  // a truncated sequence at the end
  EXPECT_EQ(EscapeForLog(""), "");
}

TEST(LogEscape, LogSafeFormatsEscapedWithAnyStringType) {
  const std::string owned = "x\ny";
  EXPECT_EQ(fmt::format("[{}] [{}] [{}]", LogSafe(owned), LogSafe(std::string_view("a\tb")),
                        LogSafe(absl::string_view("c\rd"))),
            "[x\\ny] [a\\tb] [c\\rd]");
}

// Issue 27 point 3: a 6.4 kB aggregate id was quoted whole in every dead-letter line.
TEST(LogExcerpt, QuotesTheFirst200BytesAndTheLength) {
  const std::string huge = std::string(6400, 'a') + "\n" + std::string(23, 'b');
  EXPECT_EQ(ExcerptForLog(huge), std::string(200, 'a') + "\u2026 (6424 bytes)");
  EXPECT_EQ(ExcerptForLog(std::string(200, 'c')), std::string(200, 'c'));  // at the limit: whole
  EXPECT_EQ(ExcerptForLog("short\nline"), "short\\nline");                 // escaped as ever
  // Escaped after the cut, so an escape is never cut in half.
  EXPECT_EQ(ExcerptForLog(std::string(199, 'd') + "\x1b[2J" + std::string(100, 'e')),
            std::string(199, 'd') + "\\x1b\u2026 (303 bytes)");
}

TEST(LogExcerpt, NeverSplitsAUtf8Character) {
  // "\xe2\x82\xac" (the euro sign) across the 200-byte cut: it goes whole, or not at all.
  const std::string euros = std::string(199, 'x') + "\xe2\x82\xac" + std::string(10, 'y');
  EXPECT_EQ(ExcerptForLog(euros), std::string(199, 'x') + "\u2026 (212 bytes)");
  // U+2028 across the cut is not left half-escaped either.
  const std::string separator = std::string(198, 'x') + "\xe2\x80\xa8" + "z";
  EXPECT_EQ(ExcerptForLog(separator), std::string(198, 'x') + "\u2026 (202 bytes)");
  EXPECT_EQ(fmt::format("aggregate {}", LogExcerpt(std::string(300, 'p') + "\n")),
            "aggregate " + std::string(200, 'p') + "\u2026 (301 bytes)");
  EXPECT_EQ(fmt::format("[{}]", LogExcerpt(std::string_view("a\tb"))), "[a\\tb]");
}

}  // namespace
}  // namespace outboxd
