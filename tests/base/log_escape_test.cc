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

}  // namespace
}  // namespace outboxd
