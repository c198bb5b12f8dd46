// `outboxd setup` beyond the default outbox table: the column flags (a Debezium outbox
// table is checked, never altered, and gets only what is missing) and --poll-only
// (the tables without publication or slot). wal_level = replica is in
// tests/pg/private_cluster_test.cc and tests/poll/poll_only_setup_test.cc.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "absl/strings/str_replace.h"
#include "ops/setup.h"
#include "support/doc_commands.h"
#include "support/pg_fixture.h"

namespace outboxd::ops {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

const ::testing::Matcher<const std::string&> kEmitMessageRevoked =
    ::testing::StartsWith("EXECUTE on pg_logical_emit_message taken from PUBLIC");

const outbox::ColumnMapping kDebeziumColumns{.aggregate_id = "aggregateid", .type = "type"};

// The table as the catalog holds it: columns, types, defaults, constraints, indexes,
// triggers. Equal before and after: setup did not alter it.
std::string TableFingerprint(test::TestDatabase& db, const std::string& table) {
  return db.Scalar(absl::StrReplaceAll(
      "SELECT concat_ws(' | ',"
      " (SELECT string_agg(attname || ' ' || format_type(atttypid, atttypmod) || attnotnull"
      "    || coalesce(pg_get_expr(d.adbin, d.adrelid), ''), ', ' ORDER BY attnum)"
      "    FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid"
      "     AND d.adnum = a.attnum WHERE attrelid = '$T'::regclass AND attnum > 0),"
      " (SELECT string_agg(conname || pg_get_constraintdef(oid), ', ' ORDER BY conname)"
      "    FROM pg_constraint WHERE conrelid = '$T'::regclass),"
      " (SELECT string_agg(pg_get_indexdef(indexrelid), ', ' ORDER BY indexrelid)"
      "    FROM pg_index WHERE indrelid = '$T'::regclass),"
      " (SELECT count(*) FROM pg_trigger WHERE tgrelid = '$T'::regclass))",
      {{"$T", table}}));
}

TEST(SetupColumns, ADebeziumTableGetsOnlyWhatIsMissingAndIsNeverAltered) {
  auto db = test::TestDatabase::Create();
  db->Exec(test::DebeziumTableDdl());
  const std::string before = TableFingerprint(*db, "dbz_outbox");
  pg::Connection conn = db->Connect();
  SetupReport report;
  absl::Status status = ops::Setup(
      conn, {.table = "dbz_outbox", .slot = db->name(), .columns = kDebeziumColumns}, &report);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_THAT(
      report.created,
      ElementsAre("table dbz_outbox_dead_letter", "table dbz_outbox_relay_state", "table inbox",
                  "publication outboxd", "function outboxd_emit", "table outboxd_emit_key",
                  kEmitMessageRevoked, "replication slot " + db->name()));
  EXPECT_EQ(TableFingerprint(*db, "dbz_outbox"), before);
  // Said once each: what goes without the timestamp, what a NULL payload becomes, and
  // that polling cannot serve it.
  ASSERT_EQ(report.notes.size(), 3u);
  EXPECT_EQ(report.notes[0],
            "table dbz_outbox has no column \"criado_em\" (--created-at-column): outboxd run "
            "sends the transaction's commit time as the created_at header, and status and "
            "cleanup cannot tell its rows' age (status shows it unknown, cleanup keeps the rows)");
  EXPECT_EQ(report.notes[1],
            "table dbz_outbox allows NULL in mapped column(s) payload: outboxd run dead-letters "
            "such a row; to forbid them: ALTER TABLE dbz_outbox ALTER COLUMN payload SET NOT NULL");
  EXPECT_EQ(report.notes[2],
            "table dbz_outbox has no polling columns (seq, publicado_em, tentativas, "
            "ultimo_erro, proxima_tentativa_em): outboxd poll cannot serve it, outboxd run can; "
            "setup never alters an existing table");
  EXPECT_EQ(db->Scalar("SELECT string_agg(tablename, ',') FROM pg_publication_tables "
                       "WHERE pubname = 'outboxd'"),
            "dbz_outbox");

  SetupReport again;
  ASSERT_TRUE(ops::Setup(conn,
                         {.table = "dbz_outbox", .slot = db->name(), .columns = kDebeziumColumns},
                         &again)
                  .ok());
  EXPECT_THAT(again.created, IsEmpty());
  EXPECT_EQ(TableFingerprint(*db, "dbz_outbox"), before);
}

// Issue 27 point 6: with --require-not-null a mapped column that allows NULL is refused
// with the ALTER TABLE that fixes it, before anything is created.
TEST(SetupColumns, RequireNotNullRefusesANullableMappedColumnAndCreatesNothing) {
  auto db = test::TestDatabase::Create();
  db->Exec(test::DebeziumTableDdl());
  db->Exec("ALTER TABLE dbz_outbox ALTER COLUMN aggregateid DROP NOT NULL");
  pg::Connection conn = db->Connect();
  absl::Status status = ops::Setup(conn, {.table = "dbz_outbox",
                                          .slot = db->name(),
                                          .columns = kDebeziumColumns,
                                          .require_not_null = true});
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(status.message(),
            "table dbz_outbox allows NULL in mapped column(s) aggregateid, payload: outboxd run "
            "dead-letters such a row (--require-not-null); fix: ALTER TABLE dbz_outbox ALTER "
            "COLUMN aggregateid SET NOT NULL, ALTER COLUMN payload SET NOT NULL");
  EXPECT_EQ(db->Scalar("SELECT to_regclass('dbz_outbox_dead_letter') IS NULL"), "t");
}

// The first failure: without the column flags setup went on to the index on
// publicado_em. Now it stops at the first unmapped column, naming its flag, and
// creates nothing.
TEST(SetupColumns, AnExistingTableWithoutAMappedColumnIsRefusedAndNothingIsCreated) {
  auto db = test::TestDatabase::Create();
  db->Exec(test::DebeziumTableDdl());
  pg::Connection conn = db->Connect();
  absl::Status status = ops::Setup(conn, {.table = "dbz_outbox", .slot = db->name()});
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(status.message(),
            "table dbz_outbox has no column \"aggregate_id\"; name the right column with "
            "--aggregate-column (setup never alters an existing table)");
  EXPECT_EQ(db->Scalar("SELECT to_regclass('dbz_outbox_dead_letter') IS NULL AND "
                       "NOT EXISTS (SELECT 1 FROM pg_publication) AND NOT EXISTS (SELECT 1 "
                       "FROM pg_replication_slots WHERE database = current_database())"),
            "t");
}

TEST(SetupColumns, ANewTableGetsTheMappedColumnNames) {
  auto db = test::TestDatabase::Create();
  pg::Connection conn = db->Connect();
  SetupReport report;
  ASSERT_TRUE(ops::Setup(conn,
                         {.table = "eventos",
                          .slot = db->name(),
                          .columns = {.id = "event_id",
                                      .aggregate_id = "aggregateid",
                                      .type = "type",
                                      .payload = "body",
                                      .created_at = "occurred_at"}},
                         &report)
                  .ok());
  EXPECT_THAT(report.notes, IsEmpty());
  EXPECT_EQ(db->Scalar("SELECT string_agg(attname, ',' ORDER BY attnum) FROM pg_attribute "
                       "WHERE attrelid = 'eventos'::regclass AND attnum > 0"),
            "seq,event_id,aggregateid,type,body,occurred_at,publicado_em,tentativas,"
            "ultimo_erro,proxima_tentativa_em");
  db->Exec("INSERT INTO eventos (aggregateid, type, body) VALUES ('a', 't', '{}')");
  EXPECT_EQ(db->Scalar("SELECT to_regclass('eventos_pendentes') IS NOT NULL"), "t");
}

TEST(SetupPollOnly, CreatesTheTablesAndIndexButNoPublicationOrSlot) {
  auto db = test::TestDatabase::Create();
  pg::Connection conn = db->Connect();
  SetupReport report;
  absl::Status status = ops::Setup(conn, {.slot = db->name(), .poll_only = true}, &report);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_THAT(report.created,
              ElementsAre("table outbox", "index outbox_pendentes", "table outbox_dead_letter",
                          "table outbox_relay_state", "table inbox"));
  EXPECT_EQ(db->Scalar("SELECT count(*) FROM pg_publication"), "0");
  EXPECT_EQ(db->Scalar("SELECT count(*) FROM pg_replication_slots WHERE database = "
                       "current_database()"),
            "0");
}

// A table the polling relay cannot serve: --poll-only says which column to add
// (never adding it itself) and creates nothing.
TEST(SetupPollOnly, RefusesATableWithoutThePollingColumns) {
  auto db = test::TestDatabase::Create();
  db->Exec(test::DebeziumTableDdl());
  pg::Connection conn = db->Connect();
  absl::Status status =
      ops::Setup(conn, {.table = "dbz_outbox", .columns = kDebeziumColumns, .poll_only = true});
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("table dbz_outbox lacks the polling relay's column \"seq\": ALTER TABLE "
                        "dbz_outbox ADD COLUMN seq bigint GENERATED ALWAYS AS IDENTITY"));
  EXPECT_EQ(db->Scalar("SELECT to_regclass('dbz_outbox_dead_letter') IS NULL"), "t");
}

}  // namespace
}  // namespace outboxd::ops
