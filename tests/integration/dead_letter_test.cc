// Poison events (issue 3, point 4): an event that can never be published goes with
// its error to the dead-letter table, later events of its aggregate follow it there,
// other aggregates flow on and the slot advances; `outboxd dead-letter replay`
// republishes them in order and removes them.
#include <algorithm>
#include <csignal>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "support/doc_commands.h"
#include "support/metrics_text.h"
#include "support/relay_harness.h"

namespace outboxd::test {
namespace {

const std::vector<std::string> kTopics = {"pedido.confirmado"};

void Insert(pg::Connection& conn, const std::string& aggregate, const std::string& payload,
            const std::string& type = "pedido.confirmado") {
  auto r = conn.ExecParams("INSERT INTO outbox (aggregate_id, tipo, payload) VALUES ($1, $2, $3)",
                           {aggregate, type, payload});
  ASSERT_TRUE(r.ok()) << r.status();
}

std::vector<std::string> DeadLetterAggregates(TestDatabase& db) {
  std::vector<std::string> out;
  pg::Result r =
      db.Exec("SELECT aggregate_id || ':' || payload FROM outbox_dead_letter ORDER BY seq");
  for (int i = 0; i < r.rows(); ++i) out.emplace_back(r.Get(i, 0));
  return out;
}

// A dead letter written straight into the table, as the relay would have.
void InsertDeadLetter(TestDatabase& db, const std::string& aggregate, const std::string& payload) {
  auto conn = db.Connect();
  auto r = conn.ExecParams(
      "INSERT INTO outbox_dead_letter (id, aggregate_id, type, payload, created_at, lsn, topic, "
      "error) VALUES (gen_random_uuid()::text, $1, 'pedido.confirmado', $2, "
      "'2026-12-03T10:00:00+00:00', '0/16B3748', 'pedido.confirmado', 'test')",
      {aggregate, payload});
  ASSERT_TRUE(r.ok()) << r.status();
}

TEST(DeadLetter, PoisonEventsGoToTheTableTheirAggregateFollowsOthersFlow) {
  RelayHarness h(kTopics);
  h.StartRelay({"--kafka", "message.max.bytes=3000"});
  auto conn = h.db().Connect();
  Insert(conn, "ok-1", R"({"n": 1})");
  Insert(conn, "bad", "42");           // a JSON scalar
  Insert(conn, "bad", R"({"n": 2})");  // follows it
  Insert(conn, "ok-2", R"({"n": 3})");
  Insert(conn, "topic", R"({"n": 4})", "no spaces allowed!");  // invalid topic name
  Insert(conn, "big", absl::StrCat(R"({"blob": ")", std::string(5000, 'x'), R"("})"));  // too large
  Insert(conn, "ok-1", R"({"n": 5})");
  ASSERT_TRUE(h.collector().WaitForCount(3, absl::Seconds(30))) << h.relay().Log();
  pg::Lsn head = h.CurrentWalLsn();
  EXPECT_TRUE(h.WaitForConfirmed(head, absl::Seconds(15)))
      << "the slot must advance past dead-lettered events\n"
      << h.relay().Log();
  ASSERT_TRUE(WaitForMetric(h.relay(), "outboxd_events_dead_lettered_total", 4, absl::Seconds(30)))
      << h.relay().Log();
  std::vector<std::string> letters = DeadLetterAggregates(h.db());
  ASSERT_EQ(letters.size(), 4u) << h.relay().Log();
  EXPECT_EQ(letters[0], "bad:42");
  EXPECT_EQ(letters[1], R"(bad:{"n": 2})");
  EXPECT_EQ(letters[2].substr(0, 6), "topic:");
  EXPECT_EQ(letters[3].substr(0, 4), "big:");
  EXPECT_EQ(h.collector().Messages().size(), 3u);
  EXPECT_NE(h.db()
                .Scalar("SELECT error FROM outbox_dead_letter WHERE aggregate_id = 'bad' "
                        "ORDER BY seq LIMIT 1")
                .find("scalar"),
            std::string::npos);
  std::string metrics = h.Metrics(h.relay());
  EXPECT_NE(metrics.find("outboxd_events_dead_lettered_total 4\n"), std::string::npos) << metrics;
  // Issue 20 point 11: publish errors are the two the producer refused (topic name,
  // size), not the scalar payload nor the event that followed it; the help says so.
  EXPECT_NE(metrics.find("outboxd_publish_errors_total 2\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("# HELP outboxd_publish_errors_total Events the producer or the broker "
                         "refused"),
            std::string::npos)
      << metrics;

  // list shows them.
  std::string out;
  EXPECT_EQ(
      h.RunOutboxd({"dead-letter", "list", "--slot", h.slot(), "--pg", h.db().conninfo()}, &out), 0)
      << out;
  EXPECT_NE(out.find("4 dead letter(s)"), std::string::npos) << out;
  // Issue 20 point 4: replay checks the payload again, as the relay does: the scalar
  // is not published, stays with its error and keeps its aggregate blocked (exit 1).
  EXPECT_EQ(h.RunOutboxd(h.ReplayArgs({"--aggregate", "bad"}), &out), 1) << out;
  EXPECT_NE(out.find("not replayed: bad: "), std::string::npos) << out;
  EXPECT_EQ(DeadLetterAggregates(h.db()).size(), 4u);
  EXPECT_NE(h.db()
                .Scalar("SELECT error FROM outbox_dead_letter WHERE aggregate_id = 'bad' "
                        "ORDER BY seq LIMIT 1")
                .find("scalar"),
            std::string::npos);
  // Once the payload is fixed, replay publishes the aggregate's letters in order.
  h.db().Exec(R"(UPDATE outbox_dead_letter SET payload = '{"n": 1}' WHERE payload = '42')");
  EXPECT_EQ(h.RunOutboxd(h.ReplayArgs({"--aggregate", "bad"}), &out), 0) << out;
  ASSERT_TRUE(h.collector().WaitForCount(5, absl::Seconds(30)));
  std::vector<std::string> bad;
  for (const auto& m : h.collector().Messages()) {
    if (m.key == "bad") bad.push_back(m.value);
  }
  EXPECT_EQ(bad, (std::vector<std::string>{R"({"n": 1})", R"({"n": 2})"}));
  EXPECT_EQ(DeadLetterAggregates(h.db()).size(), 2u);

  // The aggregate is clear again: its very next event goes straight to Kafka (issue 28
  // point 2: the gate re-read the table only every 2 s, and parked this one).
  Insert(conn, "bad", R"({"n": 6})");
  ASSERT_TRUE(h.collector().WaitForCount(6, absl::Seconds(30))) << h.relay().Log();
  EXPECT_EQ(DeadLetterAggregates(h.db()).size(), 2u);

  // An event whose topic cannot exist fails its replay again and stays, with exit 1.
  EXPECT_EQ(h.RunOutboxd(h.ReplayArgs({"--aggregate", "topic"}), &out), 1) << out;
  EXPECT_EQ(DeadLetterAggregates(h.db()).size(), 2u);
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

// An event the broker refuses after the fact (delivery report error, not a refusal at
// produce time) is dead-lettered from the report, and nothing is lost.
TEST(DeadLetter, BrokerRefusalAfterProduceIsDeadLetteredFromTheReport) {
  RelayHarness h(kTopics);
  h.StartRelay();
  auto conn = h.db().Connect();
  Insert(conn, "warmup", "{}");
  ASSERT_TRUE(h.collector().WaitForCount(1, absl::Seconds(30)));
  // MSG_SIZE_TOO_LARGE (10) for every produce request for a while: permanent.
  h.cluster().PushProduceErrors(10, 50);
  Insert(conn, "refused", R"({"n": 1})");
  h.db().WaitForScalar("SELECT count(*) FROM outbox_dead_letter", "1");
  std::vector<std::string> letters = DeadLetterAggregates(h.db());
  ASSERT_EQ(letters.size(), 1u) << h.relay().Log();
  EXPECT_EQ(letters[0], R"(refused:{"n": 1})");
  EXPECT_NE(h.db().Scalar("SELECT lsn FROM outbox_dead_letter"), "");
  h.cluster().ClearProduceErrors();
  EXPECT_TRUE(h.WaitForConfirmed(h.CurrentWalLsn(), absl::Seconds(15)));
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

// Found by the chaos run (seed 2983776942): each follower of a parked aggregate
// committed after the relay last read the table makes it read the table again, on
// the connection the periodic slot check uses. A statement run while a check was in
// flight threw the check's answer away, and the check then ended the session ("no
// answer from the server"), freeing the slot for another relay while this one's
// events were still queued for the broker.
TEST(DeadLetter, FollowersOfAParkedAggregateNeverEndTheSessionDuringASlotCheck) {
  RelayHarness h(kTopics);
  h.StartRelay({"--slot-check-interval", "1ms"});  // a check in flight at almost every turn
  auto conn = h.db().Connect();
  Insert(conn, "bad", "42");
  // One follower at a time, each committed after the relay's last read: a read each.
  constexpr int kFollowers = 50;
  for (int i = 1; i <= kFollowers; ++i) {
    Insert(conn, "bad", absl::StrCat(R"({"n": )", i, "}"));
    ASSERT_TRUE(h.db().WaitForScalar("SELECT count(*) FROM outbox_dead_letter",
                                     std::to_string(i + 1), absl::Seconds(15)))
        << h.relay().Log();
  }
  EXPECT_TRUE(h.WaitForConfirmed(h.CurrentWalLsn(), absl::Seconds(15)));
  EXPECT_EQ(h.relay().Log().find("replication stream lost"), std::string::npos) << h.relay().Log();
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

// Found by the chaos run (seed 2026): an event produced but not yet acknowledged
// when its aggregate's poison was dead-lettered, then a kill -9. The restarted relay
// replays it; it comes before the poison, so it is published, not sent after it.
TEST(DeadLetter, EventsBeforeThePoisonReplayedAfterACrashArePublishedInOrder) {
  RelayHarness h(kTopics);
  h.StartRelay();
  auto conn = h.db().Connect();
  Insert(conn, "warm", R"({"n": 0})");
  ASSERT_TRUE(h.collector().WaitForCount(1, absl::Seconds(30))) << h.relay().Log();
  ASSERT_TRUE(h.cluster().SetAllBrokersDown().ok());
  Insert(conn, "agg", R"({"n": 1})");  // in flight, never acknowledged
  Insert(conn, "agg", "42");           // the poison, dead-lettered at once
  Insert(conn, "agg", R"({"n": 2})");  // follows it
  ASSERT_TRUE(h.db().WaitForScalar("SELECT count(*) FROM outbox_dead_letter", "2"))
      << h.relay().Log();
  h.relay().Signal(SIGKILL);
  h.relay().Wait(absl::Seconds(10));

  ASSERT_TRUE(h.cluster().SetAllBrokersUp().ok());
  h.StartRelay();
  ASSERT_TRUE(h.collector().WaitForCount(2, absl::Seconds(30))) << h.relay().Log();
  EXPECT_TRUE(h.WaitForConfirmed(h.CurrentWalLsn(), absl::Seconds(15))) << h.relay().Log();
  std::vector<std::string> values;
  for (const auto& m : h.collector().Messages()) values.push_back(m.value);
  EXPECT_EQ(values, (std::vector<std::string>{R"({"n": 0})", R"({"n": 1})"}));
  EXPECT_EQ(DeadLetterAggregates(h.db()), (std::vector<std::string>{"agg:42", R"(agg:{"n": 2})"}));
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

// Issue 20 points 9 and 16: the dead-letter table's payload is text, and the fix-up
// in docs/troubleshooting.md (cast to jsonb and back, or a whole new payload) makes
// letters that fail replay's checks replayable; replay logs the topic it delivered to.
TEST(DeadLetter, TheDocumentedFixUpMakesPoisonLettersReplayable) {
  RelayHarness h({"pedido.confirmado", "fixed.outbox"});
  h.StartRelay({"--key-pointer", "/pedidoId"});
  auto conn = h.db().Connect();
  Insert(conn, "pedido-77", R"({"valor": 1})");  // no /pedidoId: dead-lettered
  Insert(conn, "pedido-77", R"({"valor": 2})");  // follows it
  Insert(conn, "pedido-78", "42");               // not an object or array
  Insert(conn, "pedido-79", R"({"pedidoId": "79"})");
  ASSERT_TRUE(h.collector().WaitForCount(1, absl::Seconds(30))) << h.relay().Log();
  ASSERT_TRUE(h.db().WaitForScalar("SELECT count(*) FROM outbox_dead_letter", "3"))
      << h.relay().Log();
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
  EXPECT_EQ(h.db().Scalar("SELECT data_type FROM information_schema.columns WHERE "
                          "table_name = 'outbox_dead_letter' AND column_name = 'payload'"),
            "text");

  const std::vector<std::string> replay =
      h.ReplayArgs({"--key-pointer", "/pedidoId", "--topic", "fixed.{table}"});
  std::string out;
  EXPECT_EQ(h.RunOutboxd(replay, &out), 1) << out;
  EXPECT_NE(out.find("not replayed: pedido-77: "), std::string::npos) << out;
  EXPECT_NE(out.find("not replayed: pedido-78: "), std::string::npos) << out;
  EXPECT_EQ(DeadLetterAggregates(h.db()).size(), 3u);

  std::vector<std::string> fixups =
      DocBlocks("docs/troubleshooting.md", "sql", "-- dead-letter fix-up");
  ASSERT_EQ(fixups.size(), 2u) << "docs/troubleshooting.md's fix-up examples";
  for (const std::string& sql : fixups) {
    auto r = conn.Exec(sql);
    ASSERT_TRUE(r.ok()) << sql << "\n" << r.status();
  }
  EXPECT_EQ(h.RunOutboxd(replay, &out), 0) << out;
  EXPECT_NE(out.find("replayed 3 dead letter(s) to fixed.outbox"), std::string::npos) << out;
  EXPECT_EQ(out.find("to pedido.confirmado"), std::string::npos) << out;
  EXPECT_TRUE(DeadLetterAggregates(h.db()).empty());
  ASSERT_TRUE(h.collector().WaitForCount(4, absl::Seconds(30)));
  // By key (aggregates may sit on different partitions), each in its order.
  std::map<std::string, std::vector<std::string>> replayed;
  for (const auto& m : h.collector().Messages()) {
    if (m.topic == "fixed.outbox") replayed[m.key].push_back(m.value);
  }
  EXPECT_EQ(replayed,
            (std::map<std::string, std::vector<std::string>>{
                {"77", {R"({"valor": 1, "pedidoId": "77"})", R"({"valor": 2, "pedidoId": "77"})"}},
                {"78", {R"({"pedidoId": "78", "valor": 42})"}}}));
}

// Issue 20 point 5: a role that cannot delete the letters publishes nothing (a letter
// published and left in place would be published again by the next replay).
TEST(DeadLetter, ReplayWithoutDeleteOnTheTablePublishesNothingAndExitsTwo) {
  RelayHarness h(kTopics);
  InsertDeadLetter(h.db(), "pedido-80", R"({"n": 1})");
  const std::string role = h.db().CreateRole("");
  h.db().Exec("GRANT SELECT ON outbox_dead_letter TO " + role);
  const std::vector<std::string> replay = {"dead-letter", "replay",
                                           "--slot",      h.slot(),
                                           "--pg",        h.db().ConninfoWith("user=" + role),
                                           "--brokers",   h.cluster().bootstraps()};
  std::string out;
  EXPECT_EQ(h.RunOutboxd(replay, &out), 2) << out;
  EXPECT_NE(out.find("lacks DELETE on \"outbox_dead_letter\""), std::string::npos) << out;
  EXPECT_NE(out.find("GRANT SELECT, DELETE ON \"outbox_dead_letter\" TO"), std::string::npos)
      << out;
  EXPECT_EQ(DeadLetterAggregates(h.db()).size(), 1u);

  // With the grant it named, one replay publishes the letter once and removes it.
  h.db().Exec("GRANT DELETE ON outbox_dead_letter TO " + role);
  EXPECT_EQ(h.RunOutboxd(replay, &out), 0) << out;
  EXPECT_TRUE(DeadLetterAggregates(h.db()).empty());
  // Both replays have exited: whatever they published is at the broker by now.
  ASSERT_TRUE(h.collector().WaitUntilCaughtUp(absl::Seconds(30)));
  EXPECT_EQ(h.collector().Count(), 1u)
      << "the letter was published by the replay that could not delete it";
}

// A replay of thousands of letters logs one line per topic, not one per letter: those
// buried the progress line (base/progress.h) under a flood. --log-level debug still
// names each letter.
TEST(DeadLetter, ReplayOfManyLettersLogsACountPerTopicNotALinePerLetter) {
  RelayHarness h({"pedido.confirmado", "pedido.cancelado"});
  InsertDeadLetters(h.db(), 2000, 50,
                    "CASE WHEN i % 2 = 0 THEN 'pedido.confirmado' ELSE 'pedido.cancelado' END",
                    "'{}'");
  const std::vector<std::string> replay = h.ReplayArgs();
  std::string out;
  ASSERT_EQ(h.RunOutboxd(replay, &out), 0) << out;
  EXPECT_EQ(out.find("of aggregate"), std::string::npos) << out.substr(0, 2000);
  EXPECT_NE(out.find("replayed 1000 dead letter(s) to pedido.confirmado"), std::string::npos)
      << out;
  EXPECT_NE(out.find("replayed 1000 dead letter(s) to pedido.cancelado"), std::string::npos) << out;
  EXPECT_NE(out.find("replayed 2000 dead letter(s); 0 aggregate(s) still blocked"),
            std::string::npos)
      << out;
  EXPECT_LT(std::count(out.begin(), out.end(), '\n'), 20) << out.substr(0, 2000);
  EXPECT_TRUE(DeadLetterAggregates(h.db()).empty());

  InsertDeadLetter(h.db(), "pedido-81", R"({"n": 1})");
  std::vector<std::string> debug = replay;
  debug.insert(debug.end(), {"--log-level", "debug"});
  ASSERT_EQ(h.RunOutboxd(debug, &out), 0) << out;
  EXPECT_NE(out.find("of aggregate pedido-81 to pedido.confirmado"), std::string::npos) << out;
}

// Issue 27 point 4: two relays on one outbox, each its slot (a Kafka relay and a
// RabbitMQ one, in the compose file). A letter one of them filed parks that relay's
// aggregate only: the other, restarted, reads only its own slot's letters and
// publishes the aggregate's next event; `dead-letter replay --slot` takes only its
// slot's letters.
TEST(DeadLetter, TwoRelaysOnOneOutboxKeepTheirOwnDeadLetters) {
  RelayHarness h(kTopics);
  const std::string small = h.slot() + "_small";  // the relay that dead-letters
  std::string out;
  ASSERT_EQ(h.RunOutboxd({"setup", "--pg", h.db().conninfo(), "--slot", small}, &out), 0) << out;
  h.StartRelay();
  std::unique_ptr<ChildProcess> small_relay = ChildProcess::Start(
      {BinPath("outboxd"), "run", "--pg", h.db().conninfo(), "--brokers", h.cluster().bootstraps(),
       "--slot", small, "--metrics", "127.0.0.1:0", "--kafka", "message.max.bytes=3000"});
  ASSERT_TRUE(WaitForStreaming(*small_relay)) << small_relay->Log();

  auto conn = h.db().Connect();
  Insert(conn, "A", absl::StrCat(R"({"blob": ")", std::string(5000, 'x'), R"("})"));  // too large
  ASSERT_TRUE(h.collector().WaitForCount(1, absl::Seconds(30))) << h.relay().Log();
  ASSERT_TRUE(
      WaitForMetric(*small_relay, "outboxd_events_dead_lettered_total", 1, absl::Seconds(30)))
      << small_relay->Log();
  EXPECT_EQ(h.db().Scalar("SELECT slot FROM outbox_dead_letter WHERE aggregate_id = 'A'"), small);

  // Restarted, the relay reads which aggregates are parked: none of its own.
  ASSERT_EQ(h.StopRelay(), 0) << h.relay().Log();
  h.StartRelay();
  Insert(conn, "A", R"({"n": 2})");
  ASSERT_TRUE(h.collector().WaitForCount(2, absl::Seconds(30)))
      << "the next event of A must be published, not dead-lettered after the other relay's "
         "letter\n"
      << h.relay().Log();
  EXPECT_EQ(h.collector().Messages().back().value, R"({"n": 2})");
  // The small relay keeps its own order: A's next event follows its letter.
  ASSERT_TRUE(
      WaitForMetric(*small_relay, "outboxd_events_dead_lettered_total", 2, absl::Seconds(30)))
      << small_relay->Log();
  EXPECT_EQ(h.db().Scalar("SELECT count(*) FROM outbox_dead_letter WHERE slot IS DISTINCT FROM '" +
                          small + "'"),
            "0");

  // A letter of the other relay's (filed as it would have) stays where replay --slot
  // small does not look.
  h.db().Exec(
      "INSERT INTO outbox_dead_letter (id, aggregate_id, type, payload, created_at, lsn, topic, "
      "error, slot) VALUES ('theirs', 'B', 'pedido.confirmado', '{\"n\": 9}', "
      "'2026-12-03T10:00:00+00:00', '0/16B3748', 'pedido.confirmado', 'test', '" +
      h.slot() + "')");
  EXPECT_EQ(h.RunOutboxd({"dead-letter", "list", "--slot", small, "--pg", h.db().conninfo()}, &out),
            0)
      << out;
  EXPECT_NE(out.find("2 dead letter(s)"), std::string::npos) << out;
  // And names the letters it left alone, for a person who meant the other relay.
  EXPECT_NE(out.find("left alone: dead letters other relays filed (1 of slot " + h.slot() + ")"),
            std::string::npos)
      << out;
  const size_t before = h.collector().Messages().size();
  EXPECT_EQ(h.RunOutboxd({"dead-letter", "replay", "--slot", small, "--pg", h.db().conninfo(),
                          "--brokers", h.cluster().bootstraps()},
                         &out),
            0)
      << out;
  EXPECT_NE(out.find("replayed 2 dead letter(s); 0 aggregate(s) still blocked"), std::string::npos)
      << out;
  ASSERT_TRUE(h.collector().WaitForCount(before + 2, absl::Seconds(30)));
  std::vector<std::string> replayed;
  const auto messages = h.collector().Messages();
  for (size_t i = before; i < messages.size(); ++i) {
    EXPECT_EQ(messages[i].key, "A");
    replayed.push_back(messages[i].value.substr(0, 8));
  }
  EXPECT_EQ(replayed, (std::vector<std::string>{R"({"blob":)", R"({"n": 2})"}));
  EXPECT_EQ(h.db().Scalar("SELECT string_agg(id || '@' || slot, ',') FROM outbox_dead_letter"),
            "theirs@" + h.slot());
  small_relay->Signal(SIGTERM);
  EXPECT_EQ(small_relay->Wait(absl::Seconds(60)).value_or(-1), 0) << small_relay->Log();
}

}  // namespace
}  // namespace outboxd::test
