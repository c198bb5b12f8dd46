// pg::TableName::Parse, the one parser of --table for every command, and the
// identifier checks (pg/identifier.h) it and the other name flags go through. Issue
// 13: run split "my.sch.outbox" at the first dot and setup at the last; a long or
// non-UTF-8 name reached the server.
#include "pg/table_name.h"

#include <gtest/gtest.h>

#include <string>

#include "outbox/names.h"
#include "pg/identifier.h"

namespace outboxd::pg {
namespace {

TableName Parsed(std::string_view text) {
  absl::StatusOr<TableName> table = TableName::Parse(text);
  EXPECT_TRUE(table.ok()) << text << ": " << table.status();
  return table.value_or(TableName{});
}

std::string ParseError(std::string_view text) {
  absl::StatusOr<TableName> table = TableName::Parse(text);
  EXPECT_EQ(table.status().code(), absl::StatusCode::kInvalidArgument) << text;
  return std::string(table.status().message());
}

// `text` parses into these parts.
void ExpectParts(const std::string& text, const std::string& schema, const std::string& name,
                 const std::string& quoted) {
  TableName table = Parsed(text);
  EXPECT_EQ(table.schema, schema) << text;
  EXPECT_EQ(table.name, name) << text;
  EXPECT_EQ(table.quoted, quoted) << text;
}

TEST(TableNameParse, BareNamesAreTakenAsWritten) {
  ExpectParts("outbox", "", "outbox", "\"outbox\"");
  ExpectParts("app.outbox", "app", "outbox", "\"app\".\"outbox\"");
  // No case folding: outboxd has always taken --table Outbox as the table "Outbox".
  EXPECT_EQ(Parsed("Vendas.Outbox").quoted, "\"Vendas\".\"Outbox\"");
  EXPECT_EQ(Parsed("my outbox").name, "my outbox");
  EXPECT_EQ(Parsed("caf\xc3\xa9").name, "caf\xc3\xa9");
}

TEST(TableNameParse, QuotedPartsMayHoldDotsAndQuotes) {
  ExpectParts("\"my.sch\".outbox", "my.sch", "outbox", "\"my.sch\".\"outbox\"");
  EXPECT_EQ(Parsed("\"my.sch\".outbox").Display(), "\"my.sch\".outbox");
  ExpectParts("\"We\"\"ird\"", "", "We\"ird", "\"We\"\"ird\"");
  ExpectParts("\"a.b\".\"c.d\"", "a.b", "c.d", "\"a.b\".\"c.d\"");
  EXPECT_EQ(Parsed("app.\"Out.box\"").name, "Out.box");
}

TEST(TableNameParse, RefusesWhatItWouldHaveToGuess) {
  // Three parts: setup used to read schema "my.sch", run schema "my".
  const std::string three = ParseError("my.sch.outbox");
  EXPECT_NE(three.find("3 dot-separated parts"), std::string::npos) << three;
  EXPECT_NE(three.find("'\"my.sch\".outbox'"), std::string::npos) << three;
  ParseError("\"unclosed");
  ParseError("\"a\"b");
  ParseError("a\"b");
  ParseError("app.");
  ParseError(".outbox");
  ParseError("\"\".outbox");
  EXPECT_EQ(ParseError(""), "--table is empty; give it a name");
}

TEST(TableNameParse, EachPartIsAValidIdentifier) {
  EXPECT_TRUE(TableName::Parse(std::string(63, 'a')).ok());
  const std::string long_name = ParseError(std::string(64, 'a'));
  EXPECT_NE(long_name.find("64 bytes long"), std::string::npos) << long_name;
  ParseError("app." + std::string(64, 'b'));
  ParseError(std::string(64, 's') + ".outbox");
  const std::string bad = ParseError("out\xff\xfe");
  EXPECT_NE(bad.find("\"out\\xff\\xfe\" is not valid UTF-8"), std::string::npos) << bad;
  ParseError(std::string("out\0box", 7));
}

TEST(TableNameSibling, StaysInTheSchema) {
  TableName letters = Parsed("\"my.sch\".outbox").Sibling("outbox_dead_letter");
  EXPECT_EQ(letters.quoted, "\"my.sch\".\"outbox_dead_letter\"");
  EXPECT_EQ(TableName::SiblingOf("\"my.sch\".outbox", "_relay_state").quoted,
            "\"my.sch\".\"outbox_relay_state\"");
  EXPECT_EQ(TableName::SiblingOf("app.outbox", "_relay_state").schema, "app");
  // An outbox name that does not parse is kept whole: quoted safely, found missing.
  EXPECT_EQ(TableName::SiblingOf("a.b.c", "_relay_state").quoted, "\"a.b.c_relay_state\"");
}

TEST(CheckIdentifier, NamesTheFlagAndTheLimit) {
  EXPECT_TRUE(CheckIdentifier("outboxd_outbox", "--notify-channel").ok());
  absl::Status too_long = CheckIdentifier(std::string(70, 'c'), "--notify-channel");
  EXPECT_EQ(too_long.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(too_long.message().find("--notify-channel \"ccc"), std::string::npos) << too_long;
  EXPECT_NE(too_long.message().find("70 bytes long; PostgreSQL names are at most 63 bytes"),
            std::string::npos)
      << too_long;
  absl::Status binary = CheckIdentifier("\xff\xfe", "--notify-channel");
  EXPECT_EQ(binary.message(),
            "--notify-channel \"\\xff\\xfe\" is not valid UTF-8 text; give a name in UTF-8 "
            "without control bytes");
  EXPECT_FALSE(CheckIdentifier("", "--publication").ok());
  // 63 bytes of two-byte characters plus one: the limit is in bytes, as PostgreSQL's.
  std::string accents;
  for (int i = 0; i < 32; ++i) accents += "\xc3\xa9";
  EXPECT_FALSE(CheckIdentifier(accents, "--table").ok());
}

TEST(CheckSlotName, FollowsPostgresqlsRule) {
  EXPECT_TRUE(CheckSlotName("outboxd_2", "--slot").ok());
  for (const char* bad : {"a\"b", "Outboxd", "out-boxd", "out box", ""}) {
    EXPECT_EQ(CheckSlotName(bad, "--slot").code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_NE(CheckSlotName("a\"b", "--slot").message().find("lower-case letters, digits and"),
            absl::string_view::npos);
  EXPECT_FALSE(CheckSlotName(std::string(64, 's'), "--slot").ok());
}

TEST(ParseOutboxTable, LeavesRoomForTheTablesBesideIt) {
  EXPECT_TRUE(outbox::ParseOutboxTable(std::string(51, 'o')).ok());
  absl::StatusOr<TableName> long_name = outbox::ParseOutboxTable("app." + std::string(52, 'o'));
  EXPECT_EQ(long_name.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(long_name.status().message().find("at most 51 bytes"), std::string::npos)
      << long_name.status();
}

}  // namespace
}  // namespace outboxd::pg
