// What the dead-letter table stores of a poison event (outbox/stored_letter.h): text
// PostgreSQL takes whatever the event held, keys an index takes, and every original
// byte back for a replay. The table itself: dead_letter_store_test.cc.
#include "outbox/stored_letter.h"

#include <string>

#include "gtest/gtest.h"

namespace outboxd::outbox {
namespace {

DeadLetter Letter(std::string aggregate) {
  return {.id = "e3a1c9c2-0000-4000-8000-000000000001",
          .aggregate_id = std::move(aggregate),
          .type = "pedido.confirmado",
          .payload = R"({"n":1})",
          .created_at = "2026-12-03T15:40:00+00:00",
          .lsn = "0/16B3748",
          .topic = "pedido.confirmado",
          .error = "test"};
}

TEST(StoredLetter, StorableFieldsAreStoredAsTheyAreWithoutOriginalBytes) {
  const DeadLetter letter = Letter("pedido-77 \xc3\xa9");  // é: UTF-8 is text
  const StoredLetter row = ToStored(letter);
  EXPECT_EQ(row.text.aggregate_id, letter.aggregate_id);
  EXPECT_EQ(row.text.payload, letter.payload);
  EXPECT_FALSE(row.original.has_value());
}

TEST(StoredLetter, TextPostgresqlRefusesIsRecognised) {
  EXPECT_TRUE(IsStorableText("a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"));
  for (const char* bad : {"\xff", "a\xc3", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80",
                          "\xe0\x80\xaf", "\xf0\x80\x80\xaf"}) {
    EXPECT_FALSE(IsStorableText(bad)) << bad;
  }
  EXPECT_FALSE(IsStorableText(std::string("a\0b", 3)));
}

TEST(StoredLetter, InvalidUtf8GetsAStandInAndComesBackByteForByte) {
  DeadLetter letter = Letter("pedido-\xff\xfe");
  letter.payload = std::string("{\"a\":\"\0\xff\"}", 10);
  const StoredLetter row = ToStored(letter);
  EXPECT_TRUE(IsStorableText(row.text.aggregate_id));
  EXPECT_EQ(row.text.aggregate_id.substr(0, 15), "pedido-\\xff\\xfe");
  EXPECT_NE(row.text.aggregate_id.find("~sha256:"), std::string::npos);
  EXPECT_TRUE(IsStorableText(row.text.payload));
  ASSERT_TRUE(row.original.has_value());
  const DeadLetter back = FromStored(row);
  EXPECT_EQ(back.aggregate_id, letter.aggregate_id);
  EXPECT_EQ(back.payload, letter.payload);
  EXPECT_EQ(back.id, letter.id);
  EXPECT_FALSE(back.original_lost);
}

TEST(StoredLetter, ALongKeyIsCutAndHashedToFitAnIndex) {
  std::string huge;
  for (int i = 0; i < 400; ++i) huge += "0123456789abcdef";  // 6.4 kB
  const StoredLetter row = ToStored(Letter(huge));
  EXPECT_LE(row.text.aggregate_id.size(), kMaxStoredKeyBytes);
  EXPECT_EQ(row.text.aggregate_id, StoredKey(huge));
  EXPECT_EQ(FromStored(row).aggregate_id, huge);
  // A key one byte longer is another key.
  EXPECT_NE(StoredKey(huge + "0"), StoredKey(huge));
  EXPECT_EQ(StoredKey(std::string(kMaxStoredKeyBytes, 'a')), std::string(kMaxStoredKeyBytes, 'a'));
}

TEST(StoredLetter, AKeyThatLooksLikeAStandInIsNotTakenForOne) {
  // A plain key holding the marker could otherwise equal another key's stand-in.
  const std::string other = StoredKey("\xff");
  EXPECT_NE(StoredKey(other), other);
  const StoredLetter row = ToStored(Letter(other));
  EXPECT_EQ(FromStored(row).aggregate_id, other);
}

TEST(StoredLetter, TextThatLooksLikeAStandInComesBackAsItWas) {
  // Found by scripts/fuzz: a payload ending as a stand-in does, every other field
  // plain, was stored as it was with no original bytes and read back as lost.
  DeadLetter letter = Letter("a");
  letter.payload = StoredKey("\xff");
  ASSERT_TRUE(IsStorableText(letter.payload));
  const StoredLetter row = ToStored(letter);
  ASSERT_TRUE(row.original.has_value());
  const DeadLetter back = FromStored(row);
  EXPECT_FALSE(back.original_lost);
  EXPECT_EQ(back.payload, letter.payload);
}

TEST(StoredLetter, AnErrorAlreadyStoredIsStoredAgainAsItIs) {
  // The error is ours and has no original bytes: a stand-in read back and stored
  // again (dead-letter list, replay) must not grow a second stand-in.
  DeadLetter letter = Letter("a");
  letter.error = "refused\r\n\xfe fake line";
  const StoredLetter row = ToStored(letter);
  EXPECT_EQ(ToStored(FromStored(row)).text.error, row.text.error);
}

TEST(StoredLetter, AFieldAPersonFixedWinsOverTheOriginal) {
  DeadLetter letter = Letter("a\xff");
  letter.payload = "{\"n\": \xff}";
  StoredLetter row = ToStored(letter);
  row.text.payload = R"({"n": 1})";  // UPDATE ... SET payload = ...
  const DeadLetter back = FromStored(row);
  EXPECT_EQ(back.payload, R"({"n": 1})");
  EXPECT_EQ(back.aggregate_id, "a\xff");
}

TEST(StoredLetter, HeadersThatTextCannotHoldComeBackByteForByte) {
  DeadLetter letter = Letter("pedido-77");
  letter.headers = std::string("{\"traceparent\":\"\xff\"}", 18);
  const StoredLetter row = ToStored(letter);
  EXPECT_TRUE(IsStorableText(row.text.headers));
  EXPECT_NE(row.text.headers.find("~sha256:"), std::string::npos);
  ASSERT_TRUE(row.original.has_value());
  const DeadLetter back = FromStored(row);
  EXPECT_EQ(back.headers, letter.headers);
  EXPECT_FALSE(back.original_lost);
}

// An `original` written before the headers field (six fields) still gives its bytes
// back, and a letter of that time has no headers to lose.
TEST(StoredLetter, OriginalBytesWrittenBeforeTheHeadersFieldStillRead) {
  const DeadLetter letter = Letter("pedido-\xff");
  StoredLetter row = ToStored(letter);
  ASSERT_TRUE(row.original.has_value());
  ASSERT_GE(row.original->size(), 4u);
  ASSERT_EQ(row.original->substr(row.original->size() - 4), std::string(4, '\0'));
  row.original->resize(row.original->size() - 4);  // the empty headers field's length
  const DeadLetter back = FromStored(row);
  EXPECT_EQ(back.aggregate_id, letter.aggregate_id);
  EXPECT_EQ(back.headers, "");
  EXPECT_FALSE(back.original_lost);
}

TEST(StoredLetter, AStandInWithoutOriginalBytesIsMarkedLost) {
  StoredLetter row = ToStored(Letter("a\xff"));
  row.original.reset();  // a table from before the column
  EXPECT_TRUE(FromStored(row).original_lost);
  row.original = "garbage";
  EXPECT_TRUE(FromStored(row).original_lost);
}

}  // namespace
}  // namespace outboxd::outbox
