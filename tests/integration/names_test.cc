// Issue 13, points 4, 5 and 10, through the binary: names are checked before setup
// creates anything; one parser of --table (pg::TableName) for every command, so a
// schema with a dot in its name works for setup, run and status alike; and `status`
// names a slot that is missing or another database's instead of reporting polling.
#include <csignal>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "support/child_process.h"
#include "support/pg_fixture.h"
#include "support/relay_harness.h"

namespace outboxd::test {
namespace {

using ::testing::HasSubstr;

const std::vector<std::string> kTopics = {"pedido.confirmado"};

int Outboxd(std::vector<std::string> args, std::string* out) {
  args.insert(args.begin(), BinPath("outboxd"));
  auto child = ChildProcess::Start(args);
  std::optional<int> code = child->Wait(absl::Seconds(60));
  *out = child->Log();
  return code.value_or(-1);
}

int Lines(const std::string& text) {
  return static_cast<int>(std::count(text.begin(), text.end(), '\n'));
}

// Before, run split my.sch.outbox at the first dot and setup at the last, and the
// quoted form reached setup with its quotes as part of the schema name.
TEST(Names, ASchemaWithADotWorksForSetupRunAndStatus) {
  RelayHarness h(kTopics);
  h.db().Exec("CREATE SCHEMA \"my.sch\"");
  const std::string table = "\"my.sch\".outbox";
  const std::string slot = h.slot() + "_dot";
  const std::vector<std::string> names = {"--table", table,    "--publication",
                                          "dotted",  "--slot", slot};
  std::vector<std::string> setup = {"setup", "--pg", h.db().conninfo()};
  setup.insert(setup.end(), names.begin(), names.end());
  std::string out;
  ASSERT_EQ(Outboxd(setup, &out), 0) << out;
  EXPECT_EQ(h.db().Scalar("SELECT schemaname || '|' || tablename FROM pg_publication_tables "
                          "WHERE pubname = 'dotted'"),
            "my.sch|outbox");
  EXPECT_EQ(h.db().Scalar("SELECT to_regclass('\"my.sch\".outbox_dead_letter') IS NOT NULL"), "t");

  std::vector<std::string> run = {BinPath("outboxd"), "run",        "--pg",
                                  h.db().conninfo(),  "--brokers",  h.cluster().bootstraps(),
                                  "--metrics",        "127.0.0.1:0"};
  run.insert(run.end(), names.begin(), names.end());
  auto relay = ChildProcess::Start(run);
  ASSERT_TRUE(WaitForStreaming(*relay)) << relay->Log();
  h.db().Exec(
      "INSERT INTO \"my.sch\".outbox (aggregate_id, tipo, payload) "
      "VALUES ('dot-1', 'pedido.confirmado', '{\"dotted\": true}')");
  ASSERT_TRUE(h.collector().WaitForCount(1, absl::Seconds(30))) << relay->Log();
  EXPECT_EQ(h.collector().Messages()[0].key, "dot-1");
  EXPECT_EQ(h.collector().Messages()[0].value, "{\"dotted\": true}");
  relay->Signal(SIGTERM);
  EXPECT_EQ(relay->Wait(absl::Seconds(60)), 0) << relay->Log();

  ASSERT_EQ(Outboxd({"status", "--pg", h.db().conninfo(), "--table", table, "--slot", slot}, &out),
            0)
      << out;
  EXPECT_THAT(out, HasSubstr("mode "));
  EXPECT_THAT(out, HasSubstr(" cdc\n"));

  // Unquoted, three parts are refused rather than guessed, with the quoted form as fix.
  EXPECT_EQ(Outboxd({"run", "--pg", h.db().conninfo(), "--brokers", h.cluster().bootstraps(),
                     "--table", "my.sch.outbox", "--slot", slot},
                    &out),
            2)
      << out;
  EXPECT_THAT(out, HasSubstr("--table \"my.sch.outbox\" has 3 dot-separated parts"));
  EXPECT_THAT(out, HasSubstr("--table '\"my.sch\".outbox'"));
  EXPECT_EQ(Lines(out), 1) << out;
}

// Before, setup --slot 'a"b' committed the tables and the publication, then failed
// at CREATE_REPLICATION_SLOT.
TEST(Names, SetupRefusesABadNameBeforeCreatingAnything) {
  auto db = TestDatabase::Create();
  const std::string objects =
      "SELECT (SELECT count(*) FROM pg_class WHERE relnamespace = 'public'::regnamespace) || '|' "
      "|| (SELECT count(*) FROM pg_publication) || '|' || (SELECT count(*) FROM "
      "pg_replication_slots WHERE database = current_database())";
  const std::string before = db->Scalar(objects);
  std::string out;
  for (const std::vector<std::string>& flags :
       {std::vector<std::string>{"--slot", "a\"b"},
        std::vector<std::string>{"--slot", "outboxd", "--publication", std::string(64, 'p')},
        std::vector<std::string>{"--slot", "outboxd", "--table", std::string(60, 't')}}) {
    std::vector<std::string> args = {"setup", "--pg", db->conninfo()};
    args.insert(args.end(), flags.begin(), flags.end());
    EXPECT_EQ(Outboxd(args, &out), 2) << out;
    EXPECT_EQ(Lines(out), 1) << out;
    EXPECT_EQ(db->Scalar(objects), before) << "nothing created: " << out;
  }
  EXPECT_EQ(Outboxd({"setup", "--pg", db->conninfo(), "--slot", "a\"b"}, &out), 2);
  EXPECT_THAT(out, HasSubstr("--slot \"a\"b\": PostgreSQL allows only lower-case letters, digits "
                             "and underscores in a replication slot name"));
}

// Before, a missing slot read as "mode poll" and another database's slot as this
// database's.
TEST(Names, StatusNamesAMissingOrForeignSlotAndTheDatabase) {
  RelayHarness h(kTopics);
  auto other = TestDatabase::Create();
  std::string out;
  ASSERT_EQ(Outboxd({"setup", "--pg", other->conninfo(), "--slot", other->name()}, &out), 0) << out;

  EXPECT_EQ(Outboxd({"status", "--pg", h.db().conninfo(), "--slot", "no_such_slot"}, &out), 2)
      << out;
  EXPECT_THAT(out, HasSubstr("replication slot no_such_slot does not exist (status reads "
                             "database " +
                             h.db().name() + "): pass --slot"));
  EXPECT_EQ(Lines(out), 1) << out;

  EXPECT_EQ(Outboxd({"status", "--pg", h.db().conninfo(), "--slot", other->name()}, &out), 2)
      << out;
  EXPECT_THAT(out, HasSubstr("replication slot " + other->name() + " belongs to database " +
                             other->name() + " (status reads database " + h.db().name() + ")"));

  // --mode poll reads the polling columns whatever the slots say.
  EXPECT_EQ(
      Outboxd({"status", "--pg", h.db().conninfo(), "--slot", "no_such_slot", "--mode", "poll"},
              &out),
      0)
      << out;
  EXPECT_THAT(out, HasSubstr(" poll\n"));
}

}  // namespace
}  // namespace outboxd::test
