// Issue 27 point 1: the partition upkeep of `outboxd cleanup` and of `run`'s cleanup
// job touches only the outbox's and the inbox's own partitions. A role with CREATE on
// its own schema plants a table carrying the comment an older outboxd put on a
// partition it detached, with code of its own that runs if anyone reads it: a
// row-level security policy calling its function (against the outbox's owner), a
// column of a type with an implicit cast to timestamptz (against a superuser, with
// --inbox-partition-by). Both ran before: the function granted its role rights on the
// outbox, the cast made it a superuser and cleanup dropped its table. Now neither
// runs, the planted table stays, and the real partitions are dropped as before.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "integration/hostile_role.h"
#include "support/outbox_schema.h"
#include "support/relay_harness.h"
#include "support/wait_until.h"

namespace outboxd::test {
namespace {

const std::vector<std::string> kTopics = {"pedido.confirmado"};

int Outboxd(RelayHarness& h, const std::string& conninfo, std::vector<std::string> args,
            std::string* out) {
  args.insert(args.end(), {"--pg", conninfo});
  return h.RunOutboxd(std::move(args), out);
}

void InsertEvents(TestDatabase& db, const std::string& batch, int n, int days) {
  db.Exec(absl::StrFormat(
      "INSERT INTO outbox (aggregate_id, tipo, payload, criado_em) SELECT '%s-' || i, "
      "'pedido.confirmado', jsonb_build_object('batch', '%s'), now() + interval '%d days' "
      "FROM generate_series(1, %d) i",
      batch, batch, days, n));
}

// The default outbox's columns, partitioned by day without a DEFAULT partition (so
// upkeep detaches CONCURRENTLY, recording each partition first).
const std::string kOwnersOutbox = R"sql(
SELECT pg_drop_replication_slot('$SLOT');
DROP PUBLICATION outboxd;
DROP TABLE outbox;
GRANT CREATE ON SCHEMA public TO $OWNER;
SET ROLE $OWNER;
)sql" + std::string(kPartitionedOutboxTable) +
                                  R"sql(
RESET ROLE;
ALTER TABLE outbox_relay_state OWNER TO $OWNER;
ALTER TABLE outbox_dead_letter OWNER TO $OWNER;
ALTER TABLE inbox OWNER TO $OWNER;
)sql";

// Drops the inbox `outboxd setup` made and sets it up again partitioned by day;
// whether setup succeeded, its output in `out`.
bool RemakeInboxPartitioned(RelayHarness& h, std::string* out) {
  h.db().Exec("DROP TABLE inbox");
  return Outboxd(h, h.db().conninfo(), {"setup", "--slot", h.slot(), "--inbox-partition-by", "day"},
                 out) == 0;
}

// RemakeInboxPartitioned, and a role of no privilege to play the attacker: its name,
// or "" when setup failed.
std::string PartitionedInboxAndAttacker(RelayHarness& h, std::string* out) {
  const std::string attacker = h.db().CreateRole("");
  return RemakeInboxPartitioned(h, out) ? attacker : "";
}

bool Gone(TestDatabase& db, const std::string& table) {
  return db.Scalar("SELECT to_regclass('" + table + "') IS NULL") == "t";
}

// What `outboxd cleanup` printed (`out`) once it ran beside the attacker's planted
// table: it dropped `dropped`, no upkeep failed, it named none of another role's
// tables, and none of the attacker's code ran.
void ExpectCleanupDroppedOnlyItsOwn(TestDatabase& db, const std::string& attacker,
                                    const std::string& dropped, const std::string& planted,
                                    const std::string& out) {
  EXPECT_TRUE(Gone(db, dropped)) << out;
  EXPECT_FALSE(absl::StrContains(out, "upkeep failed")) << out;
  EXPECT_FALSE(absl::StrContains(out, "evil")) << out;  // another role's table is not named
  ExpectAttackerCodeNeverRan(db, attacker, planted, out);
}

// The outbox belongs to a role of its own (not a superuser: a superuser bypasses
// row-level security), which runs the relay with its cleanup job and `outboxd cleanup`.
TEST(CleanupTrust, APlantedTablesPolicyNeverRunsAsTheOutboxOwner) {
  RelayHarness h(kTopics);
  TestDatabase& db = h.db();
  const std::string owner = db.CreateRole("REPLICATION");
  const std::string attacker = db.CreateRole("");
  db.Exec(absl::StrReplaceAll(kOwnersOutbox, {{"$SLOT", h.slot()}, {"$OWNER", owner}}));
  db.Exec("SET ROLE " + owner);
  for (int days : {-2, -1, 0}) {
    CreateDayPartition(db, "outbox", absl::StrCat("d", days + 3), days);
  }
  db.Exec("RESET ROLE");
  std::string out;
  ASSERT_EQ(Outboxd(h, db.conninfo(), {"setup", "--slot", h.slot()}, &out), 0) << out;
  PlantAttackerSchema(db, attacker);
  PlantPolicyTable(db, attacker);

  // run's cleanup job, as the owner, drops the two old days once acknowledged.
  const std::string as_owner = db.ConninfoWith("user=" + owner);
  InsertEvents(db, "d1", 3, -2);
  InsertEvents(db, "d2", 3, -1);
  InsertEvents(db, "d3", 3, 0);
  std::unique_ptr<ChildProcess> relay = StartRelayAs(h, as_owner);
  ASSERT_TRUE(h.collector().WaitForCount(9, absl::Seconds(60))) << relay->Log();
  EXPECT_TRUE(WaitUntil(absl::Seconds(60), [&] {
    return Gone(db, "outbox_d1") && Gone(db, "outbox_d2");
  })) << relay->Log();
  ExpectAttackerCodeNeverRan(db, attacker, "evil.outbox_p20200101", relay->Log());
  relay->Signal(SIGTERM);
  EXPECT_EQ(relay->Wait(absl::Seconds(60)).value_or(-1), 0) << relay->Log();

  // `outboxd cleanup` as the owner drops an older day (empty, so acknowledged).
  db.Exec("SET ROLE " + owner);
  CreateDayPartition(db, "outbox", "d0", -3);
  db.Exec("RESET ROLE");
  ASSERT_EQ(Outboxd(h, as_owner, {"cleanup", "--retention", "0s"}, &out), 0) << out;
  ExpectCleanupDroppedOnlyItsOwn(db, attacker, "outbox_d0", "evil.outbox_p20200101", out);
  EXPECT_FALSE(Gone(db, "outbox_d3")) << out;
  EXPECT_EQ(db.Scalar("SELECT count(*) FROM outbox_detached"), "0") << out;
}

// A superuser runs setup --inbox-partition-by, the relay with its cleanup job, and
// `outboxd cleanup`.
TEST(CleanupTrust, APlantedTablesImplicitCastNeverRunsAsASuperusersInboxCleanup) {
  RelayHarness h(kTopics);
  TestDatabase& db = h.db();
  std::string out;
  const std::string attacker = PartitionedInboxAndAttacker(h, &out);
  ASSERT_FALSE(attacker.empty()) << out;
  EXPECT_TRUE(absl::StrContains(out, "setup: table outbox_detached")) << out;
  for (int days : {-12, -11}) {
    CreateDayPartition(db, "inbox", absl::StrCat("old", -days), days);
  }
  const auto mark = [&db](int days) {
    db.Exec(absl::StrFormat(
        "INSERT INTO inbox (message_id, evento_criado_em, processado_em) VALUES "
        "(gen_random_uuid(), now() + interval '%d days', now() + interval '%d days')",
        days, days));
  };
  for (int days : {-12, -11, 0}) mark(days);
  PlantAttackerSchema(db, attacker);
  PlantCastTable(db, attacker);

  h.StartRelay({"--cleanup-interval", "1s", "--inbox-retention", "5d"});
  EXPECT_TRUE(WaitUntil(absl::Seconds(60), [&] {
    return Gone(db, "inbox_old12") && Gone(db, "inbox_old11");
  })) << h.relay().Log();
  ExpectAttackerCodeNeverRan(db, attacker, "evil.inbox_p20200101", h.relay().Log());
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();

  CreateDayPartition(db, "inbox", "old10", -10);  // empty: the CLI drops it
  ASSERT_EQ(Outboxd(h, db.conninfo(), {"cleanup", "--inbox-retention", "5d"}, &out), 0) << out;
  ExpectCleanupDroppedOnlyItsOwn(db, attacker, "inbox_old10", "evil.inbox_p20200101", out);
  EXPECT_EQ(db.Scalar("SELECT count(*) FROM inbox"), "1") << out;
}

// A partition an older outboxd marked with the comment and detached, killed before
// the drop: nothing proves now whose partition it was. It is not read or dropped,
// but named with the statement that drops it. A leaf whose owner was changed to
// another role is kept unread too.
TEST(CleanupTrust, ATableAnOlderVersionDetachedIsReportedWithTheStatementToDropIt) {
  RelayHarness h(kTopics);
  TestDatabase& db = h.db();
  std::string out;
  ASSERT_TRUE(RemakeInboxPartitioned(h, &out)) << out;
  CreateDayPartition(db, "inbox", "old9", -9);
  db.Exec(
      "COMMENT ON TABLE inbox_old9 IS 'outboxd: detached from inbox to be dropped'; "
      "ALTER TABLE inbox DETACH PARTITION inbox_old9");
  // A leaf given away to another role is not the inbox's own any more either.
  CreateDayPartition(db, "inbox", "old8", -8);
  db.Exec("ALTER TABLE inbox_old8 OWNER TO " + db.CreateRole(""));
  ASSERT_EQ(Outboxd(h, db.conninfo(), {"cleanup", "--inbox-retention", "5d"}, &out), 0) << out;
  EXPECT_FALSE(Gone(db, "inbox_old9")) << out;
  EXPECT_FALSE(Gone(db, "inbox_old8")) << out;
  EXPECT_TRUE(absl::StrContains(out,
                                "kept inbox partition inbox_old8 is not a plain table of the "
                                "owner of inbox"))
      << out;
  EXPECT_TRUE(absl::StrContains(out,
                                "kept inbox partition public.inbox_old9 was detached by an older "
                                "outboxd"))
      << out;
  EXPECT_TRUE(absl::StrContains(out, "DROP TABLE public.inbox_old9")) << out;
}

// The ledger of detached partitions is trusted only while no other role could have
// written it: one another role made first (here with CREATE on the outbox's schema),
// or one that lets another role insert, stops the upkeep with the fix in one line
// (rows are then deleted one by one), and nothing it lists is touched.
TEST(CleanupTrust, ALedgerAnotherRoleCouldWriteIsRefused) {
  RelayHarness h(kTopics);
  TestDatabase& db = h.db();
  std::string out;
  const std::string attacker = PartitionedInboxAndAttacker(h, &out);
  ASSERT_FALSE(attacker.empty()) << out;
  const std::string ddl = db.Scalar(
      "SELECT 'CREATE TABLE outbox_detached (' || string_agg(format('%I %s', attname, "
      "format_type(atttypid, atttypmod)), ', ' ORDER BY attnum) || ')' FROM pg_attribute "
      "WHERE attrelid = 'outbox_detached'::regclass AND attnum > 0");
  CreateDayPartition(db, "inbox", "old9", -9);
  db.Exec("DROP TABLE outbox_detached; GRANT CREATE ON SCHEMA public TO " + attacker);
  db.Exec("SET ROLE " + attacker);
  db.Exec(ddl);
  db.Exec(
      "INSERT INTO outbox_detached SELECT 'inbox_old9'::regclass, 'inbox'::regclass, "
      "relowner, 'public', 'inbox_old9' FROM pg_class WHERE oid = 'inbox_old9'::regclass");
  db.Exec("RESET ROLE");
  ASSERT_EQ(Outboxd(h, db.conninfo(), {"cleanup", "--inbox-retention", "5d"}, &out), 0) << out;
  EXPECT_TRUE(absl::StrContains(out,
                                "inbox partition upkeep failed (table outbox_detached is "
                                "owned by role " +
                                    attacker))
      << out;
  EXPECT_FALSE(Gone(db, "inbox_old9")) << out;

  db.Exec("DROP TABLE outbox_detached");
  db.Exec(ddl + "; GRANT INSERT ON outbox_detached TO " + attacker);
  ASSERT_EQ(Outboxd(h, db.conninfo(), {"cleanup", "--inbox-retention", "5d"}, &out), 0) << out;
  EXPECT_TRUE(absl::StrContains(out, "REVOKE ALL ON outbox_detached FROM " + attacker)) << out;
  EXPECT_FALSE(Gone(db, "inbox_old9")) << out;

  db.Exec("REVOKE ALL ON outbox_detached FROM " + attacker);
  ASSERT_EQ(Outboxd(h, db.conninfo(), {"cleanup", "--inbox-retention", "5d"}, &out), 0) << out;
  EXPECT_TRUE(Gone(db, "inbox_old9")) << out;
  EXPECT_FALSE(absl::StrContains(out, "upkeep failed")) << out;
}

}  // namespace
}  // namespace outboxd::test
