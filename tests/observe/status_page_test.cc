// The status page (issue 18, point 4) in-process: GET / on the metrics endpoints is
// one self-contained HTML page with every section a person looks for, for both modes,
// and it loads nothing from elsewhere (the metrics port is often the only thing
// reachable). tests/integration/status_page_browser_test.cc runs its script in a real
// browser against `outboxd run`.
#include "observe/status_page.h"

#include <optional>
#include <regex>
#include <string>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "observe/endpoints.h"
#include "observe/health.h"
#include "observe/http_server.h"
#include "observe/metrics.h"
#include "observe/status_history.h"
#include "support/http_client.h"
#include "support/wait_until.h"

namespace outboxd::observe {
namespace {

constexpr absl::Duration kPatience = absl::Seconds(30);

test::HttpReply GetStatusPage(RelayMode mode) {
  Metrics metrics(mode);
  HealthState health;
  HttpServer http;
  AddMetricsEndpoints(http, metrics, health, {});
  if (!http.Start("127.0.0.1:0").ok()) return {};
  return test::Exchange("127.0.0.1", http.port(), "GET /", kPatience);
}

TEST(StatusPage, IsOneHtmlPageWithEverySection) {
  test::HttpReply reply = GetStatusPage(RelayMode::kCdc);
  ASSERT_EQ(reply.status, 200);
  EXPECT_EQ(reply.Header("Content-Type"), "text/html; charset=utf-8");
  EXPECT_TRUE(absl::StartsWith(reply.body, "<!DOCTYPE html>")) << reply.body.substr(0, 80);
  EXPECT_TRUE(absl::StrContains(reply.body, "</html>"));
  EXPECT_TRUE(absl::StrContains(reply.body, R"(<b id="mode">cdc</b>)"));
  for (const char* id :
       {"state", "wal-status", "safe-wal", "slot-lag", "oldest-age", "rate", "rate-chart",
        "latency", "latency-chart", "published", "dead-letters", "standby-state"}) {
    EXPECT_TRUE(absl::StrContains(reply.body, std::string("id=\"") + id + "\"")) << id;
  }
  // It refreshes itself from the relay's own endpoints, and tells where the dead
  // letters' reasons are.
  for (const char* text : {"fetch(", "'/metrics'", "'/healthz'", "'/readyz'", "'/status.json'",
                           "setInterval(", "outboxd dead-letter list"}) {
    EXPECT_TRUE(absl::StrContains(reply.body, text)) << text;
  }
}

TEST(StatusPage, LoadsNothingFromElsewhere) {
  test::HttpReply reply = GetStatusPage(RelayMode::kCdc);
  ASSERT_EQ(reply.status, 200);
  const std::regex external(R"((src|href|action)\s*=\s*["']?\s*(https?:)?//)", std::regex::icase);
  EXPECT_FALSE(std::regex_search(reply.body, external));
  EXPECT_FALSE(absl::StrContains(reply.body, "http://"));
  EXPECT_FALSE(absl::StrContains(reply.body, "https://"));
  EXPECT_FALSE(absl::StrContains(reply.body, "@import"));
  EXPECT_FALSE(absl::StrContains(reply.body, "url("));
}

TEST(StatusPage, NamesThePollMode) {
  test::HttpReply reply = GetStatusPage(RelayMode::kPoll);
  ASSERT_EQ(reply.status, 200);
  EXPECT_TRUE(absl::StrContains(reply.body, R"(<b id="mode">poll</b>)"));
}

TEST(StatusPage, ServesTheHistoryItsChartsDrawAsJson) {
  Metrics metrics(RelayMode::kCdc);
  HealthState health;
  HttpServer http;
  AddMetricsEndpoints(http, metrics, health, {});
  ASSERT_TRUE(http.Start("127.0.0.1:0").ok());
  // The first sample is taken at once, on the history's own thread: wait for it.
  test::HttpReply reply;
  test::WaitUntil(kPatience, [&] {
    reply = test::Exchange("127.0.0.1", http.port(), "GET /status.json", kPatience);
    return reply.status != 200 || absl::StrContains(reply.body, "[[");
  });
  ASSERT_EQ(reply.status, 200);
  EXPECT_EQ(reply.Header("Content-Type"), "application/json");
  // One sample (the next is 2 s away), nothing published yet.
  EXPECT_TRUE(std::regex_match(reply.body,
                               std::regex(R"(\{"interval_s":2,"samples":\[\[[0-9]+,0,0,0\]\]\})")))
      << reply.body;
}

TEST(StatusHistory, KeepsTheLastSamplesOfThePublishedAndLatencyTotals) {
  Metrics metrics(RelayMode::kCdc);
  StatusHistory history(metrics, absl::Seconds(2), /*keep=*/2);
  const absl::Time t0 = absl::FromUnixMillis(1796284800000);
  history.Sample(t0);
  metrics.Acknowledged("a", 0.5);
  metrics.Acknowledged("b", 0.25);
  metrics.Acknowledged("b", std::nullopt);  // counted, latency unknown
  history.Sample(t0 + absl::Seconds(2));
  metrics.Acknowledged("a", 1.0);
  history.Sample(t0 + absl::Seconds(4));
  EXPECT_EQ(history.Json(),
            R"({"interval_s":2,"samples":[[1796284802000,3,0.75,2],[1796284804000,4,1.75,3]]})");
}

}  // namespace
}  // namespace outboxd::observe
