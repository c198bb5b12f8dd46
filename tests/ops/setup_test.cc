// `outboxd setup` on a real PostgreSQL: creates the default schema (src/ops/setup.cc),
// the publication and the slot; is idempotent; and refuses, in one line, what cannot
// work.
#include "ops/setup.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "pg/connection.h"
#include "pg/slot.h"
#include "support/pg_fixture.h"

namespace outboxd::ops {
namespace {

using ::testing::AllOf;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

const ::testing::Matcher<const std::string&> kEmitMessageRevoked =
    ::testing::StartsWith("EXECUTE on pg_logical_emit_message taken from PUBLIC");

std::string Message(const absl::Status& status) { return std::string(status.message()); }

// Everything Setup could create or change, as text.
std::string CatalogFingerprint(test::TestDatabase& db) {
  return db.Scalar(
      "SELECT concat_ws(' | ',"
      " (SELECT string_agg(c.oid || ':' || c.relname || ':' || c.relkind::text, ',' ORDER BY c.oid)"
      "    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
      "   WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast')),"
      " (SELECT string_agg(oid || ':' || pubname || ':' || pubinsert || pubupdate || pubdelete,"
      "                    ',' ORDER BY oid) FROM pg_publication),"
      " (SELECT string_agg(prpubid || ':' || prrelid, ',' ORDER BY oid) FROM pg_publication_rel),"
      " (SELECT string_agg(slot_name || ':' || confirmed_flush_lsn, ',' ORDER BY slot_name)"
      "    FROM pg_replication_slots WHERE database = current_database()))");
}

TEST(Setup, CreatesTablesPublicationAndSlotOnAFreshDatabase) {
  auto db = test::TestDatabase::Create();
  pg::Connection conn = db->Connect();
  SetupReport report;
  absl::Status status = ops::Setup(conn, {.slot = db->name()}, &report);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_THAT(report.created,
              ElementsAre("table outbox", "index outbox_pendentes", "table outbox_dead_letter",
                          "table outbox_relay_state", "table inbox", "publication outboxd",
                          "function outboxd_emit", "table outboxd_emit_key", kEmitMessageRevoked,
                          "replication slot " + db->name()));

  absl::StatusOr<pg::SlotInfo> slot = pg::QuerySlot(conn, db->name());
  ASSERT_TRUE(slot.ok()) << slot.status();
  EXPECT_TRUE(slot->exists);
  EXPECT_FALSE(slot->active);
  EXPECT_EQ(slot->plugin, "pgoutput");
  EXPECT_EQ(slot->slot_type, "logical");
  EXPECT_EQ(slot->database, db->name());
  EXPECT_NE(slot->confirmed_flush_lsn, pg::kInvalidLsn);
  EXPECT_EQ(db->Scalar("SELECT pubinsert::text || pubupdate || pubdelete || pubtruncate "
                       "FROM pg_publication WHERE pubname = 'outboxd'"),
            "truefalsefalsefalse");
  EXPECT_EQ(db->Scalar("SELECT string_agg(tablename, ',') FROM pg_publication_tables "
                       "WHERE pubname = 'outboxd'"),
            "outbox");
}

// The tables and columns docs/schema.md documents.
TEST(Setup, CreatesTheDocumentedSchema) {
  auto db = test::TestDatabase::Create();
  pg::Connection conn = db->Connect();
  ASSERT_TRUE(ops::Setup(conn, {.slot = db->name()}).ok());
  auto columns = [&](const char* table) {
    return db->Scalar(
        std::string("SELECT string_agg(attname || ' ' || format_type(atttypid, atttypmod) || "
                    "CASE WHEN attnotnull THEN ' not null' ELSE '' END || "
                    "coalesce(' default ' || pg_get_expr(d.adbin, d.adrelid), '') || "
                    "CASE WHEN attidentity = 'a' THEN ' identity' ELSE '' END, ', ' "
                    "ORDER BY attnum) FROM pg_attribute a LEFT JOIN pg_attrdef d "
                    "ON d.adrelid = a.attrelid AND d.adnum = a.attnum "
                    "WHERE attrelid = '") +
        table + "'::regclass AND attnum > 0 AND NOT attisdropped");
  };
  EXPECT_EQ(columns("outbox"),
            "seq bigint not null identity, id uuid not null default gen_random_uuid(), "
            "aggregate_id text not null, tipo text not null, payload jsonb not null, "
            "criado_em timestamp with time zone not null default now(), "
            "publicado_em timestamp with time zone, tentativas integer not null default 0, "
            "ultimo_erro text, proxima_tentativa_em timestamp with time zone not null "
            "default now()");
  EXPECT_EQ(columns("inbox"),
            "message_id uuid not null, processado_em timestamp with time zone not null "
            "default now()");
  EXPECT_EQ(db->Scalar("SELECT pg_get_indexdef('outbox_pendentes'::regclass)"),
            "CREATE INDEX outbox_pendentes ON public.outbox USING btree (seq) "
            "WHERE (publicado_em IS NULL)");
  EXPECT_EQ(db->Scalar("SELECT count(*) FROM pg_index WHERE indrelid = 'outbox'::regclass "
                       "AND indisunique"),
            "2");  // primary key (seq) and UNIQUE (id)
  db->Exec("INSERT INTO outbox (aggregate_id, tipo, payload) VALUES ('a', 't', '{}')");
}

TEST(Setup, RunningTwiceChangesNothing) {
  auto db = test::TestDatabase::Create();
  pg::Connection conn = db->Connect();
  ASSERT_TRUE(ops::Setup(conn, {.slot = db->name()}).ok());
  const std::string before = CatalogFingerprint(*db);
  SetupReport report;
  absl::Status again = ops::Setup(conn, {.slot = db->name()}, &report);
  ASSERT_TRUE(again.ok()) << again;
  EXPECT_THAT(report.created, IsEmpty());
  EXPECT_EQ(CatalogFingerprint(*db), before);
}

TEST(Setup, NamesIndexesAfterACustomTableAndUsesItsSchema) {
  auto db = test::TestDatabase::Create();
  db->Exec("CREATE SCHEMA app");
  pg::Connection conn = db->Connect();
  SetupReport report;
  absl::Status status = ops::Setup(
      conn, {.table = "app.eventos", .publication = "pub_eventos", .slot = db->name()}, &report);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_THAT(report.created, ElementsAre("table app.eventos", "index eventos_pendentes",
                                          "table eventos_dead_letter", "table eventos_relay_state",
                                          "table inbox", "publication pub_eventos",
                                          "function app.outboxd_emit", "table app.outboxd_emit_key",
                                          kEmitMessageRevoked, "replication slot " + db->name()));
  EXPECT_EQ(db->Scalar("SELECT to_regclass('app.eventos_pendentes') IS NOT NULL"), "t");
  EXPECT_EQ(db->Scalar("SELECT to_regclass('app.inbox') IS NOT NULL"), "t");
  EXPECT_EQ(db->Scalar("SELECT to_regclass('app.eventos_dead_letter') IS NOT NULL"), "t");
  EXPECT_EQ(db->Scalar("SELECT to_regclass('app.eventos_relay_state') IS NOT NULL"), "t");
  EXPECT_EQ(db->Scalar("SELECT schemaname || '.' || tablename FROM pg_publication_tables "
                       "WHERE pubname = 'pub_eventos'"),
            "app.eventos");
  EXPECT_TRUE(
      ops::Setup(conn, {.table = "app.eventos", .publication = "pub_eventos", .slot = db->name()})
          .ok());
}

TEST(Setup, RefusesAPublicationThatDoesNotPublishTheTableAndRollsBack) {
  auto db = test::TestDatabase::Create();
  db->Exec("CREATE TABLE other (a int); CREATE PUBLICATION outboxd FOR TABLE other");
  pg::Connection conn = db->Connect();
  absl::Status status = ops::Setup(conn, {.slot = db->name()});
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Message(status),
            "publication outboxd exists but does not publish table outbox: ALTER PUBLICATION "
            "outboxd ADD TABLE outbox, or choose another --publication");
  EXPECT_EQ(db->Scalar("SELECT to_regclass('outbox') IS NULL"), "t") << "rolled back";
  EXPECT_EQ(db->Scalar("SELECT count(*) FROM pg_replication_slots WHERE database = "
                       "current_database()"),
            "0");
}

TEST(Setup, RefusesASlotWithAnotherPlugin) {
  auto db = test::TestDatabase::Create();
  db->Exec("SELECT pg_create_logical_replication_slot('" + db->name() + "', 'test_decoding')");
  pg::Connection conn = db->Connect();
  absl::Status status = ops::Setup(conn, {.slot = db->name()});
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Message(status), "replication slot " + db->name() +
                                 " uses plugin test_decoding, not pgoutput: drop it with SELECT "
                                 "pg_drop_replication_slot('" +
                                 db->name() + "') or choose another --slot");
  // Checked before anything was created (issue 13, point 4).
  EXPECT_EQ(db->Scalar("SELECT to_regclass('outbox') IS NULL"), "t") << "nothing created";
  EXPECT_EQ(db->Scalar("SELECT count(*) FROM pg_publication"), "0");
}

// Issue 13, point 4: setup --slot 'a"b' committed the tables and the publication and
// failed only at CREATE_REPLICATION_SLOT. Every name is checked first now.
TEST(Setup, RefusesEveryBadNameBeforeCreatingAnything) {
  auto db = test::TestDatabase::Create();
  pg::Connection conn = db->Connect();
  const std::string before = CatalogFingerprint(*db);
  const std::vector<SetupOptions> bad = {
      {.slot = "a\"b"},
      {.slot = "Outboxd"},
      {.publication = std::string(64, 'p'), .slot = db->name()},
      {.table = std::string(52, 't'), .slot = db->name()},
      {.table = "my.sch.outbox", .slot = db->name()},
      {.table = "out\xff", .slot = db->name()},
      {.slot = db->name(), .inbox_table = std::string(64, 'i')},
  };
  for (const SetupOptions& options : bad) {
    absl::Status status = ops::Setup(conn, options);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_EQ(CatalogFingerprint(*db), before) << status;
  }
  EXPECT_EQ(Message(ops::Setup(conn, {.slot = "a\"b"})),
            "--slot \"a\"b\": PostgreSQL allows only lower-case letters, digits and underscores "
            "in a replication slot name; choose one like outboxd_app");
}

TEST(Setup, RoleWithoutReplicationCannotCreateTheSlot) {
  auto db = test::TestDatabase::Create();
  const std::string role = db->CreateRole("NOREPLICATION");
  db->Exec("ALTER DATABASE " + db->name() + " OWNER TO " + role);
  pg::Connection conn = std::move(pg::Connection::Open(db->ConninfoWith("user=" + role))).value();
  absl::Status status = ops::Setup(conn, {.slot = db->name()});
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Message(status),
            "role " + role + " lacks REPLICATION: ALTER ROLE " + role + " REPLICATION");
}

// Issue 27 point 2: a message of any size under any prefix reaches a WAL-only relay
// whole while PUBLIC may write one. The owner's setup cannot take that from PUBLIC and
// changes nothing; a superuser's does, and gives it to outboxd_emit's owner, whose
// SECURITY DEFINER function still writes events for the roles granted EXECUTE.
TEST(Setup, ASuperusersSetupTakesEmitMessageFromPublicAndGivesItToOutboxdEmitsOwner) {
  auto db = test::TestDatabase::Create();
  const std::string owner = db->CreateRole("REPLICATION");
  const std::string writer = db->CreateRole("");
  const std::string other = db->CreateRole("");
  db->Exec(absl::StrCat("GRANT CREATE ON DATABASE \"", db->name(), "\" TO ", owner,
                        "; GRANT CREATE ON SCHEMA public TO ", owner));
  const std::string public_may =
      "SELECT bool_or(has_function_privilege('public', p.oid, 'EXECUTE')) FROM pg_proc p "
      "WHERE proname = 'pg_logical_emit_message'";
  pg::Connection as_owner = *pg::Connection::Open(db->ConninfoWith("user=" + owner));
  SetupReport report;
  ASSERT_TRUE(ops::Setup(as_owner, {.slot = db->name()}, &report).ok());
  EXPECT_THAT(report.created, Not(Contains(kEmitMessageRevoked)));
  EXPECT_EQ(db->Scalar(public_may), "t");

  pg::Connection as_superuser = db->Connect();
  ASSERT_TRUE(ops::Setup(as_superuser, {.slot = db->name()}, &report).ok());
  EXPECT_THAT(report.created,
              ElementsAre(AllOf(kEmitMessageRevoked, HasSubstr("granted to " + owner))));
  EXPECT_EQ(db->Scalar(public_may), "f");
  db->Exec(absl::StrCat("GRANT EXECUTE ON FUNCTION outboxd_emit(text, text, jsonb) TO ", writer));
  pg::Connection as_writer = *pg::Connection::Open(db->ConninfoWith("user=" + writer));
  EXPECT_TRUE(as_writer.Exec("SELECT outboxd_emit('pedido-1', 'pedido.confirmado', '{}')").ok());
  pg::Connection as_other = *pg::Connection::Open(db->ConninfoWith("user=" + other));
  for (const char* sql : {"SELECT pg_logical_emit_message(true, 'x', 'y')",
                          "SELECT pg_logical_emit_message(false, 'x', 'y'::bytea)"}) {
    EXPECT_EQ(pg::SqlStateOf(as_other.Exec(sql).status()), "42501") << sql;
    EXPECT_EQ(pg::SqlStateOf(as_writer.Exec(sql).status()), "42501") << sql;
  }

  ASSERT_TRUE(ops::Setup(as_superuser, {.slot = db->name()}, &report).ok());
  EXPECT_THAT(report.created, IsEmpty()) << "a second run changes nothing";
}

TEST(Setup, KeepPublicEmitMessageLeavesItWithPublic) {
  auto db = test::TestDatabase::Create();
  pg::Connection conn = db->Connect();
  SetupReport report;
  ASSERT_TRUE(
      ops::Setup(conn, {.slot = db->name(), .keep_public_emit_message = true}, &report).ok());
  EXPECT_THAT(report.created, Not(Contains(kEmitMessageRevoked)));
  const std::string other = db->CreateRole("");
  pg::Connection as_other = *pg::Connection::Open(db->ConninfoWith("user=" + other));
  EXPECT_TRUE(as_other.Exec("SELECT pg_logical_emit_message(true, 'x', 'y')").ok());
}

}  // namespace
}  // namespace outboxd::ops
