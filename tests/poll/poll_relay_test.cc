// PollRelay in-process, one batch at a time, on the real PostgreSQL and the mock
// Kafka cluster: the seed article's broker-outage test, per-event failure and
// backoff, and the message contract.
#include "poll/poll_relay.h"

#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kafka/publisher.h"
#include "support/poll_test_env.h"

namespace outboxd {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

const std::vector<std::string> kTopics = {"pedido.confirmado", "pedido.cancelado"};

poll::PollOptions Options(test::PollEnv& env) {
  poll::PollOptions options;
  options.conninfo = env.db().conninfo();
  options.make_sink = kafka::Publisher::Factory({.brokers = env.cluster().bootstraps()});
  // Short, so the outage test does not wait the default 30 s for its failed attempt.
  options.publish_timeout = absl::Seconds(3);
  return options;
}

int RunOnce(poll::PollRelay& relay) {
  absl::StatusOr<int> reserved = relay.RunOnce();
  EXPECT_TRUE(reserved.ok()) << reserved.status();
  return reserved.value_or(-1);
}

// The row of `id` as "publicado_em IS NOT NULL|tentativas|ultimo_erro".
std::string State(test::PollEnv& env, const std::string& id) {
  return env.db().Scalar(
      absl::StrCat("SELECT (publicado_em IS NOT NULL)::text || '|' || tentativas || '|' || "
                   "coalesce(ultimo_erro, '') FROM outbox WHERE id = '",
                   id, "'"));
}

// The seed article's test "broker fora do ar nao perde o evento e a recuperacao
// publica uma vez", on a real broker protocol instead of a stub: the failed attempt
// is a librdkafka message timeout, never a publish.
TEST(PollRelay, BrokerDownLeavesTheRowPendingThenRecoveryPublishesItExactlyOnce) {
  test::PollEnv env(kTopics);
  ASSERT_TRUE(env.cluster().SetAllBrokersDown().ok());
  const std::string id = env.Insert("77", "pedido.confirmado");
  poll::PollStats stats;
  poll::PollRelay relay(Options(env), &stats);

  ASSERT_EQ(RunOnce(relay), 1);
  std::string state = State(env, id);
  EXPECT_THAT(state, StartsWith("false|1|")) << state;
  EXPECT_GT(state.size(), std::string("false|1|").size()) << "ultimo_erro must say why";
  EXPECT_EQ(stats.events_failed, 1u);

  ASSERT_TRUE(env.cluster().SetAllBrokersUp().ok());
  env.db().Exec("UPDATE outbox SET proxima_tentativa_em = now()");  // skip the backoff
  ASSERT_EQ(RunOnce(relay), 1);
  EXPECT_THAT(State(env, id), StartsWith("true|1|"));
  EXPECT_EQ(RunOnce(relay), 0) << "a second pass must not publish again";

  ASSERT_TRUE(env.collector().WaitForCount(1, absl::Seconds(10)));
  ASSERT_TRUE(env.collector().WaitUntilCaughtUp(absl::Seconds(30)));  // a second copy included
  std::vector<test::CollectedMessage> messages = env.collector().Messages();
  ASSERT_EQ(messages.size(), 1u);
  EXPECT_EQ(messages[0].Header("id"), id);
  EXPECT_EQ(stats.events_published, 1u);
}

// Runs one batch and returns [before, after] as PostgreSQL's clock saw it.
std::pair<std::string, std::string> TimedBatch(test::PollEnv& env, poll::PollRelay& relay,
                                               int expect_reserved) {
  std::string before = env.db().Scalar("SELECT clock_timestamp()::text");
  EXPECT_EQ(RunOnce(relay), expect_reserved);
  return {before, env.db().Scalar("SELECT clock_timestamp()::text")};
}

// proxima_tentativa_em - `seconds` lies within the batch: the backoff counts from
// the failure.
void ExpectBackoff(test::PollEnv& env, const std::string& id, int seconds,
                   const std::pair<std::string, std::string>& window) {
  std::string within = env.db().Scalar(
      absl::StrCat("SELECT proxima_tentativa_em - make_interval(secs => ", seconds, ") BETWEEN '",
                   window.first, "' AND '", window.second, "' FROM outbox WHERE id = '", id, "'"));
  EXPECT_EQ(within, "t") << "backoff of " << seconds << " s expected; next attempt "
                         << env.db().Scalar(absl::StrCat(
                                "SELECT proxima_tentativa_em FROM outbox WHERE id = '", id, "'"))
                         << " batch " << window.first << " .. " << window.second;
}

// A refused event (invalid topic name from its type column; a scalar payload) fails
// alone: other aggregates keep flowing, its own aggregate waits behind it, and its
// next attempt moves out 1 s, 2 s, ... 2^tentativas s, never beyond 300 s.
TEST(PollRelay, AFailedEventHoldsBackOnlyItsOwnAggregateAndBacksOffExponentially) {
  test::PollEnv env(kTopics);
  // Over 249 characters and with a space: the error quoting it exceeds 500 characters.
  const std::string bad_type = std::string(600, 'x') + " !";
  const std::string bad = env.Insert("A", bad_type);
  const std::string a2 = env.Insert("A", "pedido.confirmado");
  const std::string b1 = env.Insert("B", "pedido.confirmado");
  const std::string poison = env.Insert("C", "pedido.confirmado", "42");
  const std::string b2 = env.Insert("B", "pedido.cancelado");
  poll::PollStats stats;
  poll::PollRelay relay(Options(env), &stats);

  auto window = TimedBatch(env, relay, 3);  // bad, b1, poison: a2 and b2 wait their turn
  EXPECT_THAT(State(env, bad), StartsWith("false|1|invalid Kafka topic name"));
  EXPECT_EQ(env.db().Scalar(
                absl::StrCat("SELECT length(ultimo_erro) FROM outbox WHERE id = '", bad, "'")),
            "500");
  EXPECT_THAT(State(env, poison), StartsWith("false|1|payload is a JSON scalar"));
  EXPECT_THAT(State(env, b1), StartsWith("true|0|"));
  ExpectBackoff(env, bad, 1, window);
  ExpectBackoff(env, poison, 1, window);
  // Park both so a slow machine cannot make them due again during the next steps.
  env.db().Exec(
      "UPDATE outbox SET proxima_tentativa_em = now() + interval '1 hour' WHERE tentativas > 0");

  EXPECT_EQ(RunOnce(relay), 1);  // b2: B goes on while A's head is backing off
  EXPECT_THAT(State(env, b2), StartsWith("true|0|"));
  EXPECT_EQ(RunOnce(relay), 0);
  EXPECT_THAT(State(env, a2), StartsWith("false|0|")) << "A's order must hold";

  const std::string due = absl::StrCat("UPDATE outbox SET proxima_tentativa_em = now() ");
  env.db().Exec(due + "WHERE id = '" + bad + "'");
  window = TimedBatch(env, relay, 1);
  EXPECT_THAT(State(env, bad), StartsWith("false|2|"));
  ExpectBackoff(env, bad, 2, window);
  env.db().Exec(due + ", tentativas = 8 WHERE id = '" + bad + "'");
  window = TimedBatch(env, relay, 1);
  ExpectBackoff(env, bad, 256, window);
  env.db().Exec(due + ", tentativas = 9 WHERE id = '" + bad + "'");
  window = TimedBatch(env, relay, 1);
  ExpectBackoff(env, bad, 300, window);  // 512 capped
  env.db().Exec(due + ", tentativas = 2000000000 WHERE id = '" + bad + "'");
  window = TimedBatch(env, relay, 1);
  ExpectBackoff(env, bad, 300, window);  // no overflow on a huge count

  // Fixed by an operator: the head goes out, then the event it held back.
  env.db().Exec(due + ", tipo = 'pedido.confirmado' WHERE id = '" + bad + "'");
  EXPECT_EQ(RunOnce(relay), 1);
  EXPECT_EQ(RunOnce(relay), 1);
  ASSERT_TRUE(env.collector().WaitForCount(4, absl::Seconds(10)));
  std::vector<std::string> order;
  for (const auto& m : env.collector().Messages()) {
    if (m.key == "A") order.push_back(m.Header("id").value_or(""));
  }
  EXPECT_EQ(order, (std::vector<std::string>{bad, a2}));
  EXPECT_EQ(stats.events_failed, 6u);
}

// The message contract on a renamed, schema-qualified table (Debezium-style names):
// topic from the template, key = aggregate id, value = the jsonb as PostgreSQL renders
// it, headers id, type, aggregate_id, created_at (ISO-8601 with offset) and no lsn.
TEST(PollRelay, MessageCarriesTheRowAsKeyValueAndHeaders) {
  const std::string schema = R"sql(
CREATE SCHEMA app;
CREATE TABLE app."Events" (
  seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  event_id uuid NOT NULL DEFAULT gen_random_uuid(),
  aggregateid text NOT NULL, type text NOT NULL, data jsonb NOT NULL,
  "timestamp" timestamptz NOT NULL DEFAULT now(),
  publicado_em timestamptz, tentativas int NOT NULL DEFAULT 0, ultimo_erro text,
  proxima_tentativa_em timestamptz NOT NULL DEFAULT now());
)sql";
  test::PollEnv env({"Events.pedido.confirmado", "Events.pedido.cancelado"}, 1, schema);
  env.db().Exec(R"sql(INSERT INTO app."Events" (aggregateid, type, data) VALUES
    ('77', 'pedido.confirmado', '{"pedidoId": "77", "nota": "ação \"citada\"", "n": [1, 2.50]}'),
    ('78', 'pedido.cancelado', '[{"b": 1, "a": null}]'),
    ('77', 'pedido.cancelado', '{}'))sql");
  poll::PollOptions options = Options(env);
  options.table = "app.Events";
  options.topic_template = "{table}.{type}";
  options.columns = {.id = "event_id",
                     .aggregate_id = "aggregateid",
                     .type = "type",
                     .payload = "data",
                     .created_at = "timestamp"};
  poll::PollStats stats;
  poll::PollRelay relay(options, &stats);
  EXPECT_EQ(RunOnce(relay), 2);  // 77's second event waits for its first
  EXPECT_EQ(RunOnce(relay), 1);
  ASSERT_TRUE(env.collector().WaitForCount(3, absl::Seconds(10)));

  auto rows = env.db().Exec(R"sql(SET TimeZone = 'UTC';
    SELECT event_id, aggregateid, type, data::text,
           regexp_replace(replace("timestamp"::text, ' ', 'T'), '([+-][0-9]{2})$', '\1:00')
      FROM app."Events")sql");
  std::map<std::string, std::vector<std::string>> by_id;
  for (int r = 0; r < rows.rows(); ++r) {
    by_id[std::string(rows.Get(r, 0))] = {std::string(rows.Get(r, 1)), std::string(rows.Get(r, 2)),
                                          std::string(rows.Get(r, 3)), std::string(rows.Get(r, 4))};
  }
  ASSERT_EQ(by_id.size(), 3u);
  for (const test::CollectedMessage& m : env.collector().Messages()) {
    ASSERT_TRUE(by_id.count(m.Header("id").value_or(""))) << m.Header("id").value_or("");
    const std::vector<std::string>& row = by_id[*m.Header("id")];
    EXPECT_EQ(m.topic, "Events." + row[1]);
    EXPECT_EQ(m.key, row[0]);
    EXPECT_EQ(m.value, row[2]);
    EXPECT_EQ(m.Header("type"), row[1]);
    EXPECT_EQ(m.Header("aggregate_id"), row[0]);
    EXPECT_EQ(m.Header("created_at"), row[3]);
    EXPECT_EQ(row[3].substr(10, 1), "T");  // ISO-8601 with the offset as +HH:MM
    EXPECT_THAT(row[3], testing::EndsWith("+00:00"));
    EXPECT_FALSE(m.Header("lsn").has_value()) << "a polled row has no commit LSN";
    // --dedupe's mark: the table as the server names it (poll/poll_relay.h).
    EXPECT_EQ(m.Header("outboxd_slot"), env.db().name() + "/poll:app.Events");
    EXPECT_EQ(m.headers.size(), 5u);
  }
}

// A missing column ends at start-up with one line naming it and the fix.
TEST(PollRelay, StartNamesAMissingColumnAndHowToAddIt) {
  test::PollEnv env(kTopics);
  env.db().Exec("ALTER TABLE outbox DROP COLUMN ultimo_erro");
  poll::PollStats stats;
  poll::PollRelay relay(Options(env), &stats);
  absl::Status status = relay.Start();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("has no column ultimo_erro: the polling relay needs it: ALTER TABLE "
                        "outbox ADD COLUMN ultimo_erro text"));

  poll::PollOptions renamed = Options(env);
  renamed.columns.type = "kind";
  poll::PollRelay relay2(renamed, &stats);
  EXPECT_THAT(std::string(relay2.Start().message()), HasSubstr("--type-column"));
}

}  // namespace
}  // namespace outboxd
