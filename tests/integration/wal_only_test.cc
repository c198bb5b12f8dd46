// The WAL-only outbox (`outboxd run --source messages|both`, outbox/emitted_event.h)
// end to end: events written by outboxd_emit reach Kafka with the row's message
// contract, survive kill -9 of the relay, keep commit order with rows under
// --source both, and a poison message is dead-lettered like a poison row; a message
// outboxd_emit did not sign is rejected, whoever wrote it. The relay refuses the
// source when max_slot_wal_keep_size could cut the slot's WAL.
#include <csignal>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "integration/hostile_role.h"
#include "pg/connection.h"
#include "support/metrics_text.h"
#include "support/private_cluster.h"
#include "support/relay_harness.h"
#include "support/wait_until.h"

namespace outboxd::test {
namespace {

const std::vector<std::string> kTopics = {"pedido.confirmado"};
constexpr char kTopic[] = "pedido.confirmado";

TEST(WalOnly, EmittedEventsArePublishedWithTheRowsMessageContract) {
  RelayHarness h(kTopics);
  h.StartRelay({"--source", "messages"});
  pg::Connection conn = h.db().Connect();
  ASSERT_TRUE(conn.Exec("BEGIN").ok());
  const std::string first = Emit(conn, "pedido-1", R"({"pedidoId":"pedido-1","n":1})");
  // A row beside it: --source messages publishes only emitted events.
  ASSERT_TRUE(conn.Exec("INSERT INTO outbox (aggregate_id, tipo, payload) "
                        "VALUES ('pedido-1', 'pedido.confirmado', '{\"row\":true}')")
                  .ok());
  const std::string second = Emit(conn, "pedido-2", R"([1,2,3])");
  ASSERT_TRUE(conn.Exec("COMMIT").ok());
  ASSERT_TRUE(h.collector().WaitForCount(2, absl::Seconds(30))) << h.relay().Log();
  ASSERT_TRUE(h.WaitForConfirmed(h.CurrentWalLsn(), absl::Seconds(30)));
  ASSERT_TRUE(h.collector().WaitUntilCaughtUp(absl::Seconds(30)));
  const std::vector<CollectedMessage> messages = h.collector().Messages();
  ASSERT_EQ(messages.size(), 2u) << "the row was published too";
  std::map<std::string, CollectedMessage> by_id;
  for (const CollectedMessage& m : messages) by_id[m.Header("id").value_or("")] = m;
  ASSERT_TRUE(by_id.contains(first) && by_id.contains(second));
  const CollectedMessage& m = by_id[first];
  EXPECT_EQ(m.topic, kTopic);
  EXPECT_EQ(m.key, "pedido-1");
  EXPECT_EQ(m.value, R"({"n": 1, "pedidoId": "pedido-1"})");  // jsonb's rendering
  EXPECT_EQ(m.Header("type"), kTopic);
  EXPECT_EQ(m.Header("aggregate_id"), "pedido-1");
  EXPECT_TRUE(m.Header("lsn").has_value());
  // ISO-8601 with offset, as for a row: 2026-12-03T15:40:00.123456+00:00.
  const std::string created_at = m.Header("created_at").value_or("");
  EXPECT_EQ(created_at.size(), 32u) << created_at;
  EXPECT_EQ(created_at.substr(10, 1), "T") << created_at;
  EXPECT_EQ(created_at.substr(26), "+00:00") << created_at;
  EXPECT_EQ(by_id[second].value, "[1, 2, 3]");
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

TEST(WalOnly, KillNineUnderEmitLoadLosesNothing) {
  RelayHarness h(kTopics);
  h.StartRelay({"--source", "messages"});
  EventLoad load(h.db().Connect());
  const int kKills = 3;
  for (int k = 0; k < kKills; ++k) {
    ASSERT_TRUE(load.WaitForMore(100 + 80 * k));
    h.relay().Signal(SIGKILL);
    ASSERT_EQ(h.relay().Wait(absl::Seconds(10)), 128 + SIGKILL);
    h.StartRelay({"--source", "messages"});
  }
  ASSERT_TRUE(load.WaitForMore(100));
  load.Stop();
  const Committed committed = load.committed();
  size_t events = 0;
  for (const auto& [aggregate, ids] : committed) events += ids.size();
  const size_t duplicates = ExpectDeliveredInOrder(h, committed, absl::Seconds(90));
  std::printf("kill -9 x%d under emit load: %zu events, %d transactions, %zu duplicates\n", kKills,
              events, load.transactions(), duplicates);
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

TEST(WalOnly, BothKeepsCommitOrderAcrossRowsAndMessagesOfOneAggregate) {
  RelayHarness h(kTopics);
  h.StartRelay({"--source", "both"});
  pg::Connection conn = h.db().Connect();
  Committed committed;
  // Per aggregate, a sequence of rows and messages: some transactions only rows, some
  // only messages, most both, interleaved.
  for (int tx = 0; tx < 60; ++tx) {
    const std::string aggregate = absl::StrCat("pedido-", tx % 4);
    ASSERT_TRUE(conn.Exec("BEGIN").ok());
    for (int e = 0; e < 1 + tx % 3; ++e) {
      const std::string payload = absl::StrCat(R"({"tx":)", tx, R"(,"e":)", e, "}");
      if ((tx + e) % 2 == 0) {
        committed[aggregate].push_back(Emit(conn, aggregate, payload));
      } else {
        absl::StatusOr<pg::Result> r = conn.ExecParams(
            "INSERT INTO outbox (aggregate_id, tipo, payload) VALUES ($1, 'pedido.confirmado', "
            "$2::jsonb) RETURNING id::text",
            {aggregate, payload});
        ASSERT_TRUE(r.ok()) << r.status();
        committed[aggregate].push_back(std::string(r->Get(0, 0)));
      }
    }
    ASSERT_TRUE(conn.Exec("COMMIT").ok());
  }
  const size_t duplicates = ExpectDeliveredInOrder(h, committed, absl::Seconds(60));
  EXPECT_EQ(duplicates, 0u);
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

TEST(WalOnly, PoisonMessageIsDeadLetteredLikeAPoisonRowAndForgedOnesAreRejected) {
  RelayHarness h(kTopics);
  h.StartRelay({"--source", "messages"});
  pg::Connection conn = h.db().Connect();
  const std::string poison = "0b6f0000-0000-4000-8000-000000000001";
  EmitSigned(conn, FieldsSql(poison, "pedido-1", "{not json"));
  // Its aggregate's follower is parked behind it; another aggregate goes on.
  const std::string follower = Emit(conn, "pedido-1", R"({"after":"poison"})");
  // Not signed: rejected and counted, never a dead letter (it would park pedido-3).
  EmitRaw(conn, "'garbage'::bytea");
  EmitRaw(conn, UnsignedSql(FieldsSql("0b6f0000-0000-4000-8000-000000000003", "pedido-3", "{}")));
  // Outside any transaction: rejected too.
  EmitRaw(conn, UnsignedSql(FieldsSql("0b6f0000-0000-4000-8000-000000000002", "pedido-3", "{}")),
          false);
  const std::string healthy = Emit(conn, "pedido-3", R"({"ok":true})");
  ASSERT_TRUE(h.collector().WaitForCount(1, absl::Seconds(30))) << h.relay().Log();
  ASSERT_TRUE(h.WaitForConfirmed(h.CurrentWalLsn(), absl::Seconds(30))) << h.relay().Log();
  ASSERT_TRUE(h.collector().WaitUntilCaughtUp(absl::Seconds(30)));
  const std::vector<CollectedMessage> messages = h.collector().Messages();
  ASSERT_EQ(messages.size(), 1u);
  EXPECT_EQ(messages[0].Header("id"), healthy);
  pg::Result letters =
      h.db().Exec("SELECT id, aggregate_id, payload, error FROM outbox_dead_letter ORDER BY seq");
  ASSERT_EQ(letters.rows(), 2) << h.relay().Log();
  EXPECT_EQ(letters.Get(0, 0), poison);
  EXPECT_EQ(letters.Get(0, 1), "pedido-1");
  EXPECT_EQ(letters.Get(0, 2), "{not json");
  EXPECT_EQ(letters.Get(1, 0), follower);
  EXPECT_NE(letters.Get(1, 3).find("follows an earlier dead-lettered event"), std::string::npos);
  const std::string metrics = h.Metrics(h.relay());
  EXPECT_EQ(MetricValue(metrics, "outboxd_messages_rejected_total{reason=\"unsigned\"}"), 2)
      << metrics;
  EXPECT_EQ(MetricValue(metrics, "outboxd_messages_rejected_total{reason=\"non_transactional\"}"),
            1);
  EXPECT_NE(h.relay().Log().find("rejected (unsigned), not published"), std::string::npos);
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

// Dead letters named "message@<lsn>" were filed by outboxd 1.x for content it could
// not read (this version rejects such content instead). Replay never publishes one
// (its bytes are no event, even when, like "[1]", they read as JSON): it exits 1
// naming the statement that deletes it, and once that ran, replays cleanly.
TEST(WalOnly, AnOldUnreadableMessageLetterIsLeftByReplayNamingTheDelete) {
  RelayHarness h(kTopics);
  const std::string id = "message@0/1A2B3C4";
  h.db().Exec(absl::StrCat(
      "INSERT INTO outbox_dead_letter (id, aggregate_id, type, payload, created_at, lsn, topic, "
      "error) VALUES ('",
      id, "', '", id,
      "', '', '[1]', '', '0/1A2B3C4', '', 'outboxd message content does not start with "
      "outboxd-v1')"));
  const std::vector<std::string> replay = h.ReplayArgs({"--topic", kTopic});
  std::string out;
  EXPECT_EQ(h.RunOutboxd(replay, &out), 1) << out;
  EXPECT_NE(out.find(absl::StrCat("not replayed: ", id,
                                  ": an outboxd message whose content cannot be read")),
            std::string::npos)
      << out;
  const std::string delete_sql =
      absl::StrCat("DELETE FROM \"outbox_dead_letter\" WHERE id = '", id, "'");
  EXPECT_NE(out.find(delete_sql), std::string::npos) << out;
  // The replay has exited: whatever it published is at the broker by now.
  ASSERT_TRUE(h.collector().WaitUntilCaughtUp(absl::Seconds(30)));
  EXPECT_EQ(h.collector().Count(), 0u) << "the unreadable content was published";
  h.db().Exec(delete_sql);
  EXPECT_EQ(h.RunOutboxd(replay, &out), 0) << out;
}

// Peak resident memory of a process (VmHWM), in MiB; -1 when unreadable.
double PeakRssMib(pid_t pid) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    double kib = 0;
    if (line.rfind("VmHWM:", 0) == 0 && absl::SimpleAtod(line.substr(6, line.size() - 9), &kib)) {
      return kib / 1024;
    }
  }
  return -1;
}

// Two roles with nothing but CONNECT (and what PUBLIC has), the writer also granted
// EXECUTE on outboxd_emit, each connected once the relay reads --source messages.
struct WriterAndAttacker {
  pg::Connection writer;
  pg::Connection attacker;
};
WriterAndAttacker StartRelayWithWriterAndAttacker(RelayHarness& h) {
  const std::string writer_role = h.db().CreateRole("");
  h.db().Exec(
      absl::StrCat("GRANT EXECUTE ON FUNCTION outboxd_emit(text, text, jsonb) TO ", writer_role));
  const std::string mallory = h.db().CreateRole("");
  h.StartRelay({"--source", "messages"});
  return {*pg::Connection::Open(h.db().ConninfoWith("user=" + writer_role)),
          *pg::Connection::Open(h.db().ConninfoWith("user=" + mallory))};
}

// Issue 27 point 2. A role with nothing but CONNECT (and what PUBLIC has) tries to
// publish while the relay runs: events it forges with pg_logical_emit_message (its own
// id and created_at for a real aggregate, a non-UUID id, a garbage timestamp, bytes
// that are not UTF-8, a made-up signature), reading the key, calling outboxd_emit
// without EXECUTE, and messages too large to publish. None is published or
// dead-lettered, the rejection counter moves, and the authorised writer's events of
// the same aggregate, before and after, arrive in order, all of them. The database is
// one where PUBLIC kept pg_logical_emit_message (setup by a non-superuser, or with
// --keep-public-emit-message).
TEST(WalOnly, ARoleWithOnlyConnectCannotPublishAndLegitimateEventsKeepFlowing) {
  RelayHarness h(kTopics);
  GrantEmitMessageToPublic(h.db());
  auto [writer, attacker] = StartRelayWithWriterAndAttacker(h);
  Committed committed;
  committed["pedido-1"].push_back(Emit(writer, "pedido-1", R"({"n":1})"));

  // (a) Forged events for the writer's aggregate.
  const std::string forged_id = "0b6f0000-0000-4000-8000-0000000000ff";
  EmitRaw(attacker, UnsignedSql(FieldsSql(forged_id, "pedido-1", R"({"forged":1})",
                                          "1999-01-01 00:00:00+00")));
  EmitRaw(attacker, UnsignedSql(FieldsSql("not-a-uuid", "pedido-1", R"({"forged":2})")));
  EmitRaw(attacker, UnsignedSql(FieldsSql(forged_id, "pedido-1", R"({"forged":3})", "garbage")));
  EmitRaw(attacker, UnsignedSql("'\\xfffe'::bytea"));
  EmitRaw(attacker, absl::StrCat("'outboxd-v2'::bytea || '\\x00'::bytea || '", std::string(64, 'a'),
                                 "'::bytea || '\\x00'::bytea || ",
                                 FieldsSql(forged_id, "pedido-1", R"({"forged":4})")));
  EmitRaw(attacker, absl::StrCat("'outboxd-v2'::bytea || '\\x00'::bytea || '", std::string(64, 'a'),
                                 "'::bytea || '\\x00'::bytea || '\\xc328'::bytea"));
  // (b) The key, and the function, are out of its reach.
  absl::StatusOr<pg::Result> key = attacker.Exec("SELECT * FROM outboxd_emit_key");
  EXPECT_EQ(pg::SqlStateOf(key.status()), "42501") << key.status();
  absl::StatusOr<pg::Result> call =
      attacker.Exec("SELECT outboxd_emit('pedido-1', 'pedido.confirmado', '{\"forged\":5}')");
  EXPECT_EQ(pg::SqlStateOf(call.status()), "42501") << call.status();
  // (c) Too large to publish: 8 MiB with outboxd's prefix; 64 MiB under another one
  // (some other consumer's message, which the relay skips) goes by too.
  const double rss_before = PeakRssMib(h.relay().pid());
  EmitRaw(attacker, "convert_to(repeat('x', 8 << 20), 'UTF8')");
  ASSERT_TRUE(attacker
                  .Exec("SELECT pg_logical_emit_message(true, 'other', "
                        "convert_to(repeat('y', 64 << 20), 'UTF8'))")
                  .ok());
  committed["pedido-1"].push_back(Emit(writer, "pedido-1", R"({"n":2})"));
  committed["pedido-2"].push_back(Emit(writer, "pedido-2", R"({"n":3})"));

  EXPECT_EQ(ExpectDeliveredInOrder(h, committed, absl::Seconds(60)), 0u);
  ASSERT_TRUE(h.WaitForConfirmed(h.CurrentWalLsn(), absl::Seconds(30))) << h.relay().Log();
  ASSERT_TRUE(h.collector().WaitUntilCaughtUp(absl::Seconds(30)));
  EXPECT_EQ(h.collector().Messages().size(), 3u) << "a forged event was published";
  EXPECT_EQ(h.db().Scalar("SELECT count(*) FROM outbox_dead_letter"), "0");
  const std::string metrics = h.Metrics(h.relay());
  double rejected = 0;
  for (const char* reason : {"unsigned", "bad_signature", "too_large"}) {
    rejected += MetricValue(metrics, absl::StrCat("outboxd_messages_rejected_total{reason=\"",
                                                  reason, "\"}"))
                    .value_or(0);
  }
  EXPECT_EQ(rejected, 7) << metrics;
  std::printf("relay peak RSS: %.1f MiB before the 8 and 64 MiB messages, %.1f after\n", rss_before,
              PeakRssMib(h.relay().pid()));
  // What bounds that memory is the REVOKE the relay names at start.
  EXPECT_NE(h.relay().Log().find("every role may call pg_logical_emit_message"), std::string::npos);
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

// Issue 27 point 2, the memory: setup as a superuser (the harness's) took
// pg_logical_emit_message from PUBLIC, so a role with only CONNECT cannot put 150 MiB
// in the relay's stream (a 150 MiB message under another prefix, streamed: 317 MiB
// peak, libpq holding it twice), while outboxd_emit, calling it as its owner, still
// writes events for the roles granted EXECUTE. Nothing to warn about at start.
TEST(WalOnly, SetupByASuperuserLeavesNoRoleButOutboxdEmitWritingLogicalMessages) {
  RelayHarness h(kTopics);
  auto [writer, attacker] = StartRelayWithWriterAndAttacker(h);
  const double rss_before = PeakRssMib(h.relay().pid());
  for (const char* sql : {"SELECT pg_logical_emit_message(true, 'other', "
                          "convert_to(repeat('y', 150 << 20), 'UTF8'))",
                          "SELECT pg_logical_emit_message(false, 'other', repeat('y', 150 << 20))",
                          "SELECT pg_logical_emit_message(true, 'outboxd', 'outboxd-v2'::bytea)"}) {
    EXPECT_EQ(pg::SqlStateOf(attacker.Exec(sql).status()), "42501") << sql;
  }
  Committed committed;
  committed["pedido-1"].push_back(Emit(writer, "pedido-1", R"({"n":1})"));
  committed["pedido-1"].push_back(Emit(writer, "pedido-1", R"({"n":2})"));
  EXPECT_EQ(ExpectDeliveredInOrder(h, committed, absl::Seconds(30)), 0u);
  const double rss_after = PeakRssMib(h.relay().pid());
  std::printf("relay peak RSS: %.1f MiB before the refused 150 MiB messages, %.1f after\n",
              rss_before, rss_after);
  EXPECT_LT(rss_after, rss_before + 32) << "a refused message still reached the relay";
  EXPECT_EQ(h.relay().Log().find("every role may call pg_logical_emit_message"), std::string::npos)
      << h.relay().Log();
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

// A role with CREATE on the database makes a schema named after the relay's role
// ("$user" comes first in the default search_path) holding a key table of its own, and
// signs forged events with that key. The relay reads the key beside the outbox its
// publication covers, owned by that table's owner: the forgeries are rejected.
TEST(WalOnly, AKeyPlantedEarlierInTheRelaysSearchPathIsNeverRead) {
  RelayHarness h(kTopics);
  GrantEmitMessageToPublic(h.db());
  const std::string intruder = h.db().CreateRole("");
  h.db().Exec(absl::StrCat("GRANT CREATE ON DATABASE \"", h.db().name(), "\" TO ", intruder));
  pg::Connection attacker = *pg::Connection::Open(h.db().ConninfoWith("user=" + intruder));
  const std::string relay_role = h.db().Scalar("SELECT current_user");
  ASSERT_TRUE(attacker
                  .Exec(absl::StrCat(
                      "CREATE SCHEMA ", relay_role, "; CREATE TABLE ", relay_role,
                      ".outboxd_emit_key (id int PRIMARY KEY, inner_pad bytea NOT NULL, "
                      "outer_pad bytea NOT NULL, unsigned_before pg_lsn NOT NULL); INSERT INTO ",
                      relay_role,
                      ".outboxd_emit_key VALUES (1, decode(repeat('36', 64), 'hex'), "
                      "decode(repeat('5c', 64), 'hex'), 'FFFFFFFF/FFFFFFFF')"))
                  .ok());
  h.StartRelay({"--source", "messages"});
  pg::Connection app = h.db().Connect();
  Committed committed;
  committed["pedido-1"].push_back(Emit(app, "pedido-1", R"({"n":1})"));
  EmitSigned(attacker, FieldsSql("0b6f0000-0000-4000-8000-0000000000ee", "pedido-1", "{}"),
             relay_role + ".outboxd_emit_key");
  EmitRaw(attacker,
          UnsignedSql(FieldsSql("0b6f0000-0000-4000-8000-0000000000ef", "pedido-1", "{}")));
  committed["pedido-1"].push_back(Emit(app, "pedido-1", R"({"n":2})"));
  EXPECT_EQ(ExpectDeliveredInOrder(h, committed, absl::Seconds(30)), 0u);
  ASSERT_TRUE(h.WaitForConfirmed(h.CurrentWalLsn(), absl::Seconds(30))) << h.relay().Log();
  ASSERT_TRUE(h.collector().WaitUntilCaughtUp(absl::Seconds(30)));
  EXPECT_EQ(h.collector().Messages().size(), 2u) << "an event signed with the planted key";
  const std::string metrics = h.Metrics(h.relay());
  EXPECT_EQ(MetricValue(metrics, "outboxd_messages_rejected_total{reason=\"bad_signature\"}"), 1);
  EXPECT_EQ(MetricValue(metrics, "outboxd_messages_rejected_total{reason=\"unsigned\"}"), 1);
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

// outboxd 1.x's install: an unsigned outboxd_emit that every role may call, no key.
constexpr char kUnsignedFunction[] = R"sql(
DROP TABLE outboxd_emit_key;
CREATE OR REPLACE FUNCTION outboxd_emit(aggregate_id text, type text, payload jsonb)
RETURNS uuid LANGUAGE plpgsql VOLATILE AS $f$
DECLARE
  event_id uuid := gen_random_uuid();
  sep CONSTANT bytea := '\x00'::bytea;
BEGIN
  PERFORM pg_logical_emit_message(true, 'outboxd', convert_to('outboxd-v1', 'UTF8') || sep ||
    convert_to(event_id::text, 'UTF8') || sep || convert_to($1, 'UTF8') || sep ||
    convert_to($2, 'UTF8') || sep || convert_to(to_char(now() AT TIME ZONE 'UTC',
    'YYYY-MM-DD HH24:MI:SS.US') || '+00', 'UTF8') || sep || convert_to($3::text, 'UTF8'));
  RETURN event_id;
END
$f$;
GRANT EXECUTE ON FUNCTION outboxd_emit(text, text, jsonb) TO PUBLIC)sql";

// `outboxd setup` run again on a 1.x install upgrades it: the function signs and
// runs as its owner, PUBLIC loses EXECUTE, and what the old function wrote before the
// upgrade is still published; unsigned content written after it is rejected.
TEST(WalOnly, SetupUpgradesAnUnsignedInstallAndItsBacklogIsStillPublished) {
  RelayHarness h(kTopics);
  h.db().Exec(kUnsignedFunction);
  const std::string someone = h.db().CreateRole("");
  pg::Connection app = h.db().Connect();
  Committed committed;
  committed["pedido-1"].push_back(Emit(app, "pedido-1", R"({"before":1})"));
  committed["pedido-1"].push_back(Emit(app, "pedido-1", R"({"before":2})"));
  std::string out;
  ASSERT_EQ(h.RunOutboxd({"setup", "--pg", h.db().conninfo(), "--slot", h.slot()}, &out), 0)
      << out;
  EXPECT_NE(out.find("now signs its events"), std::string::npos) << out;
  EXPECT_EQ(h.db().Scalar("SELECT prosecdef::text || has_function_privilege('" + someone +
                          "', 'outboxd_emit(text, text, jsonb)', 'EXECUTE')::text "
                          "FROM pg_proc WHERE proname = 'outboxd_emit'"),
            "truefalse");
  EmitRaw(app, UnsignedSql(FieldsSql("0b6f0000-0000-4000-8000-000000000004", "pedido-1", "{}")));
  committed["pedido-1"].push_back(Emit(app, "pedido-1", R"({"after":1})"));
  // Setup again changes nothing: the key, and so the horizon, stay.
  const std::string key = h.db().Scalar("SELECT outer_pad::text || unsigned_before FROM outboxd_emit_key");
  ASSERT_EQ(h.RunOutboxd({"setup", "--pg", h.db().conninfo(), "--slot", h.slot()}, &out), 0)
      << out;
  EXPECT_EQ(h.db().Scalar("SELECT outer_pad::text || unsigned_before FROM outboxd_emit_key"), key);
  h.StartRelay({"--source", "messages"});
  EXPECT_EQ(ExpectDeliveredInOrder(h, committed, absl::Seconds(30)), 0u);
  ASSERT_TRUE(h.WaitForConfirmed(h.CurrentWalLsn(), absl::Seconds(30))) << h.relay().Log();
  ASSERT_TRUE(h.collector().WaitUntilCaughtUp(absl::Seconds(30)));
  EXPECT_EQ(h.collector().Messages().size(), 3u);
  EXPECT_EQ(MetricValue(h.Metrics(h.relay()), "outboxd_messages_rejected_total{reason=\"unsigned\"}"),
            1);
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

// No table holds the events: status shows the slot's backlog, never row counts, and
// cannot judge --max-age.
TEST(WalOnly, StatusShowsTheSlotsBacklogInsteadOfRowCounts) {
  RelayHarness h(kTopics);
  pg::Connection conn = h.db().Connect();
  for (int i = 0; i < 10; ++i) Emit(conn, "pedido-1", R"({"waiting":true})");
  std::string out;
  ASSERT_EQ(h.RunOutboxd({"status", "--pg", h.db().conninfo(), "--slot", h.slot(), "--source",
                          "messages", "--json"},
                         &out),
            0)
      << out;
  EXPECT_NE(out.find("\"source\":\"messages\""), std::string::npos) << out;
  EXPECT_EQ(out.find("\"unacked\""), std::string::npos) << out;
  const size_t at = out.find("\"backlog_bytes\":");
  ASSERT_NE(at, std::string::npos) << out;
  int64_t backlog = 0;
  ASSERT_TRUE(
      absl::SimpleAtoi(out.substr(at + 16, out.find_first_of(",}", at) - at - 16), &backlog))
      << out;
  EXPECT_GT(backlog, 0) << out;
  EXPECT_EQ(h.RunOutboxd({"status", "--pg", h.db().conninfo(), "--slot", h.slot(), "--source",
                          "messages", "--max-age", "1m"},
                         &out),
            2)
      << out;
  EXPECT_NE(out.find("alert on backlog_bytes"), std::string::npos) << out;
}

TEST(WalOnly, RefusesMessagesWhenTheSlotCanLoseWalUnlessAllowed) {
  PrivateCluster cluster("max_slot_wal_keep_size = 1GB");
  RelayHarness h(kTopics, 3, cluster.conninfo());
  for (const char* source : {"messages", "both"}) {
    auto relay = h.SpawnRelay({"--source", source});
    std::optional<int> code = relay->Wait(absl::Seconds(30));
    ASSERT_TRUE(code.has_value()) << relay->Log();
    EXPECT_EQ(*code, 2) << relay->Log();
    EXPECT_NE(relay->Log().find("max_slot_wal_keep_size = 1024MB"), std::string::npos)
        << relay->Log();
    EXPECT_NE(relay->Log().find("--allow-wal-only-with-slot-limit"), std::string::npos)
        << relay->Log();
  }
  // The table source is not concerned: the rows stay to be backfilled.
  h.StartRelay();
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
  h.StartRelay({"--source", "messages", "--allow-wal-only-with-slot-limit"});
  pg::Connection conn = h.db().Connect();
  const std::string id = Emit(conn, "pedido-1", "{}");
  ASSERT_TRUE(h.collector().WaitForCount(1, absl::Seconds(30))) << h.relay().Log();
  EXPECT_EQ(h.collector().Messages()[0].Header("id"), id);
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

}  // namespace
}  // namespace outboxd::test
