// The status page (issue 18, point 4) in a real browser against `outboxd run`:
// headless Chromium (Debian's `chromium`, scripts/deps) loads GET /, its script fetches
// /metrics, /healthz, /readyz and /status.json, and the figures the page then shows
// (the DOM after the script ran) are the ones /metrics gives: mode, state, WAL status,
// events published, dead letters; a standby's page says it stands by. The test also
// saves a screenshot under its temp dir (docs/status-page.png was taken that way, with
// a few hundred events and a dead letter).
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "support/metrics_text.h"
#include "support/relay_harness.h"

namespace outboxd::test {
namespace {

constexpr int kEvents = 300;
constexpr int kBatches = 12;
// The browser's clock runs ahead of the wall clock (--virtual-time-budget): the page's
// 2 s refresh goes round a few times without the test waiting for it.
constexpr char kVirtualTimeMs[] = "9000";

int MetricsPort(ChildProcess& relay) {
  const std::string marker = "metrics on http://127.0.0.1:";
  const std::string log = relay.Log();
  const size_t at = log.find(marker);
  return at == std::string::npos ? -1 : std::atoi(log.c_str() + at + marker.size());
}

// The time of /status.json's newest sample (unix ms), or -1.
int64_t LastSampleMs(RelayHarness& h) {
  const std::string json = HttpGetFromLog(h.relay(), "/status.json").second;
  const size_t at = json.rfind(",[");
  const size_t first = json.find("[[");
  if (at != std::string::npos && at > first) return std::atoll(json.c_str() + at + 2);
  return first == std::string::npos ? -1 : std::atoll(json.c_str() + first + 2);
}

// Where `chromium` is on PATH ("" when it is not): ChildProcess execs a path.
std::string ChromiumPath() {
  FILE* p = popen("command -v chromium", "r");
  char buf[4096] = {};
  const bool read = fgets(buf, sizeof(buf), p) != nullptr;
  pclose(p);
  std::string path = read ? buf : "";
  while (!path.empty() && path.back() == '\n') path.pop_back();
  return path;
}

// Runs headless Chromium with `args` then the page's URL; returns what it printed.
std::string RunChromium(std::vector<std::string> args, int port, const std::string& profile) {
  std::vector<std::string> argv = {ChromiumPath(),
                                   "--headless",
                                   "--no-sandbox",
                                   "--disable-gpu",
                                   "--user-data-dir=" + profile,
                                   absl::StrCat("--virtual-time-budget=", kVirtualTimeMs)};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.push_back(absl::StrCat("http://127.0.0.1:", port, "/"));
  std::unique_ptr<ChildProcess> browser = ChildProcess::Start(argv);
  EXPECT_EQ(browser->Wait(absl::Seconds(120)), 0) << browser->Log();
  return browser->Log();
}

// The text of the element with id `id` in a dumped DOM ("" when absent).
std::string ElementText(const std::string& dom, const std::string& id) {
  std::smatch m;
  if (!std::regex_search(dom, m, std::regex("id=\"" + id + "\"[^>]*>([^<]*)<"))) return "";
  return m[1];
}

std::string WalStatusFromMetrics(const std::string& metrics) {
  for (const char* status : {"reserved", "extended", "unreserved", "lost"}) {
    if (MetricValue(metrics, absl::StrCat(R"(outboxd_slot_wal_status{status=")", status, "\"}")) ==
        1) {
      return status;
    }
  }
  return "unknown";
}

TEST(StatusPageBrowser, ShowsTheFiguresOfMetricsAfterItsScriptRan) {
  ASSERT_NE(ChromiumPath(), "")
      << "chromium is missing: run scripts/deps (it installs Debian's chromium)";
  RelayHarness h({"pedido.confirmado"});
  h.StartRelay();
  // In batches a history sample apart (observe/status_history.h), so the page's
  // charts have a curve to draw.
  for (int batch = 0; batch < kBatches; ++batch) {
    const int64_t before = LastSampleMs(h);
    h.db().Exec(absl::StrCat(
        "INSERT INTO outbox (aggregate_id, tipo, payload) SELECT 'pedido-' || (i % 13), ",
        "'pedido.confirmado', jsonb_build_object('n', i) FROM generate_series(1, ",
        10 + 15 * (batch % 3), ") i"));  // 10, 25, 40, ...: 300 in 12 batches
    ASSERT_TRUE(WaitUntil(absl::Seconds(30), [&] { return LastSampleMs(h) > before; }))
        << HttpGetFromLog(h.relay(), "/status.json").second;
  }
  // A JSON scalar can never be a message: dead-lettered.
  h.db().Exec(
      "INSERT INTO outbox (aggregate_id, tipo, payload) VALUES ('poison', "
      "'pedido.confirmado', '42')");
  const std::string published = R"(outboxd_events_published_total{topic="pedido.confirmado"})";
  ASSERT_TRUE(WaitForMetric(h.relay(), published, kEvents, absl::Seconds(60))) << h.relay().Log();
  ASSERT_TRUE(WaitForMetric(h.relay(), "outboxd_events_dead_lettered_total", 1, absl::Seconds(60)))
      << h.relay().Log();
  // The slot watch reports wal_status every 5 s: wait for its first report.
  ASSERT_TRUE(WaitUntil(absl::Seconds(30), [&] {
    return WalStatusFromMetrics(h.Metrics(h.relay())) != "unknown";
  })) << h.relay().Log();
  const int port = MetricsPort(h.relay());
  ASSERT_GT(port, 0) << h.relay().Log();
  const std::string dir = ::testing::TempDir() + "/status_page_browser_" + std::to_string(getpid());

  const std::string dom = RunChromium({"--dump-dom"}, port, dir + "/profile");
  const std::string metrics = h.Metrics(h.relay());
  EXPECT_EQ(ElementText(dom, "mode"), "cdc") << dom;
  EXPECT_EQ(ElementText(dom, "state"), "streaming") << dom;
  EXPECT_EQ(ElementText(dom, "standby-state"), "streaming") << dom;
  EXPECT_EQ(ElementText(dom, "wal-status"), WalStatusFromMetrics(metrics)) << dom;
  EXPECT_EQ(ElementText(dom, "published"),
            absl::StrCat(MetricValue(metrics, published).value_or(-1)))
      << dom;
  EXPECT_EQ(ElementText(dom, "dead-letters"),
            absl::StrCat(MetricValue(metrics, "outboxd_events_dead_lettered_total").value_or(-1)))
      << dom;
  EXPECT_NE(ElementText(dom, "oldest-age"), "-") << dom;
  EXPECT_NE(ElementText(dom, "latency"), "-") << dom;
  // The charts drew the server's history: a point per sample interval.
  std::smatch points;
  ASSERT_TRUE(std::regex_search(dom, points, std::regex(R"re(id="rate-chart" points="([^"]*)")re")))
      << dom;
  EXPECT_GE(std::count(points[1].first, points[1].second, ' '), kBatches - 1) << points[1];

  const std::string png = dir + "/status-page.png";
  RunChromium({"--screenshot=" + png, "--window-size=1200,900", "--hide-scrollbars"}, port,
              dir + "/profile");
  std::ifstream file(png, std::ios::binary);
  std::string head(8, '\0');
  file.read(head.data(), head.size());
  EXPECT_EQ(head, "\x89PNG\r\n\x1a\n") << "no screenshot at " << png;
  std::cout << "status page screenshot: " << png << "\n";

  // A second relay on the same slot stands by, and its page says so.
  std::unique_ptr<ChildProcess> standby = h.SpawnRelay();
  ASSERT_TRUE(standby->WaitForLog("standing by", absl::Seconds(30))) << standby->Log();
  EXPECT_EQ(WaitForHttpStatus(*standby, "/readyz", 200, absl::Seconds(30)).first, 200);
  const std::string standby_dom =
      RunChromium({"--dump-dom"}, MetricsPort(*standby), dir + "/profile");
  EXPECT_EQ(ElementText(standby_dom, "state"), "standing by") << standby_dom;
  EXPECT_EQ(ElementText(standby_dom, "standby-state"), "standing by") << standby_dom;
  standby->Signal(SIGTERM);
  EXPECT_EQ(standby->Wait(absl::Seconds(30)), 0) << standby->Log();
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

}  // namespace
}  // namespace outboxd::test
