// Issue 3 point 6, while streaming: the relay reads its slot's wal_status every few
// seconds. The slot falls behind for real (the broker is down, so nothing is
// acknowledged and nothing confirmed, while other writes fill the WAL past a tiny
// max_slot_wal_keep_size): the running relay warns once when the slot turns
// `unreserved`, and when a checkpoint removes the WAL it still needed (`lost`) it
// stops with the same message and exit code as at start. (PostgreSQL 15 terminates
// the walsender of a slot it invalidates, and an active slot reads `unreserved` until
// then: the relay meets `lost` on reconnecting, which checks it like the periodic
// check does.)
#include <optional>
#include <string>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "pg/slot.h"
#include "support/metrics_text.h"
#include "support/private_cluster.h"
#include "support/relay_harness.h"

namespace outboxd::test {
namespace {

const std::vector<std::string> kTopics = {"pedido.confirmado"};
constexpr char kUnreservedWarning[] = "is about to lose WAL";
// The relay's periodic slot check (src/relay/slot_watch.cc), as pg_stat_activity shows it:
// the query src/pg/slot.cc sends, for any slot (a LIKE pattern).
const std::string kSlotCheckQuery = pg::SlotQuery("%");

size_t Count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// One more WAL segment behind the slot: a write outside the publication, then a
// segment switch.
void FillOneSegment(pg::Connection& conn) {
  ASSERT_TRUE(conn.Exec("INSERT INTO filler SELECT generate_series(1, 100); "
                        "SELECT pg_switch_wal()")
                  .ok());
}

TEST(SlotWatch, RunningRelayWarnsOnceWhenUnreservedAndStopsWhenTheSlotIsLost) {
  PrivateCluster cluster("max_slot_wal_keep_size = 1MB");
  RelayHarness h(kTopics, 3, cluster.conninfo());
  auto conn = h.db().Connect();
  ASSERT_TRUE(conn.Exec("CREATE TABLE filler (x int)").ok());
  h.StartRelay({"--slot-check-interval", "200ms"});
  ASSERT_TRUE(conn.Exec("INSERT INTO outbox (aggregate_id, tipo, payload) "
                        "VALUES ('a', 'pedido.confirmado', '{}')")
                  .ok());
  ASSERT_TRUE(h.collector().WaitForCount(1, absl::Seconds(30))) << h.relay().Log();

  // The broker goes away with one event in flight: the slot can confirm nothing more.
  ASSERT_TRUE(h.cluster().SetAllBrokersDown().ok());
  ASSERT_TRUE(conn.Exec("INSERT INTO outbox (aggregate_id, tipo, payload) "
                        "VALUES ('a', 'pedido.confirmado', '{}')")
                  .ok());
  bool warned = false;
  for (int i = 0; i < 10 && !warned; ++i) {
    FillOneSegment(conn);
    warned = h.relay().WaitForLog(kUnreservedWarning, absl::Seconds(1));
  }
  ASSERT_TRUE(warned) << "no unreserved warning from the periodic check\n" << h.relay().Log();
  EXPECT_EQ(h.db().Scalar("SELECT wal_status FROM pg_replication_slots WHERE slot_name = '" +
                          h.slot() + "'"),
            "unreserved");
  // Still unreserved over many more checks: warned once per change, not per check.
  ASSERT_TRUE(h.WaitForQueryRounds(kSlotCheckQuery, 5, absl::Seconds(30))) << h.relay().Log();
  EXPECT_TRUE(h.relay().Running()) << h.relay().Log();
  EXPECT_EQ(Count(h.relay().Log(), kUnreservedWarning), 1u) << h.relay().Log();

  // A checkpoint removes the segments the slot still needed.
  ASSERT_TRUE(conn.Exec("CHECKPOINT").ok());
  std::optional<int> code = h.relay().Wait(absl::Seconds(30));
  ASSERT_TRUE(code.has_value()) << "relay still running with a lost slot\n" << h.relay().Log();
  EXPECT_EQ(*code, 2) << h.relay().Log();
  EXPECT_EQ(h.db().Scalar("SELECT wal_status FROM pg_replication_slots WHERE slot_name = '" +
                          h.slot() + "'"),
            "lost");
  const std::string log = h.relay().Log();
  EXPECT_NE(log.find("has lost WAL"), std::string::npos) << log;
  EXPECT_NE(log.find("outboxd setup --recreate-slot"), std::string::npos) << log;
}

// Issue 20 point 1: with the default check interval (5 s), every answer used to be
// dropped by the position recorder, which frees the same connection every second,
// so no check ever reached the relay. The warning, the metrics and /healthz all say
// it now.
TEST(SlotWatch, UnreservedSlotIsReportedInTheLogTheMetricsAndHealthzAtTheDefaultInterval) {
  PrivateCluster cluster("max_slot_wal_keep_size = 1MB");
  RelayHarness h(kTopics, 3, cluster.conninfo());
  auto conn = h.db().Connect();
  ASSERT_TRUE(conn.Exec("CREATE TABLE filler (x int)").ok());
  h.StartRelay();
  ASSERT_TRUE(WaitForMetric(h.relay(), "outboxd_slot_wal_status{status=\"reserved\"}", 1,
                            absl::Seconds(30)))
      << h.Metrics(h.relay());
  ASSERT_TRUE(h.cluster().SetAllBrokersDown().ok());
  ASSERT_TRUE(conn.Exec("INSERT INTO outbox (aggregate_id, tipo, payload) "
                        "VALUES ('a', 'pedido.confirmado', '{}')")
                  .ok());
  // Other tables' WAL until the server itself says unreserved (no checkpoint: that
  // would make the slot lost).
  for (int i = 0; i < 20 && h.db().Scalar("SELECT wal_status FROM pg_replication_slots "
                                          "WHERE slot_name = '" +
                                          h.slot() + "'") != "unreserved";
       ++i) {
    FillOneSegment(conn);
  }
  ASSERT_EQ(h.db().Scalar("SELECT wal_status FROM pg_replication_slots WHERE slot_name = '" +
                          h.slot() + "'"),
            "unreserved");

  EXPECT_TRUE(WaitForMetric(h.relay(), "outboxd_slot_wal_status{status=\"unreserved\"}", 1,
                            absl::Seconds(60)))
      << h.Metrics(h.relay()) << h.relay().Log();
  std::optional<double> safe =
      MetricValue(h.Metrics(h.relay()), "outboxd_slot_safe_wal_size_bytes");
  ASSERT_TRUE(safe.has_value());
  EXPECT_LE(*safe, 0);
  EXPECT_EQ(MetricValue(h.Metrics(h.relay()), "outboxd_slot_wal_status{status=\"reserved\"}"), 0);
  auto [code, body] = HttpGetFromLog(h.relay(), "/healthz");
  EXPECT_EQ(code, 503);
  EXPECT_NE(body.find("replication slot " + h.slot() + " is about to lose WAL"), std::string::npos)
      << body;
  EXPECT_TRUE(h.relay().WaitForLog(kUnreservedWarning, absl::Seconds(5))) << h.relay().Log();
  EXPECT_EQ(Count(h.relay().Log(), kUnreservedWarning), 1u) << h.relay().Log();
  EXPECT_TRUE(h.relay().Running()) << h.relay().Log();
}

}  // namespace
}  // namespace outboxd::test
