// LSN text form, as pg_lsn prints it.
#include "pg/lsn.h"

#include <gtest/gtest.h>

#include <string>

namespace outboxd::pg {
namespace {

TEST(FormatLsn, WritesHighAndLowWordsInUpperCaseHex) {
  EXPECT_EQ(FormatLsn(0x16B374D848), "16/B374D848");
  EXPECT_EQ(FormatLsn(0), "0/0");
  EXPECT_EQ(FormatLsn(0x100000000), "1/0");
  EXPECT_EQ(FormatLsn(~Lsn{0}), "FFFFFFFF/FFFFFFFF");
}

TEST(ParseLsn, ReadsWhatFormatLsnWrites) {
  for (Lsn lsn : {Lsn{0}, Lsn{1}, Lsn{0x16B374D848}, Lsn{0xFFFFFFFF}, Lsn{0x100000000}, ~Lsn{0}}) {
    absl::StatusOr<Lsn> parsed = ParseLsn(FormatLsn(lsn));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, lsn);
  }
}

TEST(ParseLsn, AcceptsLowerCaseAndLeadingZeros) {
  EXPECT_EQ(ParseLsn("16/b374d848").value(), 0x16B374D848u);
  EXPECT_EQ(ParseLsn("00000016/0000000A").value(), 0x160000000Au);
}

TEST(ParseLsn, RejectsMalformedText) {
  for (std::string bad : {"", "/", "1", "1/", "/1", "G/1", "1/2/3", "123456789/0", "0/123456789",
                          "-1/0", "+1/0", "0x1/0", " 1/0", "1/0 ", "1 /0"}) {
    absl::StatusOr<Lsn> parsed = ParseLsn(bad);
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << "input: " << bad;
  }
  EXPECT_EQ(ParseLsn("zz").status().message(),
            "invalid LSN \"zz\": expected two hex numbers like 16/B374D848");
}

}  // namespace
}  // namespace outboxd::pg
