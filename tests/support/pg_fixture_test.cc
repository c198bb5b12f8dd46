// The per-test database fixture: unique names, and a teardown that leaves nothing
// behind even while a walsender still holds one of the database's slots.
#include "support/pg_fixture.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <regex>
#include <string>

#include "ops/setup.h"
#include "pg/replication_stream.h"

namespace outboxd::test {
namespace {

TEST(TestDatabase, NamesAreUniqueLowerCaseAndValidSlotNames) {
  auto a = TestDatabase::Create();
  auto b = TestDatabase::Create();
  EXPECT_NE(a->name(), b->name());
  EXPECT_TRUE(std::regex_match(a->name(), std::regex("[a-z0-9_]{1,63}"))) << a->name();
  EXPECT_EQ(a->Scalar("SELECT current_database()"), a->name());
  EXPECT_THAT(a->conninfo(), ::testing::HasSubstr("dbname='" + a->name() + "'"));
}

TEST(TestDatabase, TeardownDropsTheDatabaseItsActiveSlotsAndRoles) {
  auto db = TestDatabase::Create();
  const std::string name = db->name();
  const std::string role = db->CreateRole("NOREPLICATION");
  pg::Connection setup_conn = db->Connect();
  ASSERT_TRUE(ops::Setup(setup_conn, {.slot = name}).ok());
  absl::StatusOr<pg::ReplicationStream> stream = pg::ReplicationStream::Start(
      db->Connect(pg::ConnectionKind::kReplication), {.slot = name, .publication = "outboxd"});
  ASSERT_TRUE(stream.ok()) << stream.status();

  db.reset();  // the stream's walsender is still running

  pg::Connection admin = std::move(pg::Connection::Open(::getenv("OUTBOXD_TEST_PG"))).value();
  auto count = [&](const std::string& sql) {
    return std::string(std::move(admin.ExecParams(sql, {name})).value().Get(0, 0));
  };
  EXPECT_EQ(count("SELECT count(*) FROM pg_database WHERE datname = $1"), "0");
  EXPECT_EQ(count("SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1"), "0");
  EXPECT_EQ(count("SELECT count(*) FROM pg_roles WHERE rolname = $1 || '_r0'"), "0");
}

TEST(TestDatabaseDeathTest, AbortsWithAClearMessageWithoutOutboxdTestPg) {
  EXPECT_DEATH(
      {
        ::unsetenv("OUTBOXD_TEST_PG");
        TestDatabase::Create();
      },
      "OUTBOXD_TEST_PG not set: run scripts/test");
}

}  // namespace
}  // namespace outboxd::test
