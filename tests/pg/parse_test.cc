// Pure helpers of src/pg that need no server: conninfo redaction and the
// bounds-checked parser of walsender CopyData messages.
#include <gtest/gtest.h>

#include <string>
#include <variant>

#include "pg/connection.h"
#include "pg/replication_stream.h"

namespace outboxd::pg {
namespace {

// Written back as libpq read it (PQconninfoParse): its keyword order, a value quoted
// only where it must be.
TEST(RedactConninfo, DropsPasswordsFromKeyValueStrings) {
  EXPECT_EQ(RedactConninfo("host=db password=secret dbname=app"), "dbname=app host=db");
  EXPECT_EQ(RedactConninfo("password = 'se cr\\'et' host=db"), "host=db");
  EXPECT_EQ(RedactConninfo("host=db user=app"), "user=app host=db");
  EXPECT_EQ(RedactConninfo("app"), "app");
}

TEST(RedactConninfo, KeepsQuotedValuesQuotedAndDropsQuotedPasswords) {
  EXPECT_EQ(RedactConninfo("host=db application_name='my app' password='a b\\'c'"),
            "host=db application_name='my app'");
  EXPECT_EQ(RedactConninfo("password='host=evil' dbname='it\\'s'"), "dbname='it\\'s'");
  // A string libpq cannot read is not echoed: a fragment may be a password.
  EXPECT_EQ(RedactConninfo("host=db password='unclosed"), "[unparsable connection string]");
}

TEST(RedactConninfo, DropsPasswordsFromUris) {
  EXPECT_EQ(RedactConninfo("postgresql://app:secret@db:5432/app"), "postgresql://app@db:5432/app");
  EXPECT_EQ(RedactConninfo("postgres://db/app?user=app&password=secret&sslmode=off"),
            "postgres://app@db/app?sslmode=off");
  EXPECT_EQ(RedactConninfo("postgresql://db/app?password=secret"), "postgresql://db/app");
  EXPECT_EQ(RedactConninfo("postgresql://app@db"), "postgresql://app@db");
}

TEST(RedactConninfo, ReadsPercentEncodingAndQueryPasswordsAsLibpqDoes) {
  // An encoded ':' or '@' in the password, and a second password in the query string
  // (libpq takes the query's): both gone, the rest re-encoded.
  EXPECT_EQ(RedactConninfo("postgresql://u%40x:p%3Aw%40rd@h/d%20b?password=x%3D&"
                           "application_name=a%26b"),
            "postgresql://u%40x@h/d%20b?application_name=a%26b");
  // libpq decodes the keyword too: the hand parser before it kept this password.
  EXPECT_EQ(RedactConninfo("postgresql://db/app?pass%77ord=secret&sslmode=off"),
            "postgresql://db/app?sslmode=off");
  EXPECT_EQ(RedactConninfo("postgresql://h1:5432,h2:5433/db?password=secret"),
            "postgresql://h1:5432,h2:5433/db");
  EXPECT_EQ(RedactConninfo("postgresql://h1,h2:5433/db"), "postgresql://h1,h2:5433/db");
  EXPECT_EQ(RedactConninfo("postgresql://[::1]:5432/db?sslpassword=s"),
            "postgresql://[::1]:5432/db");
  EXPECT_EQ(RedactConninfo("postgresql://%2Fvar%2Frun%2Fpostgresql/db"),
            "postgresql://%2Fvar%2Frun%2Fpostgresql/db");
  EXPECT_EQ(RedactConninfo("postgresql://app:secret@db/app?bad%zzquery"),
            "[unparsable connection string]");
}

TEST(RedactConninfo, DropsTheClientKeyPassphraseToo) {
  EXPECT_EQ(RedactConninfo("host=db sslpassword=secret sslmode=verify-full"),
            "host=db sslmode=verify-full");
  EXPECT_EQ(RedactConninfo("postgresql://db/app?sslpassword=secret&sslmode=require"),
            "postgresql://db/app?sslmode=require");
}

TEST(ConninfoWithPassword, MergesIntoKeyValueStringsUrisAndBareNames) {
  EXPECT_EQ(*ConninfoWithPassword("host=db user=app", "pw"), "host='db' password='pw' user='app'");
  EXPECT_EQ(*ConninfoWithPassword("postgresql://app:old@db:5433/shop?sslmode=require", "pw"),
            "dbname='shop' host='db' password='pw' port='5433' sslmode='require' user='app'");
  EXPECT_EQ(*ConninfoWithPassword("shop", "pw"), "dbname='shop' password='pw'");
  // Quotes, backslashes and spaces survive libpq's own parser.
  const std::string tricky = "a b'c\\d=e";
  const std::string merged = *ConninfoWithPassword("host=db", tricky);
  EXPECT_EQ(merged, "host='db' password='a b\\'c\\\\d=e'");
  EXPECT_EQ(RedactConninfo(merged), "host=db");
  PQconninfoOption* options = PQconninfoParse(merged.c_str(), nullptr);
  ASSERT_NE(options, nullptr);
  for (PQconninfoOption* o = options; o->keyword != nullptr; ++o) {
    if (std::string(o->keyword) == "password") {
      EXPECT_EQ(std::string(o->val), tricky);
    }
  }
  PQconninfoFree(options);
  EXPECT_FALSE(ConninfoWithPassword("host=db port", "pw").ok());
}

std::string Bytes(std::initializer_list<int> bytes) {
  std::string out;
  for (int b : bytes) out += static_cast<char>(b);
  return out;
}

TEST(ParseCopyData, ReadsXLogDataHeaderAndPayload) {
  std::string message = Bytes({'w', 0,  0, 0,    0x16, 0xB3, 0x74, 0xD8, 0x48,  // wal_start
                               0,   0,  0, 0x16, 0xB3, 0x74, 0xD8, 0x50,        // wal_end
                               0,   0,  0, 0,    0,    0,    0x01, 0x00,        // send_time
                               'B', 'x'});
  absl::StatusOr<StreamMessage> parsed = ParseCopyData(message);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const auto& data = std::get<XLogData>(*parsed);
  EXPECT_EQ(data.wal_start, 0x16B374D848u);
  EXPECT_EQ(data.wal_end, 0x16B374D850u);
  EXPECT_EQ(data.send_time, 256);
  EXPECT_EQ(data.data, "Bx");
}

TEST(ParseCopyData, ReadsKeepalive) {
  std::string message = Bytes({'k', 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 3, 1});
  absl::StatusOr<StreamMessage> parsed = ParseCopyData(message);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const auto& keepalive = std::get<Keepalive>(*parsed);
  EXPECT_EQ(keepalive.wal_end, 0x100000002u);
  EXPECT_EQ(keepalive.send_time, 3);
  EXPECT_TRUE(keepalive.reply_requested);
}

TEST(ParseCopyData, RejectsTruncatedAndUnknownMessages) {
  const std::string xlog(25, '\0');
  const std::string keepalive(18, '\0');
  for (size_t len = 1; len < 25; ++len) {
    EXPECT_EQ(ParseCopyData("w" + xlog.substr(0, len - 1)).status().code(),
              absl::StatusCode::kDataLoss)
        << "XLogData of " << len << " bytes";
  }
  for (size_t len = 1; len < 18; ++len) {
    EXPECT_EQ(ParseCopyData("k" + keepalive.substr(0, len - 1)).status().code(),
              absl::StatusCode::kDataLoss)
        << "keepalive of " << len << " bytes";
  }
  EXPECT_TRUE(ParseCopyData("w" + xlog.substr(1)).ok());  // header only, empty data
  EXPECT_EQ(ParseCopyData("").status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(ParseCopyData("zzzz").status().message(), "unknown replication message type 0x7a");
}

}  // namespace
}  // namespace outboxd::pg
