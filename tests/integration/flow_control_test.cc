// Issue 3 point 7, bounded memory: reading the stream pauses while the produced,
// unacknowledged events pass --max-in-flight or --max-in-flight-bytes, and the relay
// still keeps the walsender informed meanwhile (docs/architecture.md trap "silent client killed
// by wal_sender_timeout": a paused reader does not read the keepalive requests, which
// wait behind the data in the socket, so only its own feedback timer keeps it alive).
//
// A slow broker (round-trip delay) and small limits make the relay spend many
// wal_sender_timeouts paused inside one large transaction.
#include <set>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "support/private_cluster.h"
#include "support/relay_harness.h"

namespace outboxd::test {
namespace {

const std::vector<std::string> kTopics = {"pedido.confirmado"};

// "in flight at most N events, M bytes": the relay's own high-water marks, logged as
// it stops (exact, where sampling /metrics could miss a peak).
bool ParsePeaks(const std::string& log, uint64_t& events, uint64_t& bytes) {
  const std::string marker = "in flight at most ";
  size_t at = log.find(marker);
  if (at == std::string::npos) return false;
  at += marker.size();
  size_t comma = log.find(" events, ", at);
  size_t end = log.find(" bytes", comma);
  if (comma == std::string::npos || end == std::string::npos) return false;
  return absl::SimpleAtoi(log.substr(at, comma - at), &events) &&
         absl::SimpleAtoi(log.substr(comma + 9, end - comma - 9), &bytes);
}

std::string ReadFile(const std::string& path) {
  std::string text;
  if (FILE* f = std::fopen(path.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) text.append(buf, n);
    std::fclose(f);
  }
  return text;
}

TEST(FlowControl, LargeTransactionOnASlowBrokerStaysWithinTheLimitsAndKeepsTheStream) {
  PrivateCluster cluster("wal_sender_timeout = 2s");
  RelayHarness h(kTopics, 3, cluster.conninfo());
  ASSERT_TRUE(h.collector().WaitUntilAssigned(absl::Seconds(30)));
  constexpr uint64_t kMaxEvents = 2000;
  constexpr uint64_t kMaxBytes = 200 * 1024;  // the binding limit: ~800 events
  h.StartRelay({"--max-in-flight", absl::StrCat(kMaxEvents), "--max-in-flight-bytes", "200KiB"});
  ASSERT_TRUE(h.cluster().SetAllBrokersRtt(100).ok());

  constexpr int kRows = 50000;
  auto conn = h.db().Connect();
  absl::Time start = absl::Now();
  ASSERT_TRUE(conn.Exec(absl::StrCat("INSERT INTO outbox (aggregate_id, tipo, payload) "
                                     "SELECT 'agg-' || n % 50, 'pedido.confirmado', "
                                     "jsonb_build_object('n', n, 'pad', repeat('x', 40)) "
                                     "FROM generate_series(1, ",
                                     kRows, ") n"))
                  .ok());
  const pg::Lsn head = h.CurrentWalLsn();
  ASSERT_TRUE(h.WaitForConfirmed(head, absl::Seconds(120))) << h.relay().Log();
  absl::Duration took = absl::Now() - start;

  // Every event arrived.
  ASSERT_TRUE(h.collector().WaitForCount(kRows, absl::Seconds(30)))
      << h.collector().Count() << " of " << kRows << "\n"
      << h.relay().Log();
  std::set<std::string> ids;
  for (const auto& m : h.collector().Messages()) ids.insert(m.Header("id").value_or(""));
  EXPECT_EQ(ids.size(), static_cast<size_t>(kRows));
  EXPECT_EQ(h.collector().Skipped(), 0);

  // The stream survived: no reconnect, and the server never timed the relay out.
  std::string metrics = h.Metrics(h.relay());
  EXPECT_NE(metrics.find("outboxd_reconnects_total 0\n"), std::string::npos) << metrics;
  EXPECT_EQ(h.relay().Log().find("reconnecting"), std::string::npos) << h.relay().Log();
  std::string server_log = ReadFile(cluster.dir() + "/server.log");
  EXPECT_EQ(server_log.find("replication timeout"), std::string::npos) << server_log;

  // In flight never above the limits (reading pauses once one is reached, so by at
  // most the one event read last), and the bytes limit was reached: reading did pause.
  ASSERT_EQ(h.StopRelay(), 0) << h.relay().Log();
  uint64_t peak_events = 0;
  uint64_t peak_bytes = 0;
  ASSERT_TRUE(ParsePeaks(h.relay().Log(), peak_events, peak_bytes)) << h.relay().Log();
  constexpr uint64_t kOneEventAtMost = 400;  // key, payload and headers of one row
  EXPECT_LE(peak_events, kMaxEvents);
  EXPECT_LE(peak_bytes, kMaxBytes + kOneEventAtMost);
  EXPECT_GE(peak_bytes, kMaxBytes);
  std::printf(
      "%d-row transaction, wal_sender_timeout 2s, broker rtt 100ms: %s, %zu events delivered, "
      "in flight at most %lu events / %lu bytes (limit %lu bytes)\n",
      kRows, absl::FormatDuration(absl::Trunc(took, absl::Milliseconds(1))).c_str(), ids.size(),
      static_cast<unsigned long>(peak_events), static_cast<unsigned long>(peak_bytes),
      static_cast<unsigned long>(kMaxBytes));
}

}  // namespace
}  // namespace outboxd::test
