// Issue 27's end-to-end test (its "Done means"): a hostile role tries every trick of
// the issue while the relay runs with --source both (outbox rows and the WAL-only
// messages) and its cleanup job, both as the outbox's owner (not a superuser, so
// row-level security applies to it), and `outboxd cleanup` runs as that owner and as
// a superuser, on an outbox and an inbox partitioned by day. The role has only
// CONNECT (and what PUBLIC has, pg_logical_emit_message among it) in one test, and
// CREATE on a schema of its own in the other. Meanwhile a legitimate writer (INSERT
// on the outbox, EXECUTE on outboxd_emit) commits rows and messages over 13
// aggregates. Checked from what the broker holds and what the database recorded: no
// event of the attacker's is published (nor dead-lettered), none of its code ran as
// any role (its functions write who ran them into evil.ran), the writer's events all
// arrive in order per aggregate, none is lost, and the cleanup dropped the old
// partitions meanwhile.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "integration/hostile_role.h"
#include "support/relay_harness.h"
#include "pg/connection.h"
#include "support/metrics_text.h"
#include "support/wait_until.h"

namespace outboxd::test {
namespace {

const std::vector<std::string> kTopics = {"pedido.confirmado"};
// Each rejection reason of outbox/emitted_event.h.
const std::vector<std::string> kRejections = {"unsigned", "bad_signature", "invalid_field",
                                              "too_large", "non_transactional"};

// The harness set up as the superuser; the outbox's owner sets up again.
constexpr char kUndoSetup[] = R"sql(
SELECT pg_drop_replication_slot('$SLOT');
DROP PUBLICATION outboxd;
DROP TABLE outbox, outbox_dead_letter, outbox_relay_state, inbox, outboxd_emit_key;
DROP FUNCTION outboxd_emit(text, text, jsonb), outboxd_emit(text, text, jsonb, jsonb);
GRANT CREATE ON DATABASE "$DB" TO $OWNER;
GRANT CREATE ON SCHEMA public TO $OWNER;
)sql";

// The attacker's statement fails for want of a privilege (SQLSTATE 42501).
void ExpectRefused(pg::Connection& conn, const std::string& sql) {
  EXPECT_EQ(pg::SqlStateOf(conn.Exec(sql).status()), "42501") << sql;
}

class HostileRoles : public ::testing::Test {
 protected:
  void SetUp() override {
    h_ = std::make_unique<RelayHarness>(kTopics);
    TestDatabase& db = h_->db();
    owner_ = db.CreateRole("REPLICATION");
    const std::string writer = db.CreateRole("");
    db.Exec(absl::StrReplaceAll(kUndoSetup,
                                {{"$SLOT", h_->slot()}, {"$DB", db.name()}, {"$OWNER", owner_}}));
    // The owner's setup cannot take pg_logical_emit_message from PUBLIC: the attacker
    // keeps it, as in every database no superuser ran setup in.
    GrantEmitMessageToPublic(db);
    std::string out;
    ASSERT_EQ(OutboxdAs(owner_,
                        {"setup", "--slot", h_->slot(), "--partition-by", "day",
                         "--inbox-partition-by", "day"},
                        &out),
              0)
        << out;
    // Two past days of the outbox and an old day of the inbox, which the cleanup drops
    // once acknowledged (processed) while the attacker's tables stand beside them.
    db.Exec("SET ROLE " + owner_);
    CreateDayPartition(db, "outbox", "past2", -2);
    CreateDayPartition(db, "outbox", "past1", -1);
    CreateDayPartition(db, "inbox", "past9", -9);
    db.Exec(
        "INSERT INTO inbox (message_id, evento_criado_em, processado_em) VALUES "
        "(gen_random_uuid(), now() - interval '9 days', now() - interval '9 days')");
    db.Exec(absl::StrCat("GRANT INSERT ON outbox TO ", writer,
                         "; GRANT EXECUTE ON FUNCTION outboxd_emit(text, text, jsonb) TO ",
                         writer));
    db.Exec("RESET ROLE");
    pg::Connection writing = *pg::Connection::Open(db.ConninfoWith("user=" + writer));
    for (int days : {-2, -1}) {
      const std::string id = db.Scalar("SELECT gen_random_uuid()");
      const std::string aggregate = absl::StrCat("past", -days);
      ASSERT_TRUE(writing
                      .ExecParams(absl::StrCat("INSERT INTO outbox (id, aggregate_id, tipo, "
                                               "payload, criado_em) VALUES ($1::uuid, $2, "
                                               "'pedido.confirmado', '{}', now() - interval '",
                                               -days, " days')"),
                                  {id, aggregate})
                      .ok());
      past_[aggregate].push_back(id);
    }
    h_->set_relay(StartRelayAs(*h_, db.ConninfoWith("user=" + owner_), {"--source", "both"}));
    load_ = std::make_unique<EventLoad>(std::move(writing), EventLoad::Writes::kRowsAndMessages);
    ASSERT_TRUE(load_->WaitForMore(20));
  }

  int OutboxdAs(const std::string& role, std::vector<std::string> args, std::string* out) {
    args.insert(args.end(), {"--pg", role.empty() ? h_->db().conninfo()
                                                  : h_->db().ConninfoWith("user=" + role)});
    return h_->RunOutboxd(std::move(args), out);
  }

  pg::Connection Connect(const std::string& role) {
    absl::StatusOr<pg::Connection> conn =
        pg::Connection::Open(h_->db().ConninfoWith("user=" + role));
    EXPECT_TRUE(conn.ok()) << conn.status();
    if (!conn.ok()) std::abort();
    return std::move(*conn);
  }

  // What any role that can connect may try; returns how many messages with outboxd's
  // prefix it wrote (each must be a counted rejection).
  int TryEveryTrickOfARoleWithOnlyConnect(pg::Connection& attacker) {
    int forged = 0;
    const auto forge = [&](const std::string& content_sql, bool transactional = true) {
      EmitRaw(attacker, content_sql, transactional);
      ++forged;
    };
    // Events for the writer's aggregates: an id and created_at of its choosing, a
    // non-UUID id, a garbage timestamp, an aggregate that is not UTF-8, a 6.4 kB one.
    const std::string id = "0b6f0000-0000-4000-8000-0000000000ff";
    forge(UnsignedSql(FieldsSql(id, "pedido-1", R"({"forged":1})", "1999-01-01 00:00:00+00")));
    forge(UnsignedSql(FieldsSql("not-a-uuid", "pedido-2", R"({"forged":2})")));
    forge(UnsignedSql(FieldsSql(id, "pedido-3", R"({"forged":3})", "garbage")));
    forge(UnsignedSql(FieldsSql(id, "\\x6167672dfffe", R"({"forged":4})")));
    forge(UnsignedSql(FieldsSql(id, std::string(6400, 'h'), R"({"forged":5})")));
    // A made-up signature; one under a key of its own; outside a transaction.
    forge(absl::StrCat("'outboxd-v2'::bytea || '\\x00'::bytea || '", std::string(64, 'a'),
                       "'::bytea || '\\x00'::bytea || ",
                       FieldsSql(id, "pedido-4", R"({"forged":6})")));
    EmitSigned(attacker, FieldsSql(id, "pedido-5", R"({"forged":7})"),
               "(SELECT decode(repeat('36', 64), 'hex') AS inner_pad, "
               "decode(repeat('5c', 64), 'hex') AS outer_pad)");
    ++forged;
    forge(UnsignedSql(FieldsSql(id, "pedido-6", R"({"forged":8})")), false);
    // Huge content: 8 MiB with outboxd's prefix, 4 MiB under another (skipped, not
    // counted: some other consumer's).
    forge("convert_to(repeat('x', 8 << 20), 'UTF8')");
    EXPECT_TRUE(
        attacker.Exec("SELECT pg_logical_emit_message(true, 'other', repeat('y', 4 << 20))").ok());

    // The writer's function, the key, and every table outboxd keeps.
    ExpectRefused(attacker, "SELECT outboxd_emit('pedido-1', 'pedido.confirmado', '{}')");
    ExpectRefused(attacker, "SELECT * FROM outboxd_emit_key");
    ExpectRefused(attacker, "UPDATE outboxd_emit_key SET inner_pad = inner_pad");
    ExpectRefused(attacker, "INSERT INTO outboxd_emit_key (id) VALUES (2)");
    ExpectRefused(attacker,
                  "INSERT INTO outbox (aggregate_id, tipo, payload) VALUES ('pedido-1', "
                  "'pedido.confirmado', '{\"forged\": 9}')");
    // A dead letter would park the writer's aggregate; a deleted one unpark it.
    ExpectRefused(attacker,
                  "INSERT INTO outbox_dead_letter (id, aggregate_id) VALUES ('x', 'pedido-1')");
    ExpectRefused(attacker, "DELETE FROM outbox_dead_letter");
    // A forged acknowledged position would let the cleanup delete unpublished rows.
    ExpectRefused(attacker, "UPDATE outbox_relay_state SET slot_name = slot_name");
    ExpectRefused(attacker, "DELETE FROM outbox_relay_state");
    // The slot: advanced, read or dropped, events would be lost.
    const std::string slot = h_->slot();
    ExpectRefused(attacker,
                  "SELECT pg_replication_slot_advance('" + slot + "', pg_current_wal_lsn())");
    ExpectRefused(attacker, "SELECT * FROM pg_logical_slot_get_binary_changes('" + slot +
                                "', NULL, NULL, 'proto_version', '1', 'publication_names', "
                                "'outboxd')");
    ExpectRefused(attacker, "SELECT pg_drop_replication_slot('" + slot + "')");
    // The relay's sessions, role, function and search path.
    ExpectRefused(
        attacker,
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '" + owner_ + "'");
    ExpectRefused(attacker, "SET ROLE " + owner_);
    ExpectRefused(attacker, "ALTER ROLE " + owner_ + " SET search_path TO evil, public");
    ExpectRefused(attacker,
                  "ALTER DATABASE \"" + h_->db().name() + "\" SET search_path TO evil, public");
    ExpectRefused(attacker, "ALTER FUNCTION outboxd_emit(text, text, jsonb) SECURITY INVOKER");
    ExpectRefused(attacker,
                  "ALTER FUNCTION outboxd_emit(text, text, jsonb, jsonb) SECURITY INVOKER");
    ExpectRefused(attacker,
                  "CREATE OR REPLACE FUNCTION public.outboxd_emit(text, text, jsonb) RETURNS "
                  "uuid LANGUAGE sql AS 'SELECT gen_random_uuid()'");
    return forged;
  }

  // The end of each test: the writer writes on, `outboxd cleanup` runs as the owner and
  // as a superuser, the old partitions go, and then what arrived is checked.
  void ExpectOnlyTheWritersEventsArrivedAndCleanupRan(int forged) {
    ASSERT_TRUE(load_->WaitForMore(30));
    for (const std::string& role : {owner_, std::string()}) {
      std::string out;
      EXPECT_EQ(OutboxdAs(role, {"cleanup", "--retention", "1s", "--inbox-retention", "1s"}, &out),
                0)
          << out;
      EXPECT_FALSE(absl::StrContains(out, "upkeep failed")) << out;
      EXPECT_FALSE(absl::StrContains(out, "evil")) << out;  // another role's table: not named
    }
    TestDatabase& db = h_->db();
    EXPECT_TRUE(WaitUntil(absl::Seconds(60), [&] {
      return db.Scalar(
                 "SELECT to_regclass('outbox_past2') IS NULL AND to_regclass('outbox_past1') "
                 "IS NULL AND to_regclass('inbox_past9') IS NULL") == "t";
    })) << h_->relay().Log();
    load_->Stop();

    Committed committed = load_->committed();
    committed.insert(past_.begin(), past_.end());
    std::set<std::string> ids;
    for (const auto& [aggregate, list] : committed) ids.insert(list.begin(), list.end());
    EXPECT_EQ(ExpectDeliveredInOrder(*h_, committed, absl::Seconds(90)), 0u);
    ASSERT_TRUE(h_->WaitForConfirmed(h_->CurrentWalLsn(), absl::Seconds(30))) << h_->relay().Log();
    ASSERT_TRUE(h_->collector().WaitUntilCaughtUp(absl::Seconds(30)));
    const std::vector<CollectedMessage> messages = h_->collector().Messages();
    EXPECT_EQ(messages.size(), ids.size());
    for (const CollectedMessage& m : messages) {
      EXPECT_TRUE(ids.contains(m.Header("id").value_or(""))) << "published: " << m.value;
      EXPECT_FALSE(absl::StrContains(m.value, "forged")) << m.value;
    }
    EXPECT_EQ(db.Scalar("SELECT count(*) FROM outbox_dead_letter"), "0");
    const std::string metrics = h_->Metrics(h_->relay());
    double rejected = 0;
    for (const std::string& reason : kRejections) {
      rejected += MetricValue(metrics, absl::StrCat("outboxd_messages_rejected_total{reason=\"",
                                                    reason, "\"}"))
                      .value_or(0);
    }
    EXPECT_EQ(rejected, forged) << metrics;
    EXPECT_EQ(h_->HealthStatus(h_->relay()), 200);
    std::printf("%zu events of %d transactions delivered in order; %d forged messages rejected\n",
                ids.size(), load_->transactions(), forged);
    EXPECT_EQ(h_->StopRelay(), 0) << h_->relay().Log();
  }

  std::unique_ptr<RelayHarness> h_;
  std::string owner_;
  Committed past_;  // the writer's events in the past days' partitions
  std::unique_ptr<EventLoad> load_;
};

TEST_F(HostileRoles, ARoleWithOnlyConnectPublishesNothingAndStopsNothing) {
  const std::string mallory = h_->db().CreateRole("");
  pg::Connection attacker = Connect(mallory);
  const int forged = TryEveryTrickOfARoleWithOnlyConnect(attacker);
  ExpectOnlyTheWritersEventsArrivedAndCleanupRan(forged);
}

// With CREATE on its own schema it also plants code where outboxd's roles might run
// it: the tables of tests/integration/cleanup_trust_test.cc (a policy for the owner's
// cleanup, an implicit cast for the superuser's), a key table of its own to sign with,
// and an outbox of its own.
TEST_F(HostileRoles, ARoleWithCreateOnItsOwnSchemaRunsNoCodeAsOutboxdsRoles) {
  TestDatabase& db = h_->db();
  const std::string mallory = db.CreateRole("");
  PlantAttackerSchema(db, mallory);
  PlantPolicyTable(db, mallory);
  PlantCastTable(db, mallory);
  pg::Connection attacker = Connect(mallory);
  const absl::StatusOr<pg::Result> planted = attacker.Exec(
      "CREATE TABLE evil.outboxd_emit_key (inner_pad bytea, outer_pad bytea); "
      "INSERT INTO evil.outboxd_emit_key VALUES (decode(repeat('36', 64), 'hex'), "
      "decode(repeat('5c', 64), 'hex')); "
      "CREATE TABLE evil.outbox (id uuid DEFAULT gen_random_uuid(), aggregate_id text, tipo "
      "text, payload jsonb, criado_em timestamptz DEFAULT now()); "
      "INSERT INTO evil.outbox (aggregate_id, tipo, payload) VALUES ('pedido-1', "
      "'pedido.confirmado', '{\"forged\": 10}')");
  ASSERT_TRUE(planted.ok()) << planted.status();
  EmitSigned(attacker, FieldsSql("0b6f0000-0000-4000-8000-0000000000ee", "pedido-1", "{}"),
             "evil.outboxd_emit_key");
  // Its tables into outboxd's: the publication, the outbox's partitions.
  ExpectRefused(attacker, "ALTER PUBLICATION outboxd ADD TABLE evil.outbox");
  ExpectRefused(attacker,
                "CREATE TABLE evil.outbox_p20300101 PARTITION OF public.outbox FOR VALUES FROM "
                "('2030-01-01') TO ('2030-01-02')");
  ExpectRefused(attacker, "ALTER TABLE public.outbox DETACH PARTITION public.outbox_past1");
  const int forged = 1 + TryEveryTrickOfARoleWithOnlyConnect(attacker);
  ExpectOnlyTheWritersEventsArrivedAndCleanupRan(forged);
  ExpectAttackerCodeNeverRan(db, mallory, "evil.outbox_p20200101", h_->relay().Log());
  ExpectAttackerCodeNeverRan(db, mallory, "evil.inbox_p20200101", h_->relay().Log());
}

}  // namespace
}  // namespace outboxd::test
