// `outboxd poll`'s /metrics and /healthz on the real PostgreSQL and the mock broker:
// the shared names count what was published, and /healthz turns 503 when the broker
// stops acknowledging, 200 again once it is back.
#include <csignal>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "support/child_process.h"
#include "support/metrics_text.h"
#include "support/poll_test_env.h"
#include "support/wait_until.h"

namespace outboxd {
namespace {

using test::ChildProcess;
using test::HttpGetFromLog;
using test::StalledForSeconds;
using test::WaitForHttpStatus;
using test::WaitUntil;
using ::testing::HasSubstr;
using ::testing::Not;

const std::vector<std::string> kTopics = {"pedido.confirmado", "pedido.cancelado"};

std::unique_ptr<ChildProcess> StartPoll(test::PollEnv& env, const std::vector<std::string>& extra) {
  std::vector<std::string> args = {
      test::BinPath("outboxd"),   "poll",      "--pg",        env.db().conninfo(), "--brokers",
      env.cluster().bootstraps(), "--metrics", "127.0.0.1:0", "--interval",        "100ms"};
  args.insert(args.end(), extra.begin(), extra.end());
  auto relay = ChildProcess::Start(args);
  EXPECT_TRUE(test::WaitForMetric(*relay, "outboxd_poll_batches_total", 1, absl::Seconds(30)))
      << relay->Log();
  return relay;
}

double Value(const std::string& text, const std::string& series) {
  return test::MetricValue(text, series).value_or(-1);
}

int Stop(ChildProcess& relay) {
  relay.Signal(SIGTERM);
  return relay.Wait(absl::Seconds(60)).value_or(-1);
}

TEST(PollMetrics, CountEveryPublishedEventByTopicWithOneLatencyEach) {
  test::PollEnv env(kTopics);
  auto relay = StartPoll(env, {});
  for (int i = 0; i < 10; ++i) env.Insert(absl::StrCat("agg-", i), "pedido.confirmado");
  for (int i = 0; i < 5; ++i) env.Insert(absl::StrCat("agg-", i), "pedido.cancelado");
  ASSERT_TRUE(WaitUntil(absl::Seconds(30), [&] { return env.Pending() == 0; })) << relay->Log();

  std::string text;
  ASSERT_TRUE(WaitUntil(absl::Seconds(10), [&] {
    text = HttpGetFromLog(*relay, "/metrics").second;
    return Value(text, "outboxd_commit_to_ack_seconds_count") == 15;
  })) << text;
  EXPECT_EQ(Value(text, R"(outboxd_events_published_total{topic="pedido.confirmado"})"), 10);
  EXPECT_EQ(Value(text, R"(outboxd_events_published_total{topic="pedido.cancelado"})"), 5);
  EXPECT_EQ(Value(text, R"(outboxd_commit_to_ack_seconds_bucket{le="+Inf"})"), 15);
  EXPECT_EQ(Value(text, R"(outboxd_commit_to_ack_seconds_bucket{le="30"})"), 15);
  EXPECT_GT(Value(text, "outboxd_commit_to_ack_seconds_sum"), 0);
  EXPECT_EQ(Value(text, "outboxd_events_in_flight"), 0);
  EXPECT_EQ(Value(text, "outboxd_publish_errors_total"), 0);
  EXPECT_GE(Value(text, "outboxd_poll_batches_total"), 1);
  EXPECT_EQ(Value(text, "outboxd_connected"), 1);
  EXPECT_THAT(text, Not(HasSubstr("outboxd_slot_lag_bytes")));
  auto health = HttpGetFromLog(*relay, "/healthz");
  EXPECT_EQ(health.first, 200);
  EXPECT_EQ(health.second, "ok\n");
  EXPECT_EQ(Stop(*relay), 0) << relay->Log();
}

TEST(PollHealth, BrokerOutageTurnsHealthzUnhealthyAfterTheStallThresholdAndBackAfter) {
  test::PollEnv env(kTopics);
  auto relay = StartPoll(env, {"--publish-timeout", "1s", "--healthz-stall", "2s"});
  ASSERT_TRUE(WaitUntil(absl::Seconds(10), [&] {
    return HttpGetFromLog(*relay, "/healthz").first == 200;
  })) << relay->Log();

  ASSERT_TRUE(env.cluster().SetAllBrokersDown().ok());
  for (int i = 0; i < 3; ++i) env.Insert(absl::StrCat("agg-", i), "pedido.confirmado");
  std::pair<int, std::string> health =
      WaitForHttpStatus(*relay, "/healthz", 503, absl::Seconds(30));
  ASSERT_EQ(health.first, 503) << health.second << relay->Log();
  EXPECT_GE(StalledForSeconds(health.second), 2) << "503 before the stall threshold\n"
                                                 << health.second;

  // The oldest pending row's age is sampled every few seconds.
  std::string text;
  ASSERT_TRUE(WaitUntil(absl::Seconds(20), [&] {
    text = HttpGetFromLog(*relay, "/metrics").second;
    return Value(text, "outboxd_oldest_unacked_age_seconds") >= 2;
  })) << text;
  EXPECT_GE(Value(text, "outboxd_publish_errors_total"), 3);

  ASSERT_TRUE(env.cluster().SetAllBrokersUp().ok());
  ASSERT_TRUE(WaitUntil(absl::Seconds(90), [&] { return env.Pending() == 0; })) << relay->Log();
  health = WaitForHttpStatus(*relay, "/healthz", 200, absl::Seconds(10));
  ASSERT_EQ(health.first, 200) << health.second;
  ASSERT_TRUE(WaitUntil(absl::Seconds(20), [&] {
    text = HttpGetFromLog(*relay, "/metrics").second;
    return Value(text, "outboxd_oldest_unacked_age_seconds") == 0;
  })) << text;
  // At least once: an attempt that timed out while its request was on the wire may
  // also have been stored.
  EXPECT_GE(Value(text, R"(outboxd_events_published_total{topic="pedido.confirmado"})"), 3);
  EXPECT_EQ(Stop(*relay), 0) << relay->Log();
}

// Issue 20 point 15: a row that keeps failing (here a payload that is not a JSON object
// or array, retried with backoff) with nothing else acknowledged turns /healthz 503
// past the threshold, and its text says 0 events in flight, as the gauge does.
TEST(PollHealth, ARowFailingPastTheThresholdIsUnhealthyAndNotCountedInFlight) {
  test::PollEnv env(kTopics);
  auto relay = StartPoll(env, {"--healthz-stall", "2s"});
  ASSERT_TRUE(WaitUntil(absl::Seconds(10), [&] {
    return HttpGetFromLog(*relay, "/healthz").first == 200;
  })) << relay->Log();
  env.db().Exec(
      "INSERT INTO outbox (aggregate_id, tipo, payload) "
      "VALUES ('agg-poison', 'pedido.confirmado', '42')");
  std::pair<int, std::string> health =
      WaitForHttpStatus(*relay, "/healthz", 503, absl::Seconds(30));
  ASSERT_EQ(health.first, 503) << health.second << relay->Log();
  EXPECT_THAT(health.second, HasSubstr("with 0 events in flight and "));
  EXPECT_THAT(health.second, HasSubstr(" failed attempt"));
  const std::string text = HttpGetFromLog(*relay, "/metrics").second;
  EXPECT_EQ(Value(text, "outboxd_events_in_flight"), 0) << text;
  EXPECT_GE(Value(text, "outboxd_publish_errors_total"), 1) << text;

  // Once the row is fixed and published, the relay is healthy again.
  env.db().Exec(R"(UPDATE outbox SET payload = '{"n": 1}', proxima_tentativa_em = now() )"
                "WHERE aggregate_id = 'agg-poison'");
  health = WaitForHttpStatus(*relay, "/healthz", 200, absl::Seconds(30));
  ASSERT_EQ(health.first, 200) << health.second << relay->Log();
  EXPECT_EQ(Stop(*relay), 0) << relay->Log();
}

}  // namespace
}  // namespace outboxd
