// `outboxd run`'s /metrics and /healthz against the real PostgreSQL and the mock
// broker: the figures match what was relayed, and /healthz tells a stalled broker
// and a lost database from a working relay.
#include <set>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "support/metrics_text.h"
#include "support/private_cluster.h"
#include "support/relay_harness.h"
#include "support/wait_until.h"

namespace outboxd::test {
namespace {

using ::testing::HasSubstr;

const std::vector<std::string> kTopics = {"pedido.confirmado", "pedido.cancelado"};

void MustExec(pg::Connection& conn, const std::string& sql) {
  auto r = conn.Exec(sql);
  ASSERT_TRUE(r.ok()) << sql << ": " << r.status();
}

// `rows` events of `type` in one transaction, each payload about `payload_bytes` long.
void InsertEvents(RelayHarness& h, const std::string& type, int rows, int payload_bytes = 20) {
  auto conn = h.db().Connect();
  MustExec(conn, absl::StrCat("INSERT INTO outbox (aggregate_id, tipo, payload) SELECT 'agg-' || "
                              "(n % 17), '",
                              type, "', jsonb_build_object('n', n, 'pad', repeat('x', ",
                              payload_bytes, ")) FROM generate_series(1, ", rows, ") n"));
}

// Distinct event ids the collector has seen.
size_t DistinctDelivered(RelayHarness& h) {
  std::set<std::string> ids;
  for (const auto& m : h.collector().Messages()) ids.insert(m.Header("id").value_or(""));
  return ids.size();
}

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

double Value(const std::string& text, const std::string& series) {
  return MetricValue(text, series).value_or(-1);
}

// The histogram's buckets in exposition order: {le, cumulative count}.
std::vector<std::pair<std::string, double>> Buckets(const std::string& text,
                                                    const std::string& name) {
  std::vector<std::pair<std::string, double>> buckets;
  const std::string prefix = name + "_bucket{le=\"";
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::StartsWith(line, prefix)) continue;
    line.remove_prefix(prefix.size());
    size_t quote = line.find('"');
    double count = 0;
    EXPECT_TRUE(absl::SimpleAtod(line.substr(line.rfind(' ') + 1), &count)) << line;
    buckets.emplace_back(std::string(line.substr(0, quote)), count);
  }
  return buckets;
}

TEST(RelayMetrics, CountEveryRelayedEventByTopicWithOneLatencyEach) {
  RelayHarness h(kTopics);
  h.StartRelay();
  const double confirmed_before = Value(h.Metrics(h.relay()), "outboxd_confirmed_lsn");
  for (int i = 0; i < 3; ++i) InsertEvents(h, "pedido.confirmado", 10);
  for (int i = 0; i < 2; ++i) InsertEvents(h, "pedido.cancelado", 10);
  ASSERT_TRUE(WaitUntil(absl::Seconds(30), [&] { return DistinctDelivered(h) == 50; }))
      << DistinctDelivered(h) << " of 50 delivered\n"
      << h.relay().Log();

  // Acknowledgements reach the counters right after the consumer sees the messages.
  std::string text;
  ASSERT_TRUE(WaitUntil(absl::Seconds(10), [&] {
    text = h.Metrics(h.relay());
    return Value(text, "outboxd_commit_to_ack_seconds_count") == 50 &&
           Value(text, "outboxd_events_in_flight") == 0;
  })) << text;
  EXPECT_EQ(Value(text, R"(outboxd_events_published_total{topic="pedido.confirmado"})"), 30);
  EXPECT_EQ(Value(text, R"(outboxd_events_published_total{topic="pedido.cancelado"})"), 20);
  EXPECT_EQ(Value(text, "outboxd_publish_errors_total"), 0);
  EXPECT_EQ(Value(text, "outboxd_events_dead_lettered_total"), 0);
  EXPECT_EQ(Value(text, "outboxd_oldest_unacked_age_seconds"), 0);
  EXPECT_EQ(Value(text, "outboxd_connected"), 1);

  // Buckets are cumulative, end at +Inf with every event, and a local broker acks
  // within seconds of the commit (the sum is positive: no negative latencies).
  auto buckets = Buckets(text, "outboxd_commit_to_ack_seconds");
  ASSERT_GE(buckets.size(), 2u) << text;
  for (size_t i = 1; i < buckets.size(); ++i) {
    EXPECT_LE(buckets[i - 1].second, buckets[i].second) << "le=" << buckets[i].first;
  }
  EXPECT_EQ(buckets.back().first, "+Inf");
  EXPECT_EQ(buckets.back().second, 50);
  EXPECT_EQ(Value(text, R"(outboxd_commit_to_ack_seconds_bucket{le="10"})"), 50) << text;
  EXPECT_GT(Value(text, "outboxd_commit_to_ack_seconds_sum"), 0);
  // Each of the 5 streamed transactions' pickup, split at the walsender's send time.
  for (const char* stage : {"postgresql", "relay"}) {
    const std::string series = absl::StrCat("outboxd_pickup_seconds_count{stage=\"", stage, "\"}");
    EXPECT_EQ(Value(text, series), 5) << text;
    EXPECT_EQ(Value(text, absl::StrCat("outboxd_pickup_seconds_bucket{stage=\"", stage,
                                       "\",le=\"10\"}")),
              5)
        << text;
  }

  // The confirmed LSN moved past every event's commit, and never past what was read.
  pg::Lsn newest_commit = 0;
  for (const auto& m : h.collector().Messages()) {
    newest_commit = std::max(newest_commit, pg::ParseLsn(m.Header("lsn").value_or("")).value_or(0));
  }
  ASSERT_TRUE(WaitUntil(absl::Seconds(10),
                        [&] {
                          text = h.Metrics(h.relay());
                          return Value(text, "outboxd_confirmed_lsn") >=
                                 static_cast<double>(newest_commit);
                        }))
      << pg::FormatLsn(newest_commit) << "\n"
      << text;
  EXPECT_GT(Value(text, "outboxd_confirmed_lsn"), confirmed_before);
  EXPECT_GE(Value(text, "outboxd_received_lsn"), Value(text, "outboxd_confirmed_lsn"));
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

TEST(RelayHealth, BrokerOutageTurnsHealthzUnhealthyAfterTheStallThresholdAndBackAfter) {
  RelayHarness h(kTopics);
  h.StartRelay({"--healthz-stall", "2s"});
  ASSERT_TRUE(WaitUntil(absl::Seconds(10), [&] { return h.HealthStatus(h.relay()) == 200; }));

  ASSERT_TRUE(h.cluster().SetAllBrokersDown().ok());
  // One event in flight first: with nothing in flight the relay rightly confirms the
  // server's keepalive position, which can lie inside the big transaction's WAL while
  // it is still being decoded, and the gauge would then show less than it holds.
  InsertEvents(h, "pedido.confirmado", 1);
  ASSERT_TRUE(WaitUntil(absl::Seconds(10), [&] {
    return Value(h.Metrics(h.relay()), "outboxd_events_in_flight") >= 1;
  }));
  // About 3 MB of WAL the slot must keep while nothing can be acknowledged.
  InsertEvents(h, "pedido.confirmado", 3000, 1000);
  constexpr double kMegabyte = 1 << 20;

  std::pair<int, std::string> health =
      WaitForHttpStatus(h.relay(), "/healthz", 503, absl::Seconds(30));
  ASSERT_EQ(health.first, 503) << health.second << h.relay().Log();
  EXPECT_GE(StalledForSeconds(health.second), 2) << "503 before the stall threshold\n"
                                                 << health.second;
  EXPECT_THAT(health.second, HasSubstr("events in flight"));

  // The stall shows in the gauges too: events in flight, their age, the WAL held.
  std::string text;
  ASSERT_TRUE(WaitUntil(absl::Seconds(20), [&] {
    text = h.Metrics(h.relay());
    return Value(text, "outboxd_slot_lag_bytes") >= kMegabyte;
  })) << text;
  EXPECT_GT(Value(text, "outboxd_events_in_flight"), 0);
  EXPECT_GE(Value(text, "outboxd_oldest_unacked_age_seconds"), 2);
  EXPECT_EQ(Value(text, "outboxd_connected"), 1);

  ASSERT_TRUE(h.cluster().SetAllBrokersUp().ok());
  health = WaitForHttpStatus(h.relay(), "/healthz", 200, absl::Seconds(60));
  ASSERT_EQ(health.first, 200) << health.second << h.relay().Log();
  EXPECT_EQ(health.second, "ok\n");
  ASSERT_TRUE(WaitUntil(absl::Seconds(60), [&] { return DistinctDelivered(h) == 3001; }))
      << DistinctDelivered(h) << " of 3001 delivered";
  ASSERT_TRUE(WaitUntil(absl::Seconds(30), [&] {
    text = h.Metrics(h.relay());
    return Value(text, "outboxd_slot_lag_bytes") < kMegabyte &&
           Value(text, "outboxd_events_in_flight") == 0;
  })) << text;
  EXPECT_EQ(Value(text, "outboxd_oldest_unacked_age_seconds"), 0);
  EXPECT_GE(Value(text, R"(outboxd_events_published_total{topic="pedido.confirmado"})"), 3001);
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
  // The log says it once when the stall starts and once when it ends (StallWatch).
  const std::string log = h.relay().Log();
  EXPECT_EQ(Count(log, "warning stalled: no broker acknowledgement for "), 1) << log;
  EXPECT_EQ(Count(log, "info stall over: "), 1) << log;
  EXPECT_LT(log.find("stalled: "), log.find("stall over: "));
}

TEST(RelayHealth, UnhealthyWhilePostgresIsDownAndHealthyOnceStreamingAgain) {
  PrivateCluster cluster;
  RelayHarness h(kTopics, 1, cluster.conninfo());
  h.StartRelay({"--healthz-stall", "2s"});
  ASSERT_TRUE(WaitUntil(absl::Seconds(10), [&] { return h.HealthStatus(h.relay()) == 200; }));

  ASSERT_TRUE(cluster.Stop());
  std::pair<int, std::string> health =
      WaitForHttpStatus(h.relay(), "/healthz", 503, absl::Seconds(20));
  ASSERT_EQ(health.first, 503) << health.second << h.relay().Log();
  EXPECT_THAT(health.second, HasSubstr("not streaming from PostgreSQL"));
  std::string text = h.Metrics(h.relay());
  EXPECT_EQ(Value(text, "outboxd_connected"), 0) << text;

  ASSERT_TRUE(cluster.Start());
  ASSERT_TRUE(WaitUntil(absl::Seconds(60), [&] { return h.HealthStatus(h.relay()) == 200; }))
      << h.relay().Log();
  text = h.Metrics(h.relay());
  EXPECT_GE(Value(text, "outboxd_reconnects_total"), 1) << text;
  EXPECT_EQ(Value(text, "outboxd_connected"), 1) << text;
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
  // Each reconnect attempt is logged, and each connection with the slot's position.
  const std::string log = h.relay().Log();
  EXPECT_GE(Count(log, "replication stream lost: "), 1) << log;
  EXPECT_GE(Count(log, "connected to PostgreSQL at "), 2) << log;
  EXPECT_THAT(log, HasSubstr(" confirmed up to "));
}

}  // namespace
}  // namespace outboxd::test
