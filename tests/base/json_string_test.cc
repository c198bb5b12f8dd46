// base/json_string.h, shared by the envelope format and the JSON log lines.
#include "base/json_string.h"

#include <string>

#include "gtest/gtest.h"

namespace outboxd {
namespace {

std::string Json(std::string_view text, InvalidUtf8 invalid = InvalidUtf8::kKeep) {
  std::string out;
  AppendJsonString(out, text, invalid);
  return out;
}

TEST(JsonString, EscapesQuotesBackslashesAndControlCharacters) {
  EXPECT_EQ(Json("a\"b\\c\n\r\t\b\f\x01\x1f"), R"("a\"b\\c\n\r\t\b\f\u0001\u001f")");
}

TEST(JsonString, KeepsUtf8AsIs) { EXPECT_EQ(Json("ação ✓ 😀"), "\"ação ✓ 😀\""); }

TEST(JsonString, ReplacesBytesThatAreNotUtf8OnlyWhenAsked) {
  const std::string bad = "ok \xff \xc3( \xe2\x82";  // stray, broken 2-byte, truncated 3-byte
  EXPECT_EQ(Json(bad), "\"" + bad + "\"");
  EXPECT_EQ(Json(bad, InvalidUtf8::kReplace), R"("ok \ufffd \ufffd( \ufffd\ufffd")");
  EXPECT_EQ(Json("ação", InvalidUtf8::kReplace), "\"ação\"");
}

// Runs of plain bytes are copied whole: escapes at either end of a run, between two
// runs, alone, and the empty string come out as a byte at a time would make them.
TEST(JsonString, EscapesAtTheEdgesOfPlainRunsAndEveryByteAlone) {
  EXPECT_EQ(Json(""), R"("")");
  EXPECT_EQ(Json("\"ab\"\n\"cd\""), R"("\"ab\"\n\"cd\"")");
  EXPECT_EQ(Json("\x7f"), "\"\x7f\"");  // DEL is no control character to JSON
  for (int b = 0; b < 256; ++b) {
    const std::string byte(1, static_cast<char>(b));
    const std::string kept = Json(byte);
    if (b == '"' || b == '\\' || b < 0x20) {
      EXPECT_EQ(kept[1], '\\') << b;
    } else {
      EXPECT_EQ(kept, "\"" + byte + "\"") << b;
    }
    if (b >= 0x80) EXPECT_EQ(Json(byte, InvalidUtf8::kReplace), R"("\ufffd")") << b;
  }
}

}  // namespace
}  // namespace outboxd
