// `outboxd poll` as a separate process (the real binary) on the real PostgreSQL and
// the mock Kafka cluster: several instances on one table, --notify, SIGTERM, exit
// codes. Latency of poll against poll --notify is measured by scripts/bench (its live
// phase), never here.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "support/child_process.h"
#include "support/decoded_event.h"
#include "support/metrics_text.h"
#include "support/poll_test_env.h"
#include "support/wait_until.h"

namespace outboxd {
namespace {

using test::ChildProcess;
using ::testing::HasSubstr;

const std::vector<std::string> kTopics = {"pedido.confirmado", "pedido.cancelado"};

// Waits until the relay has committed `n` batches, empty ones included.
bool WaitForBatches(ChildProcess& relay, double n) {
  return test::WaitForMetric(relay, "outboxd_poll_batches_total", n, absl::Seconds(60));
}

std::vector<std::string> PollArgs(test::PollEnv& env, const std::vector<std::string>& extra) {
  std::vector<std::string> args = {
      test::BinPath("outboxd"), "poll",      "--pg",
      env.db().conninfo(),      "--brokers", env.cluster().bootstraps()};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// Starts `outboxd poll` with its metrics on a free port.
std::unique_ptr<ChildProcess> SpawnPoll(test::PollEnv& env, std::vector<std::string> extra) {
  extra.insert(extra.end(), {"--metrics", "127.0.0.1:0"});
  return ChildProcess::Start(PollArgs(env, extra));
}

// SpawnPoll, then waits for its first batch: from then on it is connected (and
// LISTENing, with --notify).
std::unique_ptr<ChildProcess> StartPoll(test::PollEnv& env, const std::vector<std::string>& extra) {
  auto relay = SpawnPoll(env, extra);
  EXPECT_TRUE(WaitForBatches(*relay, 1)) << relay->Log();
  return relay;
}

double Batches(ChildProcess& relay) {
  return test::ScrapeMetric(relay, "outboxd_poll_batches_total").value_or(-1);
}

int Stop(ChildProcess& relay) {
  relay.Signal(SIGTERM);
  return relay.Wait(absl::Seconds(60)).value_or(-1);
}

bool WaitForNoPending(test::PollEnv& env, absl::Duration timeout) {
  return test::WaitUntil(timeout, [&] { return env.Pending() == 0; });
}

void MustExec(pg::Connection& conn, const std::string& sql) {
  auto r = conn.Exec(sql);
  ASSERT_TRUE(r.ok()) << sql << ": " << r.status();
}

// Thousands of events over 40 aggregates, single- and ten-row inserts, written while
// three instances poll the same table: SKIP LOCKED keeps them off each other's rows
// and NOT EXISTS keeps each aggregate in seq order whichever instance takes it.
void InsertLoad(pg::Connection& conn, int target, int& inserted) {
  for (int i = 0; inserted < target; ++i) {
    const char* type = i % 7 == 0 ? "pedido.cancelado" : "pedido.confirmado";
    if (i % 10 == 9) {
      MustExec(conn, absl::StrCat("INSERT INTO outbox (aggregate_id, tipo, payload) SELECT "
                                  "'agg-' || ((",
                                  i, " + n) % 40), '", type, "', jsonb_build_object('i', ", i,
                                  ", 'n', n) FROM generate_series(1, 10) n"));
      inserted += 10;
    } else {
      MustExec(conn, absl::StrCat("INSERT INTO outbox (aggregate_id, tipo, payload) VALUES ('agg-",
                                  i % 40, "', '", type, "', '{\"i\": ", i, "}')"));
      inserted += 1;
    }
  }
}

// Every row id was delivered at least once (duplicates counted), and per topic and
// key the first deliveries are in seq order.
void CheckDeliveries(test::PollEnv& env, const std::vector<test::CollectedMessage>& messages) {
  auto rows = env.db().Exec("SELECT id, seq FROM outbox");
  std::map<std::string, int64_t> seq_of;
  for (int r = 0; r < rows.rows(); ++r) {
    seq_of[std::string(rows.Get(r, 0))] = std::stoll(std::string(rows.Get(r, 1)));
  }
  std::set<std::string> seen;
  int duplicates = 0;
  std::map<std::string, std::vector<std::pair<int64_t, int64_t>>> streams;  // offset, seq
  for (const test::CollectedMessage& m : messages) {
    const std::string id = m.Header("id").value_or("");
    ASSERT_TRUE(seq_of.count(id)) << "published an id that is not in the outbox: " << id;
    if (!seen.insert(id).second) {
      ++duplicates;
      continue;
    }
    streams[m.topic + "/" + m.key].push_back({m.offset, seq_of[id]});
  }
  EXPECT_EQ(seen.size(), seq_of.size()) << "events never delivered";
  EXPECT_EQ(duplicates, 0);
  std::printf("%zu events delivered by 3 instances, %d duplicates, %zu topic/aggregate streams\n",
              seen.size(), duplicates, streams.size());
  for (auto& [stream, events] : streams) {
    std::sort(events.begin(), events.end());  // broker order
    for (size_t i = 1; i < events.size(); ++i) {
      ASSERT_LT(events[i - 1].second, events[i].second)
          << stream << " out of order at offsets " << events[i - 1].first << ", "
          << events[i].first;
    }
  }
}

// The count from the "stopped cleanly; published N events" line, or -1.
int PublishedCount(const ChildProcess& relay) {
  const std::string log = relay.Log();
  const std::string marker = "stopped cleanly; published ";
  size_t at = log.find(marker);
  return at == std::string::npos ? -1 : std::atoi(log.c_str() + at + marker.size());
}

TEST(PollCommand, ThreeInstancesDeliverEveryEventInAggregateOrder) {
  test::PollEnv env(kTopics, 3);
  std::vector<std::unique_ptr<ChildProcess>> relays;
  // Batches of 10 over 40 aggregates: a batch of 50 would lock every aggregate's head
  // at once and leave nothing eligible for the other instances until it commits.
  for (int i = 0; i < 3; ++i) {
    relays.push_back(StartPoll(env, {"--interval", "100ms", "--batch", "10"}));
  }
  auto conn = env.db().Connect();
  int inserted = 0;
  absl::Time start = absl::Now();
  InsertLoad(conn, 3000, inserted);
  ASSERT_TRUE(WaitForNoPending(env, absl::Seconds(180))) << env.Pending() << " rows still pending\n"
                                                         << relays[0]->Log();
  std::printf("%d events inserted and published in %s\n", inserted,
              absl::FormatDuration(absl::Now() - start).c_str());
  ASSERT_TRUE(env.collector().WaitForCount(inserted, absl::Seconds(30)));
  // Stopped, they can publish nothing more: every duplicate they sent is in the
  // topics, and the collector holds it once it has read to the end of each partition.
  int busy = 0;
  for (auto& relay : relays) {
    EXPECT_EQ(Stop(*relay), 0) << relay->Log();
    EXPECT_THAT(relay->Log(), testing::Not(HasSubstr(" error "))) << relay->Log();
    int published = PublishedCount(*relay);
    std::printf("instance %d published %d\n", relay->pid(), published);
    busy += published > 0;
  }
  EXPECT_GE(busy, 2) << "the instances should share the work";
  ASSERT_TRUE(env.collector().WaitUntilCaughtUp(absl::Seconds(30)));
  EXPECT_EQ(env.collector().Skipped(), 0);
  CheckDeliveries(env, env.collector().Messages());
  EXPECT_EQ(env.db().Scalar("SELECT count(*) FROM outbox WHERE tentativas > 0"), "0");
}

// With an hour's interval, an insert is published at all only because the trigger's
// NOTIFY ended the sleep. Each insert is made while the loop sleeps: after the batch
// that published the previous one and the empty batch that precedes the sleep.
TEST(PollCommand, NotifyWakesTheSleepingLoop) {
  test::PollEnv env(kTopics);
  auto relay = StartPoll(env, {"--interval", "1h", "--notify", "--install-notify-trigger"});
  EXPECT_EQ(env.db().Scalar("SELECT count(*) FROM pg_trigger WHERE tgname = 'outboxd_notify'"),
            "1");
  auto conn = env.db().Connect();
  for (size_t k = 1; k <= 3; ++k) {
    const double asleep_after = Batches(*relay);
    MustExec(conn,
             "INSERT INTO outbox (aggregate_id, tipo, payload) VALUES ('n', "
             "'pedido.confirmado', '{}')");
    ASSERT_TRUE(env.collector().WaitForCount(k, absl::Seconds(60))) << relay->Log();
    ASSERT_TRUE(WaitForBatches(*relay, asleep_after + 2)) << relay->Log();
  }
  EXPECT_EQ(Stop(*relay), 0) << relay->Log();
  // The start line comes first, as `run`'s does (issue 28 point 12).
  const std::string log = relay->Log();
  ASSERT_NE(log.find("metrics on "), std::string::npos) << log;
  EXPECT_LT(log.find("starting outboxd"), log.find("metrics on ")) << log;
}

// SIGTERM while a batch waits for the broker: the batch ends (its attempt recorded),
// then the process exits 0.
TEST(PollCommand, SigtermFinishesTheBatchInProgressThenExitsZero) {
  test::PollEnv env(kTopics);
  ASSERT_TRUE(env.cluster().SetAllBrokersDown().ok());
  const std::string id = env.Insert("77", "pedido.confirmado");
  auto relay = SpawnPoll(env, {"--publish-timeout", "5s"});
  // In the batch: the event produced, its delivery report awaited.
  ASSERT_TRUE(test::WaitForMetric(*relay, "outboxd_events_in_flight", 1, absl::Seconds(30)))
      << relay->Log();
  EXPECT_EQ(Stop(*relay), 0) << relay->Log();
  EXPECT_EQ(env.db().Scalar("SELECT tentativas FROM outbox WHERE id = '" + id + "'"), "1")
      << "the batch in progress was not finished\n"
      << relay->Log();
  EXPECT_THAT(relay->Log(), HasSubstr("stopped cleanly"));
}

// A lost PostgreSQL connection (here: terminated by an administrator while the loop
// sleeps) is retried on a new connection that LISTENs again; the process lives on.
// With an hour's interval, only a NOTIFY on the new connection publishes the insert.
TEST(PollCommand, LostConnectionIsRetriedOnANewConnection) {
  test::PollEnv env(kTopics);
  auto relay = StartPoll(env, {"--interval", "1h", "--notify", "--install-notify-trigger"});
  auto conn = env.db().Connect();
  MustExec(conn,
           "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = "
           "current_database() AND application_name = 'outboxd' AND pid <> pg_backend_pid()");
  ASSERT_TRUE(test::WaitForMetric(*relay, "outboxd_reconnects_total", 1, absl::Seconds(30)))
      << relay->Log();
  // Reconnected, LISTENing, asleep again: the first batch on the new connection done.
  ASSERT_TRUE(WaitForBatches(*relay, 2)) << relay->Log();
  MustExec(conn,
           "INSERT INTO outbox (aggregate_id, tipo, payload) VALUES ('r', "
           "'pedido.confirmado', '{}')");
  ASSERT_TRUE(env.collector().WaitForCount(1, absl::Seconds(60)))
      << "not woken by NOTIFY on the new connection\n"
      << relay->Log();
  EXPECT_TRUE(relay->Running());
  EXPECT_EQ(Stop(*relay), 0) << relay->Log();
}

// A poller killed (kill -9) after the broker acknowledged its batch and before the
// batch's COMMIT: the rows stay pending, and a new poller takes them. Returns how many
// messages the topic then holds per id; `extra` is the new poller's flags.
// `skipped`: the new poller's outboxd_dedupe_skipped_total.
std::map<std::string, int> KillBetweenTheAckAndTheCommit(test::PollEnv& env,
                                                         const std::vector<std::string>& extra,
                                                         double* skipped) {
  std::map<std::string, int> copies;
  for (int i = 0; i < 20; ++i) copies[env.Insert(absl::StrCat("agg-", i), "pedido.confirmado")];
  // A SHARE lock lets the batch reserve its rows (FOR UPDATE) and publish them, and holds
  // its UPDATE: the moment between the acknowledgement and the COMMIT, made long.
  auto blocker = env.db().Connect();
  MustExec(blocker, "BEGIN");
  MustExec(blocker, "LOCK TABLE outbox IN SHARE MODE");
  auto first = SpawnPoll(env, {});
  EXPECT_TRUE(env.collector().WaitForCount(20, absl::Seconds(60))) << first->Log();
  first->Signal(SIGKILL);
  (void)first->Wait(absl::Seconds(30));
  // Its backend ends at its next read, once the UPDATE gets the lock: rolled back.
  MustExec(blocker, "ROLLBACK");
  auto second = SpawnPoll(env, extra);
  EXPECT_TRUE(WaitForNoPending(env, absl::Seconds(60))) << second->Log();
  *skipped = test::ScrapeMetric(*second, "outboxd_dedupe_skipped_total").value_or(-1);
  EXPECT_EQ(Stop(*second), 0) << second->Log();
  EXPECT_TRUE(env.collector().WaitUntilCaughtUp(absl::Seconds(30)));
  for (const test::CollectedMessage& m : env.collector().Messages()) {
    ++copies[m.Header("id").value_or("")];
  }
  return copies;
}

// Issue 30: the rows an interrupted batch held are looked for at the broker (by id and
// key among this table's poller's messages) and recorded as published, not sent again.
TEST(PollCommand, AKillBetweenTheAcknowledgementAndTheCommitSendsNothingTwice) {
  test::PollEnv env(kTopics);
  double skipped = 0;
  const std::map<std::string, int> copies = KillBetweenTheAckAndTheCommit(env, {}, &skipped);
  ASSERT_EQ(copies.size(), 20u) << "an id the outbox does not hold was published";
  for (const auto& [id, n] : copies) EXPECT_EQ(n, 1) << id;
  EXPECT_EQ(skipped, 20);
}

// The same with --dedupe off: every row of the batch is sent again (at least once),
// which is what the test above would see without the check.
TEST(PollCommand, WithDedupeOffAKillBetweenTheAcknowledgementAndTheCommitResends) {
  test::PollEnv env(kTopics);
  double skipped = 0;
  const std::map<std::string, int> copies =
      KillBetweenTheAckAndTheCommit(env, {"--dedupe", "off"}, &skipped);
  ASSERT_EQ(copies.size(), 20u);
  EXPECT_EQ(skipped, 0);
  for (const auto& [id, n] : copies) EXPECT_EQ(n, 2) << id;
}

// --headers-column on poll as on run: a row's object of strings become headers; a row
// without one has none; a malformed traceparent is left out, counted and logged, the
// event published; a row whose headers are no object of strings is a failed attempt
// with the reason (poll's poison rule), holding back nobody else.
TEST(PollCommand, RowHeadersBecomeMessageHeadersAndABadOneIsAFailedAttempt) {
  test::PollEnv env(kTopics);
  env.db().Exec("ALTER TABLE outbox ADD COLUMN cabecalhos jsonb");
  env.db().Exec(
      "INSERT INTO outbox (aggregate_id, tipo, payload, cabecalhos) VALUES "
      "('a', 'pedido.confirmado', '{}', '{\"x-tenant\": \"acme\"}'), "
      "('b', 'pedido.confirmado', '{}', NULL), "
      "('c', 'pedido.confirmado', '{}', '{\"x-tenant\": 7}'), "
      "('d', 'pedido.confirmado', '{}', '{\"x-tenant\": \"d\", \"traceparent\": \"nope\"}')");
  auto relay = StartPoll(env, {"--headers-column", "cabecalhos"});
  ASSERT_TRUE(env.collector().WaitForCount(3, absl::Seconds(60))) << relay->Log();
  ASSERT_TRUE(test::WaitUntil(absl::Seconds(30), [&] {
    return env.db().Scalar("SELECT tentativas FROM outbox WHERE aggregate_id = 'c'") != "0";
  })) << relay->Log();
  EXPECT_EQ(
      test::ScrapeMetric(
          *relay, R"(outboxd_headers_dropped_total{header="traceparent",reason="malformed"})"),
      1);
  EXPECT_EQ(Stop(*relay), 0) << relay->Log();
  EXPECT_THAT(relay->Log(), HasSubstr("published without its traceparent header (malformed"));
  std::map<std::string, std::string> tenant_by_key;
  for (const test::CollectedMessage& m : env.collector().Messages()) {
    tenant_by_key[m.key] = m.Header("x-tenant").value_or("(none)");
    EXPECT_FALSE(m.Header("traceparent").has_value()) << m.key;
  }
  EXPECT_EQ(tenant_by_key,
            (std::map<std::string, std::string>{{"a", "acme"}, {"b", "(none)"}, {"d", "d"}}));
  EXPECT_THAT(env.db().Scalar("SELECT ultimo_erro FROM outbox WHERE aggregate_id = 'c'"),
              HasSubstr("headers column"));
}

TEST(PollCommand, MissingTableExitsTwoWithOneLine) {
  test::PollEnv env(kTopics);
  auto relay = ChildProcess::Start(PollArgs(env, {"--table", "nope"}));
  EXPECT_EQ(relay->Wait(absl::Seconds(30)), 2);
  EXPECT_THAT(relay->Log(), HasSubstr("outbox table nope does not exist: run outboxd setup"));
}

TEST(PollCommand, AMissingHeadersColumnExitsTwoNamingTheFix) {
  test::PollEnv env(kTopics);
  auto relay = ChildProcess::Start(PollArgs(env, {"--headers-column", "cabecalhos"}));
  EXPECT_EQ(relay->Wait(absl::Seconds(30)), 2);
  EXPECT_THAT(relay->Log(), HasSubstr("has no column cabecalhos: add it with outboxd setup "
                                      "--headers-column"));
}

// --format, --header and --key-pointer (issue 7, point 4) in the polling relay: each
// format read back by a consumer's means and compared with the table, no lsn (a polled
// row has none), and an event without its key field left pending as a failed attempt
// with the reason (the polling relay has no dead-letter table: it retries).
class PollFormatTest : public ::testing::TestWithParam<std::string> {};

TEST_P(PollFormatTest, EachFormatRoundTripsWithPayloadHeadersAndKey) {
  const std::string format = GetParam();
  test::PollEnv env({"pedido.confirmado"});
  const std::string traced = env.Insert(
      "agg-1", "pedido.confirmado",
      R"({"customer": {"id": "c-1"}, "nota": "ação \"citada\" ✓", "itens": [1, 2.5, null],)"
      R"( "trace": {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}})");
  const std::string plain = env.Insert("agg-2", "pedido.confirmado", R"({"customer": {"id": 7}})");
  const std::string keyless = env.Insert("agg-3", "pedido.confirmado", R"({"sem": "cliente"})");
  auto relay = StartPoll(env, {"--interval", "100ms", "--format", format, "--header",
                               "traceparent=/trace/traceparent", "--key-pointer", "/customer/id"});
  ASSERT_TRUE(env.collector().WaitForCount(2, absl::Seconds(30))) << relay->Log();
  // The keyless event's failed attempt recorded.
  ASSERT_TRUE(test::WaitUntil(absl::Seconds(30), [&] {
    return env.db().Scalar(absl::StrCat("SELECT tentativas >= 1 FROM outbox WHERE id = '", keyless,
                                        "'")) == "t";
  })) << relay->Log();
  EXPECT_EQ(Stop(*relay), 0) << relay->Log();

  pg::Result rows = env.db().Exec(
      "SET TimeZone = 'UTC'; SELECT id, aggregate_id, tipo, payload::text, "
      "to_char(criado_em, 'YYYY-MM-DD\"T\"HH24:MI:SS.USOF') || ':00' FROM outbox");
  std::map<std::string, int> row_of;
  for (int i = 0; i < rows.rows(); ++i) row_of[std::string(rows.Get(i, 0))] = i;
  std::vector<test::CollectedMessage> messages = env.collector().Messages();
  ASSERT_EQ(messages.size(), 2u);
  for (const test::CollectedMessage& m : messages) {
    absl::StatusOr<test::DecodedEvent> event = test::DecodeEvent(format, m);
    ASSERT_TRUE(event.ok()) << event.status() << "\n" << m.value;
    ASSERT_TRUE(row_of.count(event->id)) << event->id;
    const int row = row_of[event->id];
    EXPECT_EQ(event->aggregate_id, rows.Get(row, 1));
    EXPECT_EQ(event->type, rows.Get(row, 2));
    EXPECT_EQ(event->payload, format == "envelope" ? test::Minify(rows.Get(row, 3))
                                                   : std::string(rows.Get(row, 3)));
    // PostgreSQL's ISO text drops trailing zeros of the fraction; compare as times.
    absl::Time header_time, row_time;
    std::string err;
    ASSERT_TRUE(absl::ParseTime(absl::RFC3339_full, event->created_at, &header_time, &err))
        << event->created_at;
    ASSERT_TRUE(absl::ParseTime(absl::RFC3339_full, std::string(rows.Get(row, 4)), &row_time, &err))
        << rows.Get(row, 4);
    EXPECT_EQ(header_time, row_time);
    EXPECT_EQ(event->lsn, std::nullopt) << "a polled row has no commit LSN";
    EXPECT_EQ(m.Header("lsn"), std::nullopt);
    EXPECT_EQ(m.Header("id"), event->id);
    if (event->id == traced) {
      EXPECT_EQ(m.key, "c-1");
      EXPECT_EQ(m.Header("traceparent"), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
    } else {
      EXPECT_EQ(event->id, plain);
      EXPECT_EQ(m.key, "7");
      EXPECT_EQ(m.Header("traceparent"), std::nullopt);
    }
  }
  EXPECT_EQ(env.db().Scalar(absl::StrCat(
                "SELECT (publicado_em IS NULL AND tentativas >= 1)::text || ' ' || ultimo_erro "
                "FROM outbox WHERE id = '",
                keyless, "'")),
            "true no key: --key-pointer /customer/id finds nothing in the payload");
}

INSTANTIATE_TEST_SUITE_P(Formats, PollFormatTest, ::testing::Values("json", "envelope", "protobuf"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace outboxd
