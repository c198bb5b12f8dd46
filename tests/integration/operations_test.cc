// Day-2 operations against the running relay: cleanup never deletes a row whose
// event the broker has not acknowledged (the relay records its acknowledged position
// in outbox_relay_state), and `outboxd status` reports the oldest unacknowledged
// event, with --max-age as an alert.
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "support/metrics_text.h"
#include "support/private_cluster.h"
#include "support/relay_harness.h"

namespace outboxd::test {
namespace {

const std::vector<std::string> kTopics = {"pedido.confirmado"};

void InsertEvents(pg::Connection& conn, const std::string& batch, int n) {
  for (int i = 0; i < n; ++i) {
    auto r = conn.Exec(absl::StrFormat(
        "INSERT INTO outbox (aggregate_id, tipo, payload) VALUES ('%s-%d', 'pedido.confirmado', "
        "'{\"batch\": \"%s\", \"i\": %d}')",
        batch, i % 5, batch, i));
    ASSERT_TRUE(r.ok()) << r.status();
  }
}

// `outboxd <args> --pg <the test database>`: its exit code, its output in `out`.
int Outboxd(RelayHarness& h, std::vector<std::string> args, std::string* out) {
  args.insert(args.end(), {"--pg", h.db().conninfo()});
  return h.RunOutboxd(std::move(args), out);
}

int CountBatch(TestDatabase& db, const std::string& batch) {
  return std::stoi(db.Scalar(
      absl::StrCat("SELECT count(*) FROM outbox WHERE payload->>'batch' = '", batch, "'")));
}

// What the relay's position recorder (src/outbox/relay_state.cc) and its cleanup
// (src/ops/cleanup.cc) run, as pg_stat_activity shows it.
constexpr char kHorizonQuery[] = "SELECT pg_snapshot_xmin%";

// Waits until the cleanup job inside `outboxd run` has completed `rounds` more rounds
// (outboxd_cleanup_rounds_total): a round that deletes nothing leaves no other trace.
bool WaitForCleanupRounds(RelayHarness& h, int rounds) {
  const double done = ScrapeMetric(h.relay(), "outboxd_cleanup_rounds_total").value_or(0);
  return WaitForMetric(h.relay(), "outboxd_cleanup_rounds_total", done + rounds, absl::Seconds(30));
}

// The test: during a broker outage, cleanup with retention 0 keeps every
// unacknowledged row and deletes the acknowledged ones; after the outage, the rest.
TEST(Operations, CleanupDuringABrokerOutageKeepsEveryUnacknowledgedRow) {
  RelayHarness h(kTopics);
  h.StartRelay({"--cleanup-interval", "0s"});
  auto conn = h.db().Connect();
  InsertEvents(conn, "acked", 20);
  ASSERT_TRUE(h.collector().WaitForCount(20, absl::Seconds(30)));
  std::string status;
  ASSERT_TRUE(WaitForStatus(h, "\"unacked\":0,", absl::Seconds(15), &status)) << status;

  ASSERT_TRUE(h.cluster().SetAllBrokersDown().ok());
  InsertEvents(conn, "outage", 30);
  // The position recorder goes round several times with the broker away (a horizon
  // taken after the rows, then the ticks that would record it): the recorded position
  // must not move past the unacknowledged rows whatever else happens.
  ASSERT_TRUE(h.WaitForQueryRounds(kHorizonQuery, 3, absl::Seconds(30))) << h.relay().Log();
  std::string out;
  ASSERT_EQ(Outboxd(h, {"cleanup", "--retention", "0s", "--batch", "7"}, &out), 0) << out;
  EXPECT_EQ(CountBatch(h.db(), "acked"), 0) << out;
  EXPECT_EQ(CountBatch(h.db(), "outage"), 30) << out;

  // status sees them, and --max-age turns their age into exit code 1.
  ASSERT_EQ(Outboxd(h, {"status", "--json", "--slot", h.slot()}, &status), 0) << status;
  EXPECT_TRUE(absl::StrContains(status, "\"mode\":\"cdc\",\"slot_active\":true")) << status;
  EXPECT_TRUE(absl::StrContains(status, "\"unacked\":30,")) << status;
  EXPECT_EQ(Outboxd(h, {"status", "--slot", h.slot(), "--max-age", "2s"}, &out), 1) << out;
  EXPECT_TRUE(absl::StrContains(out, "more than --max-age 2s")) << out;
  EXPECT_EQ(Outboxd(h, {"status", "--slot", h.slot(), "--max-age", "1h"}, &out), 0) << out;

  ExpectCleanAfterTheOutage(h, 50);
}

// The same job inside `outboxd run`, on its interval.
TEST(Operations, RunDeletesAcknowledgedRowsOnItsCleanupInterval) {
  RelayHarness h(kTopics);
  h.StartRelay({"--cleanup-interval", "1s", "--retention", "0s"});
  auto conn = h.db().Connect();
  InsertEvents(conn, "first", 10);
  ASSERT_TRUE(h.collector().WaitForCount(10, absl::Seconds(30)));
  EXPECT_TRUE(h.db().WaitForScalar("SELECT count(*) FROM outbox", "0")) << h.relay().Log();

  ASSERT_TRUE(h.cluster().SetAllBrokersDown().ok());
  InsertEvents(conn, "held", 10);
  // Three rounds from now: at least two began after the rows were committed.
  ASSERT_TRUE(WaitForCleanupRounds(h, 3)) << h.relay().Log();
  EXPECT_EQ(CountBatch(h.db(), "held"), 10) << h.relay().Log();
  ASSERT_TRUE(h.cluster().SetAllBrokersUp().ok());
  ASSERT_TRUE(h.collector().WaitForCount(20, absl::Seconds(60))) << h.relay().Log();
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
  EXPECT_TRUE(absl::StrContains(h.relay().Log(), "cleanup: deleted")) << h.relay().Log();
}

// Issue 28 point 6: an idle relay writes nothing. Its recorder wrote the acknowledged
// position every second, its own transaction moving the next horizon: one xid and
// some WAL a second on a database with nothing to relay. It records again as soon as
// there is something new.
TEST(Operations, AnIdleRelayWritesNothingUntilThereIsSomethingToRecord) {
  // A cluster of its own: what other tests write on the shared one moves the horizon
  // past transactions that are not the recorder's, which it rightly records.
  PrivateCluster cluster;
  RelayHarness h(kTopics, 3, cluster.conninfo());
  h.StartRelay();
  auto conn = h.db().Connect();
  InsertEvents(conn, "first", 3);
  ASSERT_TRUE(h.collector().WaitForCount(3, absl::Seconds(30)));
  std::string status;
  ASSERT_TRUE(WaitForStatus(h, "\"unacked\":0,", absl::Seconds(15), &status)) << status;
  // Ten rounds of the recorder: at most one more write (a horizon taken an interval
  // after the last acknowledgement, whenever the idle watermark passes it), not ten.
  const std::string kRow = "SELECT xmin::text || ' ' || acked_xid::text FROM outbox_relay_state";
  std::string idle = h.db().Scalar(kRow);
  int writes = 0;
  for (int round = 0; round < 10; ++round) {
    ASSERT_TRUE(h.WaitForQueryRounds(kHorizonQuery, 1, absl::Seconds(30))) << h.relay().Log();
    const std::string now = h.db().Scalar(kRow);
    if (now != idle) ++writes;
    idle = now;
  }
  EXPECT_LE(writes, 1) << "the idle relay kept rewriting its position";

  InsertEvents(conn, "second", 2);
  ASSERT_TRUE(h.collector().WaitForCount(5, absl::Seconds(30)));
  ASSERT_TRUE(WaitForStatus(h, "\"unacked\":0,", absl::Seconds(15), &status)) << status;
  EXPECT_NE(h.db().Scalar(kRow), idle);
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

// The horizon a position is recorded from is the oldest transaction still running in
// the whole server: one held open elsewhere keeps it below the events just acknowledged.
// Once it ends, the recorder records the newer horizon, though nothing new has been
// acknowledged since (a recorder that stopped after "recording once after the
// acknowledgements" left them unacknowledged in status for good).
TEST(Operations, AHorizonHeldBackByAnOpenTransactionIsRecordedOnceItEnds) {
  RelayHarness h(kTopics);
  h.StartRelay();
  auto blocker = h.db().Connect();
  ASSERT_TRUE(blocker.Exec("BEGIN").ok());
  ASSERT_TRUE(blocker.Exec("SELECT pg_current_xact_id()").ok());  // an xid, held open
  auto conn = h.db().Connect();
  InsertEvents(conn, "held", 3);
  ASSERT_TRUE(h.collector().WaitForCount(3, absl::Seconds(30)));
  ASSERT_TRUE(h.WaitForQueryRounds(kHorizonQuery, 3, absl::Seconds(30))) << h.relay().Log();
  std::string status;
  ASSERT_EQ(Outboxd(h, {"status", "--json", "--slot", h.slot()}, &status), 0) << status;
  EXPECT_TRUE(absl::StrContains(status, "\"unacked\":3,")) << status;

  ASSERT_TRUE(blocker.Exec("COMMIT").ok());
  EXPECT_TRUE(WaitForStatus(h, "\"unacked\":0,", absl::Seconds(30), &status)) << status;
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

// Before the relay ever recorded a position, nothing counts as acknowledged: the
// human table says so, and cleanup keeps everything.
TEST(Operations, WithoutARecordedPositionNothingIsDeletedAndStatusShowsTheAge) {
  RelayHarness h(kTopics);
  auto conn = h.db().Connect();
  InsertEvents(conn, "never", 3);
  std::string out;
  ASSERT_EQ(Outboxd(h, {"cleanup", "--retention", "0s"}, &out), 0) << out;
  EXPECT_EQ(CountBatch(h.db(), "never"), 3);
  ASSERT_EQ(Outboxd(h, {"status", "--slot", h.slot()}, &out), 0) << out;
  EXPECT_TRUE(absl::StrContains(out, "mode                  cdc\n")) << out;
  EXPECT_TRUE(absl::StrContains(out, "slot_active           no\n")) << out;
  EXPECT_TRUE(absl::StrContains(out, "unacked               3\n")) << out;
  EXPECT_TRUE(absl::StrContains(out, "dead_letter           0\n")) << out;
}

}  // namespace
}  // namespace outboxd::test
