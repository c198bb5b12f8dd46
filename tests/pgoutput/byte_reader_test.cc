// ByteReader: big-endian reads, strings, and the bounds check on every read.
#include "pgoutput/internal/byte_reader.h"

#include <cstdint>
#include <string>
#include <string_view>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace outboxd::pgoutput::internal {
namespace {

using ::testing::HasSubstr;

using namespace std::string_view_literals;

TEST(PgoutputByteReader, ReadsBigEndianIntegers) {
  const std::string_view bytes =
      "\x01"
      "\x02\x03"
      "\x04\x05\x06\x07"
      "\xff\xff\xff\xfe"
      "\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f"
      "\xff\xff\xff\xff\xff\xff\xff\xfd"sv;
  ByteReader reader(bytes);
  EXPECT_EQ(*reader.ReadU8("u8"), 0x01);
  EXPECT_EQ(*reader.ReadU16("u16"), 0x0203);
  EXPECT_EQ(*reader.ReadU32("u32"), 0x04050607u);
  EXPECT_EQ(*reader.ReadI32("i32"), -2);
  EXPECT_EQ(*reader.ReadU64("u64"), 0x08090a0b0c0d0e0fu);
  EXPECT_EQ(*reader.ReadI64("i64"), -3);
  EXPECT_TRUE(reader.empty());
  EXPECT_TRUE(reader.ExpectEnd("test").ok());
}

TEST(PgoutputByteReader, ReadsCStringsAndSkipsTheirNul) {
  ByteReader reader("public\0\0outbox\0!"sv);
  EXPECT_EQ(*reader.ReadCString("a"), "public");
  EXPECT_EQ(*reader.ReadCString("b"), "");
  EXPECT_EQ(*reader.ReadCString("c"), "outbox");
  EXPECT_EQ(reader.remaining(), 1u);
  std::string_view view;
  EXPECT_TRUE(reader.ReadBytes(1, "d", view).ok());
  EXPECT_EQ(view, "!");
  EXPECT_EQ(*reader.ReadBytes(0, "e"), "");
}

// Each read given one byte fewer than it needs: error naming the field, position kept.
TEST(PgoutputByteReader, EveryReadChecksTheRemainingLength) {
  struct Case {
    std::string_view name;
    std::string_view input;
    absl::Status (*read)(ByteReader&);
    std::string_view error;
  };
  const Case cases[] = {
      {"U8 on empty", "", [](ByteReader& r) { return r.ReadU8("flags").status(); },
       "truncated flags: need 1 bytes, 0 left"},
      {"U16 on 1 byte", "\x01", [](ByteReader& r) { return r.ReadU16("count").status(); },
       "truncated count: need 2 bytes, 1 left"},
      {"U32 on 3 bytes", "\x01\x02\x03", [](ByteReader& r) { return r.ReadU32("oid").status(); },
       "truncated oid: need 4 bytes, 3 left"},
      {"I32 on 3 bytes", "\x01\x02\x03", [](ByteReader& r) { return r.ReadI32("len").status(); },
       "truncated len: need 4 bytes, 3 left"},
      {"U64 on 7 bytes", "\x01\x02\x03\x04\x05\x06\x07",
       [](ByteReader& r) { return r.ReadU64("lsn").status(); },
       "truncated lsn: need 8 bytes, 7 left"},
      {"I64 on 7 bytes", "\x01\x02\x03\x04\x05\x06\x07",
       [](ByteReader& r) { return r.ReadI64("ts").status(); },
       "truncated ts: need 8 bytes, 7 left"},
      {"CString without NUL", "abc", [](ByteReader& r) { return r.ReadCString("name").status(); },
       "unterminated string name: no NUL in the last 3 bytes"},
      {"CString on empty", "", [](ByteReader& r) { return r.ReadCString("name").status(); },
       "unterminated string name"},
      {"Bytes longer than input", "abc",
       [](ByteReader& r) { return r.ReadBytes(4, "value").status(); },
       "truncated value: need 4 bytes, 3 left"},
      {"Bytes of a huge length", "abc",
       [](ByteReader& r) { return r.ReadBytes(SIZE_MAX, "value").status(); }, "truncated value"},
      {"Bytes into a view, longer than input", "abc",
       [](ByteReader& r) {
         std::string_view out;
         return r.ReadBytes(4, "value", out);
       },
       "truncated value: need 4 bytes, 3 left"},
      {"ExpectEnd with bytes left", "ab", [](ByteReader& r) { return r.ExpectEnd("Begin"); },
       "2 trailing bytes after the end of the Begin message"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    // A heap copy of exactly the input, so AddressSanitizer would see an overread.
    const std::string input(c.input);
    ByteReader reader(input);
    const absl::Status status = c.read(reader);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(status.message()), HasSubstr(c.error));
    EXPECT_EQ(reader.remaining(), input.size());
  }
}

TEST(PgoutputByteReader, HandlesADefaultConstructedView) {
  ByteReader reader{std::string_view()};
  EXPECT_TRUE(reader.empty());
  EXPECT_FALSE(reader.ReadCString("s").ok());
  EXPECT_FALSE(reader.ReadU8("b").ok());
  EXPECT_EQ(*reader.ReadBytes(0, "nothing"), "");
  EXPECT_TRUE(reader.ExpectEnd("empty").ok());
}

}  // namespace
}  // namespace outboxd::pgoutput::internal
