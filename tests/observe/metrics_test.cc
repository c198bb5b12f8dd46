// The metric families both relays export, rendered by prometheus-cpp's text
// serializer; and the query sampler that feeds database-side gauges.
#include "observe/metrics.h"

#include <atomic>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "observe/query_sampler.h"
#include "support/metrics_text.h"
#include "support/pg_fixture.h"
#include "support/wait_until.h"

namespace outboxd::observe {
namespace {

using test::MetricValue;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(Metrics, RunExportsEveryFamilyAtZeroBeforeTheFirstEvent) {
  Metrics metrics(RelayMode::kCdc);
  const std::string text = metrics.Render();
  for (const char* series :
       {"outboxd_publish_errors_total", "outboxd_commit_to_ack_seconds_count",
        "outboxd_events_in_flight", "outboxd_oldest_unacked_age_seconds",
        "outboxd_reconnects_total", "outboxd_connected", "outboxd_unsafe_kafka_config",
        "outboxd_events_dead_lettered_total", "outboxd_confirmed_lsn", "outboxd_received_lsn",
        "outboxd_slot_lag_bytes"}) {
    EXPECT_EQ(MetricValue(text, series), 0.0) << series << "\n" << text;
  }
  EXPECT_THAT(text, HasSubstr("# TYPE outboxd_commit_to_ack_seconds histogram"));
  // The by-topic family has no series until its first topic (prometheus-cpp leaves an
  // empty family out).
  EXPECT_THAT(text, Not(HasSubstr("outboxd_events_published_total")));
  metrics.Acknowledged("pedido.confirmado", 0.001);
  EXPECT_THAT(metrics.Render(), HasSubstr("# TYPE outboxd_events_published_total counter"));
}

// A series per reason the relay declares (count 0) from the start; poll has none.
TEST(Metrics, CountsRejectedMessagesByReason) {
  Metrics metrics(RelayMode::kCdc);
  metrics.MessagesRejected("unsigned", 0);
  metrics.MessagesRejected("bad_signature", 0);
  EXPECT_EQ(MetricValue(metrics.Render(), R"(outboxd_messages_rejected_total{reason="unsigned"})"),
            0);
  metrics.MessagesRejected("unsigned");
  metrics.MessagesRejected("unsigned");
  metrics.MessagesRejected("bad_signature");
  const std::string text = metrics.Render();
  EXPECT_EQ(MetricValue(text, R"(outboxd_messages_rejected_total{reason="unsigned"})"), 2);
  EXPECT_EQ(MetricValue(text, R"(outboxd_messages_rejected_total{reason="bad_signature"})"), 1);
  Metrics poll(RelayMode::kPoll);
  poll.MessagesRejected("unsigned");
  EXPECT_THAT(poll.Render(), Not(HasSubstr("outboxd_messages_rejected_total")));
}

TEST(Metrics, CountsAcknowledgementsPerTopicAndObservesTheirLatency) {
  Metrics metrics(RelayMode::kCdc);
  for (int i = 0; i < 3; ++i) metrics.Acknowledged("pedido.confirmado", 0.004);
  metrics.Acknowledged("pedido.cancelado", 2.0);
  metrics.Acknowledged("pedido.cancelado", std::nullopt);  // stale report: counted only
  const std::string text = metrics.Render();
  EXPECT_EQ(MetricValue(text, R"(outboxd_events_published_total{topic="pedido.confirmado"})"), 3);
  EXPECT_EQ(MetricValue(text, R"(outboxd_events_published_total{topic="pedido.cancelado"})"), 2);
  EXPECT_EQ(MetricValue(text, "outboxd_commit_to_ack_seconds_count"), 4);
  EXPECT_EQ(MetricValue(text, R"(outboxd_commit_to_ack_seconds_bucket{le="0.002"})"), 0);
  EXPECT_EQ(MetricValue(text, R"(outboxd_commit_to_ack_seconds_bucket{le="0.0025"})"), 0);
  EXPECT_EQ(MetricValue(text, R"(outboxd_commit_to_ack_seconds_bucket{le="0.005"})"), 3);
  EXPECT_EQ(MetricValue(text, R"(outboxd_commit_to_ack_seconds_bucket{le="1"})"), 3);
  EXPECT_EQ(MetricValue(text, R"(outboxd_commit_to_ack_seconds_bucket{le="2.5"})"), 4);
  EXPECT_EQ(MetricValue(text, R"(outboxd_commit_to_ack_seconds_bucket{le="+Inf"})"), 4);
  EXPECT_NEAR(*MetricValue(text, "outboxd_commit_to_ack_seconds_sum"), 2.012, 1e-9);
}

// Issue 27, point 8: 3,000 event types under --topic "{type}" grew /metrics from 6.9 kB
// to 694 kB, a series per type kept forever. The first 100 topics keep their series;
// every later one counts in topic="(other)", and nothing is lost from the total.
TEST(Metrics, ThousandsOfTopicsKeepMetricsBounded) {
  Metrics metrics(RelayMode::kCdc);
  metrics.Acknowledged("pedido.confirmado", 0.001);
  const size_t one_topic = metrics.Render().size();
  for (int i = 0; i < 3000; ++i) {
    metrics.Acknowledged(absl::StrCat("cliente.evento-de-tipo-gerado-", i), 0.001);
  }
  metrics.Acknowledged("pedido.confirmado", 0.001);
  const std::string text = metrics.Render();
  EXPECT_LT(text.size(), one_topic + 100 * 120)
      << "from " << one_topic << " to " << text.size() << " bytes";
  EXPECT_EQ(MetricValue(text, R"(outboxd_events_published_total{topic="pedido.confirmado"})"), 2);
  EXPECT_EQ(
      MetricValue(text,
                  R"(outboxd_events_published_total{topic="cliente.evento-de-tipo-gerado-98"})"),
      1);
  EXPECT_EQ(
      MetricValue(text,
                  R"(outboxd_events_published_total{topic="cliente.evento-de-tipo-gerado-99"})"),
      std::nullopt);
  EXPECT_EQ(MetricValue(text, R"m(outboxd_events_published_total{topic="(other)"})m"), 2901);
  EXPECT_EQ(metrics.ReadTotals().published, 3002);
  EXPECT_TRUE(absl::StrContains(text, R"m(any later one counts in topic="(other)")m"));
}

TEST(Metrics, GaugesAndCountersShowWhatTheRelaySet) {
  Metrics metrics(RelayMode::kCdc);
  metrics.SetInFlight(40);
  metrics.SetConfirmedLsn(0x16B3748);
  metrics.SetReceivedLsn(0x16B3800);
  metrics.SetSlotLagBytes(8192);
  metrics.SetConnected(true);
  metrics.SetUnsafeKafkaConfig(true);
  metrics.PublishFailed();
  metrics.DeadLettered();
  metrics.Reconnected();
  metrics.Reconnected();
  const std::string text = metrics.Render();
  EXPECT_EQ(MetricValue(text, "outboxd_events_in_flight"), 40);
  EXPECT_EQ(MetricValue(text, "outboxd_confirmed_lsn"), 0x16B3748);
  EXPECT_EQ(MetricValue(text, "outboxd_received_lsn"), 0x16B3800);
  EXPECT_EQ(MetricValue(text, "outboxd_slot_lag_bytes"), 8192);
  EXPECT_EQ(MetricValue(text, "outboxd_connected"), 1);
  EXPECT_EQ(MetricValue(text, "outboxd_unsafe_kafka_config"), 1);
  EXPECT_EQ(MetricValue(text, "outboxd_publish_errors_total"), 1);
  EXPECT_EQ(MetricValue(text, "outboxd_events_dead_lettered_total"), 1);
  EXPECT_EQ(MetricValue(text, "outboxd_reconnects_total"), 2);
}

TEST(Metrics, OldestUnackedAgeKeepsGrowingUntilTheEventIsAcknowledged) {
  Metrics metrics(RelayMode::kCdc);
  const absl::Time set_at = absl::Now();
  metrics.SetOldestUnacked(set_at - absl::Seconds(12));
  double first = *MetricValue(metrics.Render(), "outboxd_oldest_unacked_age_seconds");
  EXPECT_GE(first, 12);
  EXPECT_LE(first, 12 + absl::ToDoubleSeconds(absl::Now() - set_at));
  EXPECT_TRUE(test::WaitUntil(
      absl::Seconds(10),
      [&] { return *MetricValue(metrics.Render(), "outboxd_oldest_unacked_age_seconds") > first; },
      absl::Milliseconds(1)));
  metrics.SetOldestUnacked(std::nullopt);
  EXPECT_EQ(MetricValue(metrics.Render(), "outboxd_oldest_unacked_age_seconds"), 0);
  metrics.SetOldestUnackedAge(absl::Seconds(90));
  EXPECT_NEAR(*MetricValue(metrics.Render(), "outboxd_oldest_unacked_age_seconds"), 90, 1);
}

TEST(Metrics, PollExportsTheSharedNamesAndNoSlotLsnOrDeadLetters) {
  Metrics metrics(RelayMode::kPoll);
  metrics.Acknowledged("pedido.confirmado", 0.3);
  metrics.BatchDone();
  const std::string text = metrics.Render();
  EXPECT_EQ(MetricValue(text, R"(outboxd_events_published_total{topic="pedido.confirmado"})"), 1);
  EXPECT_EQ(MetricValue(text, "outboxd_commit_to_ack_seconds_count"), 1);
  EXPECT_EQ(MetricValue(text, "outboxd_poll_batches_total"), 1);
  EXPECT_EQ(MetricValue(text, "outboxd_oldest_unacked_age_seconds"), 0);
  EXPECT_THAT(text, Not(HasSubstr("outboxd_slot_lag_bytes")));
  EXPECT_THAT(text, Not(HasSubstr("outboxd_confirmed_lsn")));
  EXPECT_THAT(text, Not(HasSubstr("outboxd_events_dead_lettered_total")));
}

TEST(QuerySampler, HandsEachResultToTheCallbackOnItsOwnThread) {
  auto db = test::TestDatabase::Create();
  std::atomic<int> samples{0};
  std::atomic<double> last{0};
  QuerySampler sampler(db->conninfo(), "SELECT $1::float8 * 2", {"21.25"}, absl::Milliseconds(20),
                       [&](std::optional<double> v) {
                         if (v) last = *v;
                         samples++;
                       });
  sampler.Start();
  EXPECT_TRUE(test::WaitUntil(
      absl::Seconds(10), [&] { return samples >= 3; }, absl::Milliseconds(10)))
      << samples;
  sampler.Stop();
  EXPECT_EQ(last, 42.5);
}

TEST(QuerySampler, ReportsNothingForNoRowAndStopsPromptlyWhateverTheInterval) {
  auto db = test::TestDatabase::Create();
  std::atomic<int> empty{0};
  QuerySampler sampler(db->conninfo(), "SELECT 1 WHERE $1 = 'never'", {"x"}, absl::Hours(1),
                       [&](std::optional<double> v) { empty += v ? 0 : 1; });
  sampler.Start();
  test::WaitUntil(
      absl::Seconds(10), [&] { return empty > 0; }, absl::Milliseconds(10));
  // With an hour's interval, Stop() returning at all shows it does not wait it out.
  sampler.Stop();
  EXPECT_EQ(empty, 1);
}

}  // namespace
}  // namespace outboxd::observe
