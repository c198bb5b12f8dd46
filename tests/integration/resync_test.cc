// Publishing from the table before streaming, with the slot created by the relay
// itself and its exported snapshot: the migration from a polling relay (rows left
// pending go out first, already-published ones never, rows inserted during the
// switch exactly once) and the recovery of a lost slot (setup --recreate-slot
// republishes what came after the last acknowledged position). Both procedures are
// run from docs/operations.md's own command blocks, so the page cannot drift from the binary.
#include <atomic>
#include <csignal>
#include <map>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "support/doc_commands.h"
#include "support/private_cluster.h"
#include "support/relay_harness.h"
#include "support/wait_until.h"

namespace outboxd::test {
namespace {

const std::vector<std::string> kTopics = {"pedido.confirmado"};

void MustExec(pg::Connection& conn, const std::string& sql) {
  auto r = conn.Exec(sql);
  ASSERT_TRUE(r.ok()) << sql << ": " << r.status();
}

// docs/operations.md's ```sh block starting with `marker` is a two-step procedure, `outboxd
// setup` then `outboxd run`: runs the setup as written (on the test's slot), expects
// `setup_says` in its output, and returns the run line for StartReadmeRelay.
std::vector<std::string> SetupFromReadme(RelayHarness& h, const std::string& marker,
                                         const std::string& setup_says) {
  const auto commands =
      DocCommands("docs/operations.md", marker, h.db().conninfo(), h.cluster().bootstraps());
  EXPECT_EQ(commands.size(), 2u);
  if (commands.size() != 2 || commands[0][0] != "setup" || commands[1][0] != "run") {
    ADD_FAILURE() << "docs/operations.md's " << marker
                  << " block is not `outboxd setup` then `outboxd run`";
    return {};
  }
  std::vector<std::string> setup = commands[0];
  setup.insert(setup.end(), {"--slot", h.slot()});
  std::string out;
  EXPECT_EQ(h.RunOutboxd(setup, &out), 0) << out;
  EXPECT_NE(out.find(setup_says), std::string::npos) << out;
  return commands[1];
}

// Starts the page's `outboxd run ...` line as the harness's relay, on the test's slot.
void StartReadmeRelay(RelayHarness& h, std::vector<std::string> run) {
  ASSERT_FALSE(run.empty());
  run.insert(run.begin(), BinPath("outboxd"));
  run.insert(run.end(), {"--slot", h.slot(), "--metrics", "127.0.0.1:0"});
  h.set_relay(ChildProcess::Start(run));
  ASSERT_TRUE(WaitForStreaming(h.relay())) << h.relay().Log();
}

// `n` single-row transactions of `label` over 7 aggregates; `published`: as a polling
// relay would have left them.
void InsertRows(pg::Connection& conn, const std::string& label, int n, bool published = false) {
  for (int i = 0; i < n; ++i) {
    MustExec(conn, absl::StrFormat(
                       "INSERT INTO outbox (aggregate_id, tipo, payload, publicado_em) VALUES "
                       "('agg-%d', 'pedido.confirmado', '{\"label\": \"%s\", \"i\": %d}', %s)",
                       i % 7, label, i, published ? "now()" : "NULL"));
  }
}

// Inserts one row per ~2 ms on its own connection until stopped.
class Writer {
 public:
  explicit Writer(std::string conninfo) {
    thread_ = std::thread([this, conninfo] {
      auto conn = pg::Connection::Open(conninfo);
      ASSERT_TRUE(conn.ok());
      for (int i = 0; !stop_; ++i) {
        InsertRows(*conn, absl::StrCat("switch-", i), 1);
        ++rows_;
        absl::SleepFor(absl::Milliseconds(2));
      }
    });
  }
  int Stop() {
    stop_ = true;
    thread_.join();
    return rows_;
  }
  int rows() const { return rows_; }
  bool WaitForRows(int n, absl::Duration timeout) {
    return WaitUntil(
        timeout, [&] { return rows_ >= n; }, absl::Milliseconds(10));
  }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<int> rows_{0};
  std::thread thread_;
};

// id -> times delivered, waiting until every id in `expected` arrived.
std::map<std::string, int> Deliveries(RelayHarness& h, const std::set<std::string>& expected,
                                      absl::Duration timeout) {
  std::map<std::string, int> times;
  WaitUntil(
      timeout,
      [&] {
        times.clear();
        for (const auto& m : h.collector().Messages()) ++times[m.Header("id").value_or("")];
        size_t found = 0;
        for (const std::string& id : expected) found += times.count(id);
        return found == expected.size();
      },
      absl::Milliseconds(200));
  return times;
}

std::set<std::string> Ids(RelayHarness& h, const std::string& where) {
  std::set<std::string> ids;
  pg::Result r = h.db().Exec("SELECT id::text FROM outbox WHERE " + where);
  for (int i = 0; i < r.rows(); ++i) ids.insert(std::string(r.Get(i, 0)));
  return ids;
}

// Per aggregate, Kafka order (one partition each) follows seq on first delivery.
void ExpectOrderPerAggregate(RelayHarness& h) {
  std::map<std::string, int64_t> seq_of;
  for (const OutboxRow& row : h.OutboxRows()) seq_of[row.id] = row.seq;
  auto messages = h.collector().Messages();
  std::sort(messages.begin(), messages.end(), [](const auto& a, const auto& b) {
    return std::tie(a.partition, a.offset) < std::tie(b.partition, b.offset);
  });
  std::map<std::string, int64_t> last;
  std::set<std::string> seen;
  for (const auto& m : messages) {
    std::string id = m.Header("id").value_or("");
    if (!seen.insert(id).second) continue;
    auto [it, fresh] = last.emplace(m.key, seq_of[id]);
    if (!fresh) {
      EXPECT_LT(it->second, seq_of[id]) << "aggregate " << m.key << " out of order";
      it->second = seq_of[id];
    }
  }
}

// Issue 5's migration: the table holds rows a polling relay published and rows it
// left pending; writers keep inserting during the switch. setup leaves the slot to
// the relay, which publishes exactly the pending rows, then streams: every pending
// and new row exactly once, no published row again.
TEST(Resync, MigrationFromPollingPublishesPendingRowsThenStreamsWithNoGapOrOverlap) {
  RelayHarness h(kTopics);  // its setup created the slot on an empty table: start over
  h.db().Exec(absl::StrCat("SELECT pg_drop_replication_slot('", h.slot(), "')"));
  auto conn = h.db().Connect();
  InsertRows(conn, "published", 40, /*published=*/true);
  InsertRows(conn, "pending", 300);

  // docs/operations.md "Migrating from a polling relay", as written.
  std::vector<std::string> run =
      SetupFromReadme(h, "# migrating from a polling relay", "backfill of the 300 pending rows");
  EXPECT_EQ(h.db().Scalar("SELECT count(*) FROM pg_replication_slots WHERE slot_name = '" +
                          h.slot() + "'"),
            "0");
  // Issue 28 point 7: status said "does not exist ... run outboxd setup" (exit 2) here.
  std::string status;
  EXPECT_EQ(h.RunOutboxd({"status", "--pg", h.db().conninfo(), "--slot", h.slot()}, &status), 0)
      << status;
  EXPECT_NE(status.find("not created yet: outboxd run creates it, after publishing the 300 "
                        "outbox rows setup asked for"),
            std::string::npos)
      << status;

  // Rows inserted before the relay takes its snapshot and after it streams.
  Writer writer(h.db().conninfo());
  ASSERT_TRUE(writer.WaitForRows(25, absl::Seconds(60)));
  StartReadmeRelay(h, run);
  ASSERT_TRUE(writer.WaitForRows(writer.rows() + 25, absl::Seconds(60)));
  int written = writer.Stop();
  EXPECT_NE(h.relay().Log().find("backfill done"), std::string::npos) << h.relay().Log();

  std::set<std::string> expected = Ids(h, "publicado_em IS NULL");
  ASSERT_EQ(expected.size(), 300u + written);
  std::map<std::string, int> times = Deliveries(h, expected, absl::Seconds(60));
  int missing = 0, repeated = 0;
  for (const std::string& id : expected) {
    missing += times.count(id) == 0;
    repeated += times.count(id) && times[id] > 1;
  }
  EXPECT_EQ(missing, 0) << h.relay().Log();
  EXPECT_EQ(repeated, 0) << "overlap between the backfill and the stream";
  for (const std::string& id : Ids(h, "publicado_em IS NOT NULL")) {
    EXPECT_EQ(times.count(id), 0u) << "already published row " << id << " sent again";
  }
  EXPECT_EQ(times.size(), expected.size());
  ExpectOrderPerAggregate(h);
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

// A relay killed in the middle of the backfill: the next one drops the unconfirmed
// slot, takes a new snapshot and publishes again; nothing is lost.
TEST(Resync, BackfillInterruptedByKillNineStartsOverAndLosesNothing) {
  RelayHarness h(kTopics);
  h.db().Exec(absl::StrCat("SELECT pg_drop_replication_slot('", h.slot(), "')"));
  auto conn = h.db().Connect();
  InsertRows(conn, "pending", 3000);
  std::string out;
  ASSERT_EQ(h.RunOutboxd({"setup", "--pg", h.db().conninfo(), "--slot", h.slot()}, &out), 0) << out;
  ASSERT_TRUE(h.cluster().SetAllBrokersRtt(50).ok());
  h.StartRelay({"--max-in-flight", "100"}, "created slot");
  ASSERT_TRUE(h.collector().WaitForCount(100, absl::Seconds(30))) << h.relay().Log();
  h.relay().Signal(SIGKILL);
  h.relay().Wait(absl::Seconds(10));
  ASSERT_LT(h.collector().Messages().size(), 3000u) << "the backfill ended before the kill";
  ASSERT_TRUE(h.cluster().SetAllBrokersRtt(0).ok());
  InsertRows(conn, "after", 20);

  h.StartRelay();
  std::set<std::string> expected = Ids(h, "true");
  std::map<std::string, int> times = Deliveries(h, expected, absl::Seconds(60));
  int missing = 0;
  for (const std::string& id : expected) missing += times.count(id) == 0;
  EXPECT_EQ(missing, 0) << h.relay().Log();
  ExpectOrderPerAggregate(h);
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

// Issue 3 point 6: the slot loses WAL while the relay is away (tiny
// max_slot_wal_keep_size); the relay refuses it; setup --recreate-slot, and the relay
// republishes every row after the last acknowledged position, events the lost WAL
// held included.
TEST(Resync, RecreateSlotAfterLostWalRepublishesEverythingAfterTheAcknowledgedPosition) {
  PrivateCluster cluster("max_slot_wal_keep_size = 1MB");
  RelayHarness h(kTopics, 3, cluster.conninfo());
  auto conn = h.db().Connect();
  h.StartRelay({"--cleanup-interval", "0s"});
  InsertRows(conn, "acked", 30);
  ASSERT_TRUE(h.collector().WaitForCount(30, absl::Seconds(30)));
  // The relay records its position every second: wait until it covers all 30.
  std::string out;
  ASSERT_TRUE(WaitUntil(absl::Seconds(30), [&] {
    h.RunOutboxd({"status", "--json", "--pg", h.db().conninfo(), "--slot", h.slot()}, &out);
    return out.find("\"unacked\":0,") != std::string::npos;
  })) << out;
  ASSERT_EQ(h.StopRelay(), 0);

  // Away: events land in WAL segments that a checkpoint then removes.
  for (int i = 0; i < 4; ++i) {
    InsertRows(conn, absl::StrCat("lost-", i), 5);
    MustExec(conn, "SELECT pg_switch_wal()");
  }
  MustExec(conn, "CHECKPOINT");
  ASSERT_EQ(h.db().Scalar("SELECT wal_status FROM pg_replication_slots WHERE slot_name = '" +
                          h.slot() + "'"),
            "lost");
  auto refused = h.SpawnRelay();
  ASSERT_EQ(refused->Wait(absl::Seconds(30)), 2) << refused->Log();

  // docs/operations.md "Slot trouble", as written.
  const std::vector<std::string> run =
      SetupFromReadme(h, "# stop every outboxd run on that slot", "dropped replication slot");
  std::string status;  // issue 28 point 7: the slot setup dropped is the relay's to create
  EXPECT_EQ(
      h.RunOutboxd({"status", "--json", "--pg", h.db().conninfo(), "--slot", h.slot()}, &status), 0)
      << status;
  EXPECT_NE(status.find("\"slot_exists\":false,\"backfill_rows\":20,"), std::string::npos)
      << status;
  StartReadmeRelay(h, run);
  InsertRows(conn, "after", 10);
  std::set<std::string> expected = Ids(h, "true");
  ASSERT_EQ(expected.size(), 60u);
  std::map<std::string, int> times = Deliveries(h, expected, absl::Seconds(60));
  int missing = 0, acked_again = 0;
  for (const std::string& id : expected) missing += times.count(id) == 0;
  for (const std::string& id : Ids(h, "payload->>'label' = 'acked'")) acked_again += times[id] > 1;
  EXPECT_EQ(missing, 0) << h.relay().Log();
  EXPECT_EQ(acked_again, 0) << "acknowledged events republished";
  ExpectOrderPerAggregate(h);
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

// Issue 30: a backfill after a re-created slot republishes rows past the recorded
// horizon, which the slot's earlier incarnation may have streamed already (a long
// transaction holds the horizon back here, as the 15 s between running-transaction
// records does in a failover). With --dedupe it reads the topics back and skips the
// rows whose message (id and key, whatever its lsn) is there: each event once.
TEST(Resync, ABackfillSkipsTheRowsTheBrokerAlreadyHolds) {
  RelayHarness h(kTopics);
  auto conn = h.db().Connect();
  MustExec(conn, "CREATE TABLE hold_horizon (x int)");
  auto holder = h.db().Connect();
  MustExec(holder, "BEGIN; INSERT INTO hold_horizon VALUES (1)");  // an xid, kept open
  h.StartRelay();
  InsertRows(conn, "streamed", 30);
  ASSERT_TRUE(h.collector().WaitForCount(30, absl::Seconds(30)));
  ASSERT_TRUE(h.WaitForConfirmed(h.CurrentWalLsn(), absl::Seconds(30))) << h.relay().Log();
  ASSERT_EQ(h.StopRelay(), 0) << h.relay().Log();
  MustExec(holder, "COMMIT");

  std::string out;
  ASSERT_EQ(h.RunOutboxd(
                {"setup", "--pg", h.db().conninfo(), "--slot", h.slot(), "--recreate-slot"}, &out),
            0)
      << out;
  std::string status;
  h.RunOutboxd({"status", "--json", "--pg", h.db().conninfo(), "--slot", h.slot()}, &status);
  ASSERT_NE(status.find("\"backfill_rows\":30,"), std::string::npos)
      << "all 30 past the held horizon: " << status;
  h.StartRelay();
  InsertRows(conn, "after", 10);
  const std::set<std::string> expected = Ids(h, "true");
  ASSERT_EQ(expected.size(), 40u);
  ASSERT_TRUE(h.collector().WaitForCount(40, absl::Seconds(30))) << h.relay().Log();
  ASSERT_TRUE(h.WaitForConfirmed(h.CurrentWalLsn(), absl::Seconds(30))) << h.relay().Log();
  EXPECT_EQ(ExpectEachEventOnce(h), 0u) << h.relay().Log();
  EXPECT_NE(h.relay().Log().find("--dedupe: 30 of the 30 backfilled events were already at the "
                                 "broker"),
            std::string::npos)
      << h.relay().Log();
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

// Issue 27 point 5: a backfill waits for the --standby-slot standbys too (it published
// 40,004 events while the named standby was far behind, so a failover could lose rows
// consumers already had). Here the standby's slot stays put until the test moves it.
TEST(Resync, ABackfillWaitsUntilTheNamedStandbysHaveTheRows) {
  RelayHarness h(kTopics);
  h.db().Exec(absl::StrCat("SELECT pg_drop_replication_slot('", h.slot(), "')"));
  auto conn = h.db().Connect();
  InsertRows(conn, "pending", 20);
  const std::string standby = "standby_" + h.slot();
  h.db().Exec("SELECT pg_create_physical_replication_slot('" + standby + "', true)");
  std::string out;
  ASSERT_EQ(h.RunOutboxd({"setup", "--pg", h.db().conninfo(), "--slot", h.slot()}, &out), 0) << out;
  ASSERT_NE(out.find("backfill of the 20 pending rows"), std::string::npos) << out;

  h.StartRelay({"--standby-slot", standby}, "backfill waits for standby slot(s) " + standby);
  // Two more readings of the standby's position: still nothing published.
  ASSERT_TRUE(h.WaitForQueryRounds("SELECT n.name, r.restart_lsn%", 2, absl::Seconds(30)));
  EXPECT_EQ(h.collector().Messages().size(), 0u) << h.relay().Log();

  h.db().Exec("SELECT pg_replication_slot_advance('" + standby + "', pg_current_wal_lsn())");
  EXPECT_TRUE(h.collector().WaitForCount(20, absl::Seconds(60))) << h.relay().Log();
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
  h.db().Exec("SELECT pg_drop_replication_slot('" + standby + "')");
}

int64_t AckedXid(RelayHarness& h) {
  return std::stoll(h.db().Scalar(
      "SELECT coalesce((SELECT acked_xid::text FROM outbox_relay_state WHERE slot_name = '" +
      h.slot() + "'), '0')"));
}

// One outbox event, then about 5 MB of another table's WAL and a checkpoint.
void EventThenOtherWal(pg::Connection& conn, int i) {
  InsertRows(conn, absl::StrCat("backlog-", i), 1);
  MustExec(conn,
           "INSERT INTO filler SELECT repeat(md5(n::text), 32) FROM generate_series(1, 5000) n");
  MustExec(conn, "CHECKPOINT");
}

// Issue 20 point 8: the acknowledged position is recorded while the relay catches up,
// not only once it has. A broker outage leaves the relay behind 16 events spread
// through 80 MB of other tables' WAL; the brokers come back slow (one event in flight,
// 400 ms per acknowledgement), so the catch-up takes seconds. The recorded horizon
// passes the middle event before the last one is delivered (it used to stay before
// the first until the relay had caught up with the head of the WAL of the moment it
// was taken), and every event it covers was delivered.
TEST(Resync, RecordedPositionAdvancesWhileTheRelayCatchesUpThroughOtherTablesWal) {
  PrivateCluster cluster;
  RelayHarness h(kTopics, 1, cluster.conninfo());
  auto conn = h.db().Connect();
  MustExec(conn, "CREATE TABLE filler (pad text)");
  h.StartRelay({"--max-in-flight", "1"});
  InsertRows(conn, "warm-up", 1);
  ASSERT_TRUE(h.collector().WaitForCount(1, absl::Seconds(30))) << h.relay().Log();

  ASSERT_TRUE(h.cluster().SetAllBrokersDown().ok());
  constexpr int kEvents = 16;
  for (int i = 0; i < kEvents / 2; ++i) EventThenOtherWal(conn, i);
  // The relay has taken a horizon after the first half was committed (its control
  // connection ran the horizon query since).
  ASSERT_TRUE(h.WaitForQueryRounds("SELECT pg_snapshot_xmin%", 1, absl::Seconds(30)))
      << h.relay().Log();
  for (int i = kEvents / 2; i < kEvents; ++i) EventThenOtherWal(conn, i);

  std::vector<int64_t> xmins;
  pg::Result r = h.db().Exec("SELECT xmin::text::bigint FROM outbox ORDER BY seq");
  for (int i = 0; i < r.rows(); ++i) xmins.push_back(std::stoll(std::string(r.Get(i, 0))));
  ASSERT_EQ(xmins.size(), size_t{kEvents + 1});
  const int64_t middle = xmins[kEvents / 2];  // the first half's last event (after warm-up)

  ASSERT_TRUE(h.cluster().SetAllBrokersRtt(400).ok());
  ASSERT_TRUE(h.cluster().SetAllBrokersUp().ok());
  int64_t acked = 0;
  size_t delivered = 0;
  WaitUntil(absl::Seconds(120), [&] {
    acked = AckedXid(h);  // before the count: the position was recorded by then
    delivered = h.collector().Count();
    return acked > middle || delivered >= size_t{kEvents + 1};
  });
  EXPECT_GT(acked, middle) << "the recorded position did not pass the middle event";
  EXPECT_LT(delivered, size_t{kEvents + 1})
      << "the recorded position moved only once the relay had caught up";
  // Exact: every event older than the recorded horizon was acknowledged.
  std::set<std::string> covered = Ids(h, "xmin::text::bigint < " + std::to_string(acked));
  std::map<std::string, int> times = Deliveries(h, covered, absl::Seconds(30));
  for (const std::string& id : covered) EXPECT_EQ(times.count(id), 1u) << id;
  ASSERT_TRUE(h.collector().WaitForCount(kEvents + 1, absl::Seconds(120))) << h.relay().Log();
}

}  // namespace
}  // namespace outboxd::test
