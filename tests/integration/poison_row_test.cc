// Issue 27, the poison-row test: no single row stalls the relay, and the relay never
// says ok while something is stuck. Each kind of row the dead-letter table could not
// take (points 3, 6, 7) is a dead letter now while every other aggregate flows within
// seconds, and replay republishes its original bytes; a letter the table still refuses
// (a trigger raising what the 6.4 kB key's index raised: SQLSTATE 54000) makes /healthz,
// /readyz, the age metric and the in-flight gauge show the stuck transaction until the
// cause is gone.
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "support/metrics_text.h"
#include "support/relay_harness.h"
#include "support/wait_until.h"

namespace outboxd::test {
namespace {

using ::testing::HasSubstr;

const std::vector<std::string> kTopics = {"pedido.confirmado"};

void Exec(pg::Connection& conn, const std::string& sql,
          const std::vector<std::optional<std::string>>& params = {}) {
  absl::StatusOr<pg::Result> r = conn.ExecParams(sql, params);
  ASSERT_TRUE(r.ok()) << r.status() << "\n" << sql;
}

void InsertRow(pg::Connection& conn, const std::optional<std::string>& aggregate,
               const std::string& payload, const std::string& id = "") {
  Exec(conn,
       id.empty() ? "INSERT INTO outbox (aggregate_id, tipo, payload) VALUES ($1, "
                    "'pedido.confirmado', $2::jsonb)"
                  : "INSERT INTO outbox (aggregate_id, tipo, payload, id) VALUES ($1, "
                    "'pedido.confirmado', $2::jsonb, $3::uuid)",
       id.empty() ? std::vector<std::optional<std::string>>{aggregate, payload}
                  : std::vector<std::optional<std::string>>{aggregate, payload, id});
}

// Keys of the delivered messages, in arrival order.
std::vector<std::string> Keys(RelayHarness& h) {
  std::vector<std::string> keys;
  for (const CollectedMessage& m : h.collector().Messages()) keys.push_back(m.key);
  return keys;
}

bool Delivered(RelayHarness& h, const std::string& key) {
  for (const std::string& k : Keys(h)) {
    if (k == key) return true;
  }
  return false;
}

// Waits until every key is delivered (partitions arrive in no common order).
bool AllDelivered(RelayHarness& h, const std::vector<std::string>& keys, absl::Duration timeout) {
  return WaitUntil(timeout, [&] {
    for (const std::string& key : keys) {
      if (!Delivered(h, key)) return false;
    }
    return true;
  });
}

// Fixes each payload that was poison and replays every letter: `expect_exit` is the
// replay's exit code; the replay's output.
std::string FixPayloadsAndReplay(RelayHarness& h, int expect_exit) {
  h.db().Exec("UPDATE outbox_dead_letter SET payload = '{\"fixed\": true}' WHERE payload = '42'");
  std::string out;
  EXPECT_EQ(h.RunOutboxd(h.ReplayArgs(), &out), expect_exit) << out;
  return out;
}

TEST(PoisonRow, EveryKindOfRowIsADeadLetterWhileOtherAggregatesFlowAndReplayKeepsItsBytes) {
  RelayHarness h(kTopics);
  auto conn = h.db().Connect();
  // An adopted table: NULL allowed in the aggregate and payload, ids not unique.
  Exec(conn,
       "ALTER TABLE outbox ALTER COLUMN aggregate_id DROP NOT NULL, ALTER COLUMN payload DROP "
       "NOT NULL, DROP CONSTRAINT outbox_id_key");
  h.StartRelay();
  const std::string huge =
      h.db().Scalar("SELECT string_agg(md5(i::text), '') FROM generate_series(1, 200) i");
  InsertRow(conn, huge, "42");  // 6.4 kB, and a payload the relay refuses (a JSON scalar)
  InsertRow(conn, "ok-1", R"({"n": 1})");
  InsertRow(conn, std::nullopt, R"({"n": 2})");  // NULL aggregate
  InsertRow(conn, "ok-2", R"({"n": 3})");
  const std::string same = "0b6f7e4c-0000-4000-8000-000000000007";
  InsertRow(conn, "dup-a", "42", same);  // one id, two aggregates, both poison
  InsertRow(conn, "dup-b", "42", same);
  InsertRow(conn, "ok-3", R"({"n": 4})");

  ASSERT_TRUE(AllDelivered(h, {"ok-1", "ok-2", "ok-3"}, absl::Seconds(20)))
      << "later aggregates must flow past every poison row\n"
      << h.relay().Log();
  ASSERT_TRUE(WaitForMetric(h.relay(), "outboxd_events_dead_lettered_total", 4, absl::Seconds(10)))
      << h.relay().Log();
  EXPECT_EQ(h.db().Scalar("SELECT count(*) FROM outbox_dead_letter"), "4");
  EXPECT_EQ(h.db().Scalar("SELECT string_agg(aggregate_id, ',' ORDER BY aggregate_id) FROM "
                          "outbox_dead_letter WHERE id = '" +
                          same + "'"),
            "dup-a,dup-b");
  EXPECT_EQ(h.db().Scalar("SELECT count(*) FROM outbox_dead_letter WHERE aggregate_id LIKE "
                          "'null@%' AND error LIKE 'a mapped column is NULL%'"),
            "1");
  // Its error line quotes the 6.4 kB key's first 200 bytes and its length, not all of it.
  EXPECT_THAT(h.relay().Log(), HasSubstr(huge.substr(0, 200) + "\u2026 (6400 bytes)"));
  EXPECT_THAT(h.relay().Log(), ::testing::Not(HasSubstr(huge)));
  EXPECT_EQ(HttpGetFromLog(h.relay(), "/healthz").first, 200) << "nothing is stuck";
  EXPECT_EQ(ScrapeMetric(h.relay(), "outboxd_events_in_flight").value_or(-1), 0.0);

  // Until dealt with, status counts them (this slot's letters).
  std::string status;
  EXPECT_TRUE(WaitForStatus(h, "\"dead_letter\":4,", absl::Seconds(10), &status)) << status;

  // list shows what the table holds: the 6.4 kB key as its stand-in, on one line.
  std::string listed;
  EXPECT_EQ(
      h.RunOutboxd({"dead-letter", "list", "--slot", h.slot(), "--pg", h.db().conninfo()}, &listed),
      0);
  EXPECT_THAT(listed, HasSubstr(huge.substr(0, 200) + "~sha256:"));
  EXPECT_THAT(listed, ::testing::Not(HasSubstr(huge)));

  // Replayed with the original keys; the NULL aggregate's letter stays until a person
  // sets it.
  const std::string out = FixPayloadsAndReplay(h, 1);
  EXPECT_THAT(out, HasSubstr("id or aggregate_id was NULL"));
  EXPECT_TRUE(AllDelivered(h, {huge, "dup-a", "dup-b"}, absl::Seconds(20))) << out;
  EXPECT_EQ(h.db().Scalar("SELECT count(*) FROM outbox_dead_letter"), "1");
  EXPECT_TRUE(WaitForStatus(h, "\"dead_letter\":1,", absl::Seconds(10), &status)) << status;
}

// A message's fields are bytes (pg_logical_emit_message takes bytea): an aggregate that
// is not UTF-8, the one value a row in a UTF-8 database cannot hold. Such a message
// made the dead-letter insert fail (exit 2 at every restart). No role but outboxd_emit
// writes a message the relay publishes now (docs/security.md, "Who may publish an
// event"): this one, unsigned, is a counted rejection, never a dead letter, and the
// others flow. A signed one with such a field is refused the same way (invalid_field:
// EmittedEvent tests).
TEST(PoisonRow, AMessageWhoseAggregateIsNotUtf8IsRejectedAndTheOthersFlow) {
  RelayHarness h(kTopics);
  auto conn = h.db().Connect();
  h.StartRelay({"--source", "both"});
  InsertRow(conn, "ok-1", R"({"n": 1})");
  Exec(conn,
       "SELECT pg_logical_emit_message(true, 'outboxd', 'outboxd-v1'::bytea || '\\x00'::bytea || "
       "'0b6f7e4c-0000-4000-8000-0000000000ff'::bytea || '\\x00'::bytea || "
       "'\\x6167672dfffe'::bytea || '\\x00'::bytea || 'pedido.confirmado'::bytea || "
       "'\\x00'::bytea || '2026-12-03 15:40:00.5+00'::bytea || '\\x00'::bytea || '42'::bytea)");
  InsertRow(conn, "ok-2", R"({"n": 2})");
  ASSERT_TRUE(AllDelivered(h, {"ok-1", "ok-2"}, absl::Seconds(20))) << h.relay().Log();
  ASSERT_TRUE(WaitForMetric(h.relay(), "outboxd_messages_rejected_total{reason=\"unsigned\"}", 1,
                            absl::Seconds(10)))
      << h.relay().Log();
  EXPECT_EQ(h.db().Scalar("SELECT count(*) FROM outbox_dead_letter"), "0");
  EXPECT_TRUE(h.relay().Running()) << h.relay().Log();
}

// The relay, stuck at one position, says so: /healthz and /readyz 503 naming the
// error (`reason`), the age metric from the stuck transaction's commit and an event in
// flight (so the age and stall alerts fire); what follows (`follower`) is not published.
void ExpectStuck(RelayHarness& h, const std::string& reason, const std::string& follower) {
  // Between two sessions it also answers 503 "not streaming": wait for the reason.
  std::pair<int, std::string> answer;
  ASSERT_TRUE(WaitUntil(absl::Seconds(20),
                        [&] {
                          answer = HttpGetFromLog(h.relay(), "/healthz");
                          return absl::StrContains(answer.second, "stuck:");
                        }))
      << answer.second << "\n"
      << h.relay().Log();
  const auto& [status, body] = answer;
  EXPECT_EQ(status, 503);
  EXPECT_THAT(body, HasSubstr("stuck: 3 sessions in a row failed at"));
  EXPECT_THAT(body, HasSubstr(reason));
  const auto [ready, not_ready] = HttpGetFromLog(h.relay(), "/readyz");
  EXPECT_EQ(ready, 503);
  EXPECT_THAT(not_ready, HasSubstr("stuck:")) << "not ready either";
  ASSERT_TRUE(WaitForMetric(h.relay(), "outboxd_oldest_unacked_age_seconds", 1, absl::Seconds(10)))
      << h.relay().Log();
  EXPECT_GE(ScrapeMetric(h.relay(), "outboxd_events_in_flight").value_or(0), 1);
  EXPECT_FALSE(Delivered(h, follower));
}

// Dealt with: what follows flows, and the signals clear.
void ExpectNoLongerStuck(RelayHarness& h, const std::string& follower) {
  ASSERT_TRUE(WaitUntil(absl::Seconds(60), [&] { return Delivered(h, follower); }))
      << h.relay().Log();
  auto [healthy, why] = WaitForHttpStatus(h.relay(), "/healthz", 200, absl::Seconds(10));
  EXPECT_EQ(healthy, 200) << why;
  EXPECT_EQ(ScrapeMetric(h.relay(), "outboxd_events_in_flight").value_or(-1), 0.0);
  EXPECT_EQ(ScrapeMetric(h.relay(), "outboxd_oldest_unacked_age_seconds").value_or(-1), 0.0);
  EXPECT_THAT(h.relay().Log(), HasSubstr("no longer stuck"));
}

TEST(PoisonRow, ALetterTheTableRefusesMakesTheRelayStuckAndUnhealthyUntilFixed) {
  RelayHarness h(kTopics);
  auto conn = h.db().Connect();
  h.db().Exec(
      "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION "
      "'index row size 6424 exceeds btree version 4 maximum 2704' USING ERRCODE = '54000'; "
      "END $$; CREATE TRIGGER refuse BEFORE INSERT ON outbox_dead_letter FOR EACH ROW EXECUTE "
      "FUNCTION refuse()");
  h.StartRelay();
  InsertRow(conn, "stuck", "42");
  InsertRow(conn, "ok-1", R"({"n": 1})");
  ExpectStuck(h, "exceeds btree version 4 maximum 2704", "ok-1");

  Exec(conn, "DROP TRIGGER refuse ON outbox_dead_letter");
  ExpectNoLongerStuck(h, "ok-1");
  EXPECT_EQ(h.db().Scalar("SELECT aggregate_id FROM outbox_dead_letter"), "stuck");
}

// The duplicate-id kind where it still cannot be stored: a dead-letter table an older
// setup made keeps ids unique across aggregates, so the second aggregate's letter is
// refused (stored anyway, the first aggregate's would stand for both and the second's
// event would be lost). The relay stops there and says so, naming `outboxd setup`,
// until setup has migrated the table; then both letters are stored.
TEST(PoisonRow, ADuplicateIdAnOlderTableRefusesMakesTheRelayStuckUntilSetupMigratesIt) {
  RelayHarness h(kTopics);
  auto conn = h.db().Connect();
  Exec(conn, "ALTER TABLE outbox DROP CONSTRAINT outbox_id_key");
  Exec(conn, "ALTER TABLE outbox_dead_letter ADD CONSTRAINT outbox_dead_letter_id_key UNIQUE (id)");
  h.StartRelay();
  const std::string same = "0b6f7e4c-0000-4000-8000-000000000008";
  InsertRow(conn, "dup-a", "42", same);
  InsertRow(conn, "dup-b", "42", same);
  InsertRow(conn, "ok-1", R"({"n": 1})");
  ExpectStuck(h, "run outboxd setup to migrate it", "ok-1");

  std::string out;
  ASSERT_EQ(h.RunOutboxd({"setup", "--pg", h.db().conninfo(), "--slot", h.slot()}, &out), 0) << out;
  EXPECT_THAT(out, HasSubstr("table outbox_dead_letter migrated"));
  ExpectNoLongerStuck(h, "ok-1");
  EXPECT_EQ(h.db().Scalar("SELECT string_agg(aggregate_id, ',' ORDER BY aggregate_id) FROM "
                          "outbox_dead_letter"),
            "dup-a,dup-b");
}

}  // namespace
}  // namespace outboxd::test
