// A plain PostgreSQL promote under the relay (issue 16): scripts/pg-ha's primary and
// streaming standby, no Patroni, so the logical slot does not exist on the promoted
// standby (PostgreSQL 15 has no failover slots). With --recreate-missing-slot the
// relay re-creates it and republishes the rows after the last acknowledged position
// by itself; without it, it exits 2 naming the flag. The new timeline's LSNs can lie
// below positions the relay acknowledged on the old one: the relay must not skip them.
// One pair for the whole file (~13 s to start); each test leaves a primary and a
// streaming standby behind.
#include <atomic>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <map>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "support/metrics_text.h"
#include "support/relay_harness.h"
#include "support/server_script.h"
#include "support/wait_until.h"

namespace outboxd::test {
namespace {

const std::vector<std::string> kTopics = {"pedido.confirmado"};

// scripts/pg-ha's pair.
class PgHa {
 public:

  // Both hosts, target_session_attrs=read-write, the primary first: libpq does not
  // go on to the next host when one refuses the connection (a database the standby
  // has not replayed yet), so a harness made just after a rebuild starts on the primary.
  std::string conninfo() {
    const std::string primary = Primary();
    return absl::StrCat("host=127.0.0.1,127.0.0.1 port=", Port(primary), ",", Port(Other(primary)),
                        " user=postgres dbname=postgres target_session_attrs=read-write");
  }
  // One node's conninfo, database `dbname`.
  std::string NodeConninfo(const std::string& node, const std::string& dbname) {
    return absl::StrCat(script_.Var(node == "a" ? "OUTBOXD_HA_PG_A" : "OUTBOXD_HA_PG_B"),
                        " dbname=", dbname);
  }
  std::string Primary() { return script_.Output({"primary"}); }
  static std::string Other(const std::string& node) { return node == "a" ? "b" : "a"; }
  std::string Port(const std::string& node) {
    std::ifstream in(absl::StrCat(script_.dir(), "/", node, "/port"));
    std::string port;
    std::getline(in, port);
    return port;
  }

  // scripts/pg-ha COMMAND DIR ARGS...; its exit code.
  int Run(std::vector<std::string> args) { return script_.Run(std::move(args)); }

  // The primary dies (kill -9), its standby is promoted, and the dead node comes back
  // as the new primary's standby. Returns the killed node.
  std::string Failover() {
    const std::string old = Primary();
    Run({"kill", old});
    if (paused_ == Other(old)) {
      // A held receiver would hold the promotion, and let go it would read what the
      // old primary left in its socket: the standby crashes too and restarts from what
      // it had written, as after losing the primary's last packets.
      Run({"kill", paused_});
      Run({"start-node", paused_});
      paused_.clear();
    }
    Run({"promote", Other(old)});
    return old;
  }
  void PauseReceiver(const std::string& node) {
    EXPECT_EQ(Run({"pause-receiver", node}), 0);
    paused_ = node;
  }
  void ResumeReceiver(const std::string& node) {
    EXPECT_EQ(Run({"resume-receiver", node}), 0);
    paused_.clear();
  }
  // Rebuilds the standby unless it streams (a test that failed half-way left it so).
  void EnsureStandby() {
    // A test that failed half-way may have left the receiver held: it still reports
    // streaming, but nothing reaches the standby.
    if (!paused_.empty()) ResumeReceiver(paused_);
    const std::string standby = Other(Primary());
    absl::StatusOr<pg::Connection> conn = pg::Connection::Open(NodeConninfo(standby, "postgres"));
    if (conn.ok()) {
      absl::StatusOr<pg::Result> r = conn->Exec("SELECT status FROM pg_stat_wal_receiver");
      if (r.ok() && r->rows() == 1 && r->Get(0, 0) == "streaming") return;
    }
    Run({"rebuild", standby});
  }

 private:
  ServerScript script_{"pg-ha"};
  std::string paused_;  // the node whose WAL receiver is held
};

class Promote : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { ha_ = new PgHa(); }
  static void TearDownTestSuite() {
    delete ha_;
    ha_ = nullptr;
  }
  void SetUp() override { ha_->EnsureStandby(); }
  static PgHa& ha() { return *ha_; }
  static PgHa* ha_;
};
PgHa* Promote::ha_ = nullptr;

// One row for aggregate `aggregate` on whichever node `conninfo` reaches (retried while
// a failover is under way); returns its id.
std::string InsertEvent(const std::string& conninfo, const std::string& aggregate,
                        const std::string& then = "") {
  std::string id;
  EXPECT_TRUE(WaitUntil(
      absl::Seconds(60),
      [&] {
        absl::StatusOr<pg::Connection> conn = pg::Connection::Open(conninfo);
        if (!conn.ok()) return false;
        absl::StatusOr<pg::Result> r = conn->ExecParams(
            "INSERT INTO outbox (aggregate_id, tipo, payload) VALUES ($1, 'pedido.confirmado', "
            "'{}') RETURNING id::text",
            {aggregate});
        if (!r.ok()) return false;
        id = r->Get(0, 0);
        return then.empty() || conn->Exec(then).ok();
      },
      absl::Milliseconds(200)));
  return id;
}

bool Delivered(RelayHarness& h, const std::string& id) {
  for (const CollectedMessage& m : h.collector().Messages()) {
    if (m.Header("id") == id) return true;
  }
  return false;
}

// Waits until the relay-state row holds an acknowledged position on `node`: the slot
// had recorded positions there too when it goes missing.
bool PositionReached(PgHa& ha, RelayHarness& h, const std::string& node) {
  return WaitUntil(absl::Seconds(60), [&] {
    absl::StatusOr<pg::Connection> conn =
        pg::Connection::Open(ha.NodeConninfo(node, h.db().name()));
    if (!conn.ok()) return false;
    absl::StatusOr<pg::Result> r =
        conn->Exec("SELECT 1 FROM outbox_relay_state WHERE acked_xid IS NOT NULL");
    return r.ok() && r->rows() == 1;
  });
}

TEST_F(Promote, MissingSlotWithRecordedPositionsExitsNamingTheFlagOrIsRecreatedWithIt) {
  RelayHarness h(kTopics, 1, ha().conninfo());
  h.StartRelay();
  InsertEvent(h.db().conninfo(), "a1");
  ASSERT_TRUE(h.collector().WaitForCount(1, absl::Seconds(30)));
  ASSERT_TRUE(PositionReached(ha(), h, ha().Primary()));
  ASSERT_EQ(h.StopRelay(), 0) << h.relay().Log();
  // The slot goes, as it does with the old primary in a failover.
  h.db().Exec(absl::StrCat("SELECT pg_drop_replication_slot('", h.slot(), "')"));
  const std::string written_meanwhile = InsertEvent(h.db().conninfo(), "a1");

  auto refused = h.SpawnRelay();
  EXPECT_EQ(refused->Wait(absl::Seconds(60)).value_or(-1), 2) << refused->Log();
  EXPECT_NE(refused->Log().find("--recreate-missing-slot"), std::string::npos) << refused->Log();
  EXPECT_NE(refused->Log().find("outboxd setup --recreate-slot --slot " + h.slot()),
            std::string::npos)
      << refused->Log();

  h.StartRelay({"--recreate-missing-slot"});
  EXPECT_TRUE(WaitUntil(absl::Seconds(60), [&] { return Delivered(h, written_meanwhile); }))
      << h.relay().Log();
  EXPECT_TRUE(h.relay().WaitForLog("re-creating it and republishing the", absl::Seconds(1)))
      << h.relay().Log();
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

// Issue 28 point 4: a failover soon after the install. The standby received the
// events but none of the relay's recorded positions (its receiver was held from the
// relay's start until the kill): with --recreate-missing-slot the relay, which saw the
// failover (same system, new timeline) and had streamed from the slot itself, re-creates
// it, republishes every row of the new primary's table and keeps running. It exited
// with "slot outboxd does not exist yet ... run outboxd setup".
TEST_F(Promote, AFailoverBeforeAnyRecordedPositionReachedTheStandbyRepublishesTheTable) {
  RelayHarness h(kTopics, 1, ha().conninfo());
  const std::string primary = ha().Primary();
  const std::string standby = PgHa::Other(primary);
  for (int i = 0; i < 30; ++i) InsertEvent(h.db().conninfo(), absl::StrCat("f", i % 3));
  // The standby has the rows, then hears nothing more: no recorded position reaches it.
  ASSERT_TRUE(WaitUntil(absl::Seconds(60), [&] {
    absl::StatusOr<pg::Connection> conn =
        pg::Connection::Open(ha().NodeConninfo(standby, h.db().name()));
    if (!conn.ok()) return false;
    absl::StatusOr<pg::Result> r = conn->Exec("SELECT count(*) FROM outbox");
    return r.ok() && r->Get(0, 0) == "30";
  }));
  ha().PauseReceiver(standby);
  h.StartRelay({"--recreate-missing-slot"});
  ASSERT_TRUE(h.collector().WaitForCount(30, absl::Seconds(60))) << h.relay().Log();
  ASSERT_TRUE(PositionReached(ha(), h, primary));

  ha().Failover();
  const std::string after = InsertEvent(h.db().conninfo(), "f0");
  EXPECT_TRUE(WaitUntil(absl::Seconds(90), [&] { return Delivered(h, after); })) << h.relay().Log();
  EXPECT_TRUE(h.relay().Running()) << h.relay().Log();
  EXPECT_TRUE(h.relay().WaitForLog("though this relay streamed from it", absl::Seconds(1)))
      << h.relay().Log();
  // Every event of the surviving timeline once: the backfill republishes the 30
  // (nothing on the new primary says they were acknowledged), but reads the topic back
  // first (--dedupe, issue 30) and finds them there; then the one written after.
  EXPECT_EQ(h.OutboxRows().size(), 31u);
  EXPECT_TRUE(h.collector().WaitForCount(31, absl::Seconds(60))) << h.relay().Log();
  ExpectEverythingDelivered(h, absl::Seconds(60));
  EXPECT_EQ(ExpectEachEventOnce(h), 0u) << h.relay().Log();
  EXPECT_TRUE(
      h.relay().WaitForLog("--dedupe: 30 of the 31 backfilled events were already at the "
                           "broker",
                           absl::Seconds(1)))
      << h.relay().Log();
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
  ha().Run({"rebuild", PgHa::Other(ha().Primary())});
}

// The standby is held while the old primary commits three events a WAL segment or
// two apart, which the relay publishes and confirms: its position on the old timeline
// lies megabytes past where the new one starts. Events written on the new primary
// before that position must still be published, after a restart of the relay too
// (its final feedback must not have confirmed the slot past them): docs/architecture.md
// trap "LSNs across timelines".
TEST_F(Promote, NewTimelineWalBelowPositionsAcknowledgedOnTheOldOneIsNotSkipped) {
  RelayHarness h(kTopics, 1, ha().conninfo());
  h.StartRelay({"--recreate-missing-slot", "--feedback-interval", "1s"});
  InsertEvent(h.db().conninfo(), "t1");
  ASSERT_TRUE(h.collector().WaitForCount(1, absl::Seconds(30)));
  const std::string primary = ha().Primary();
  ASSERT_TRUE(PositionReached(ha(), h, PgHa::Other(primary)));

  ha().PauseReceiver(PgHa::Other(primary));
  InsertEvent(h.db().conninfo(), "t1", "SELECT pg_switch_wal()");
  InsertEvent(h.db().conninfo(), "t1", "SELECT pg_switch_wal()");
  InsertEvent(h.db().conninfo(), "t1");
  const pg::Lsn old_head = h.CurrentWalLsn();
  ASSERT_TRUE(h.WaitForConfirmed(old_head, absl::Seconds(60))) << h.relay().Log();

  ha().Failover();
  const std::string on_new_timeline = InsertEvent(h.db().conninfo(), "t1");
  ASSERT_LT(h.CurrentWalLsn(), old_head) << "the new timeline should start below the old head";
  ASSERT_TRUE(WaitUntil(absl::Seconds(90), [&] { return Delivered(h, on_new_timeline); }))
      << h.relay().Log();
  ASSERT_EQ(h.StopRelay(), 0) << h.relay().Log();
  EXPECT_LE(h.ConfirmedFlushLsn(), h.CurrentWalLsn())
      << "the slot was confirmed past the new timeline's head";

  const std::string while_stopped = InsertEvent(h.db().conninfo(), "t1");
  ASSERT_LT(h.CurrentWalLsn(), old_head);
  h.StartRelay();
  EXPECT_TRUE(WaitUntil(absl::Seconds(60), [&] { return Delivered(h, while_stopped); }))
      << h.relay().Log();
  // The three events the standby never received were published from the old primary.
  EXPECT_EQ(Ghosts(h), 3u);
  ExpectEverythingDelivered(h, absl::Seconds(60));
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
  ha().Run({"rebuild", PgHa::Other(ha().Primary())});
}

// The same failover as above with --standby-slot naming the standby: what it never
// received is never published, so the new primary holds every event Kafka has
// (docs/architecture.md trap "Ghost events").
TEST_F(Promote, StandbySlotLeavesNoGhostAfterAFailover) {
  RelayHarness h(kTopics, 1, ha().conninfo());
  const std::string primary = ha().Primary();
  const std::string standby = PgHa::Other(primary);
  h.StartRelay({"--recreate-missing-slot", "--standby-slot", "node_" + standby});
  InsertEvent(h.db().conninfo(), "g1");
  ASSERT_TRUE(h.collector().WaitForCount(1, absl::Seconds(30))) << h.relay().Log();
  ASSERT_TRUE(PositionReached(ha(), h, standby));

  ha().PauseReceiver(standby);
  InsertEvent(h.db().conninfo(), "g1", "SELECT pg_switch_wal()");
  InsertEvent(h.db().conninfo(), "g1", "SELECT pg_switch_wal()");
  InsertEvent(h.db().conninfo(), "g1");
  // Held: read from the slot, waiting for the standby (counted in flight), not sent.
  ASSERT_TRUE(WaitForMetric(h.relay(), "outboxd_events_in_flight", 1, absl::Seconds(30)))
      << h.relay().Log();
  const std::string metrics = h.Metrics(h.relay());
  EXPECT_GT(MetricValue(metrics, absl::StrCat("outboxd_standby_flush_lag_bytes{slot=\"node_",
                                              standby, "\"}"))
                .value_or(0),
            0)
      << metrics;
  EXPECT_EQ(h.collector().Count(), 1u);

  const std::string old = ha().Failover();
  ASSERT_EQ(ha().Run({"rebuild", old}), 0);
  // The standby slot of the new primary's standby has another name: the relay is
  // pointed at it (a relay naming a slot the new primary lacks holds publishing).
  ASSERT_EQ(h.StopRelay(), 0) << h.relay().Log();
  h.StartRelay({"--recreate-missing-slot", "--standby-slot", "node_" + old});
  const std::string after = InsertEvent(h.db().conninfo(), "g1");
  ASSERT_TRUE(WaitUntil(absl::Seconds(60), [&] { return Delivered(h, after); })) << h.relay().Log();
  const size_t ghosts = Ghosts(h);
  EXPECT_EQ(ghosts, 0u);
  ExpectEverythingDelivered(h, absl::Seconds(60));
  RecordProperty("ghosts", static_cast<int>(ghosts));
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

// A named standby whose WAL receiver is held stops publishing, and says so: the
// metrics name the slot the relay waits for and its lag, /healthz and the stall line
// name it once the stall threshold passes, `status` shows the standby's lag and the
// primary's timeline. Let go, every event arrives, in order.
TEST_F(Promote, StandbySlotHeldStandbyIsVisibleEverywhereAndEverythingFollowsOnResume) {
  RelayHarness h(kTopics, 1, ha().conninfo());
  const std::string standby = PgHa::Other(ha().Primary());
  const std::string slot = "node_" + standby;
  h.StartRelay({"--standby-slot", slot, "--healthz-stall", "3s"});
  InsertEvent(h.db().conninfo(), "v1");
  ASSERT_TRUE(h.collector().WaitForCount(1, absl::Seconds(30))) << h.relay().Log();
  const std::string waiting = absl::StrCat("outboxd_standby_waiting{slot=\"", slot, "\"}");
  const std::string lag = absl::StrCat("outboxd_standby_flush_lag_bytes{slot=\"", slot, "\"}");
  EXPECT_EQ(MetricValue(h.Metrics(h.relay()), waiting), 0) << h.Metrics(h.relay());

  ha().PauseReceiver(standby);
  for (int i = 0; i < 5; ++i) InsertEvent(h.db().conninfo(), "v1");
  ASSERT_TRUE(WaitForMetric(h.relay(), waiting, 1, absl::Seconds(30))) << h.relay().Log();
  EXPECT_GT(MetricValue(h.Metrics(h.relay()), lag).value_or(0), 0) << h.Metrics(h.relay());
  std::pair<int, std::string> health;
  EXPECT_TRUE(WaitUntil(absl::Seconds(60), [&] {
    health = HttpGetFromLog(h.relay(), "/healthz");
    return health.first == 503;
  })) << health.second;
  EXPECT_NE(health.second.find("waiting for --standby-slot " + slot), std::string::npos)
      << health.second;
  EXPECT_TRUE(h.relay().WaitForLog("check the standbys", absl::Seconds(30))) << h.relay().Log();
  std::string status;
  EXPECT_EQ(
      h.RunOutboxd({"status", "--pg", h.db().conninfo(), "--slot", h.slot(), "--json"}, &status),
      0);
  const std::string standby_json = absl::StrCat("{\"slot\":\"", slot, "\",\"active\":true,");
  EXPECT_NE(status.find(standby_json), std::string::npos) << status;
  EXPECT_EQ(status.find(standby_json + "\"flush_lag_bytes\":0}"), std::string::npos) << status;
  EXPECT_NE(status.find("\"timeline\":"), std::string::npos) << status;
  // Nothing was published past what the standby flushed.
  EXPECT_EQ(h.collector().Count(), 1u);

  ha().ResumeReceiver(standby);
  EXPECT_TRUE(WaitUntil(absl::Seconds(60), [&] {
    return MetricValue(h.Metrics(h.relay()), waiting) == 0;
  })) << h.Metrics(h.relay());
  ExpectEverythingDelivered(h, absl::Seconds(60));
  EXPECT_EQ(h.collector().Count(), 6u);
  EXPECT_TRUE(WaitUntil(absl::Seconds(30), [&] { return h.HealthStatus(h.relay()) == 200; }));
  EXPECT_TRUE(h.relay().WaitForLog("stall over", absl::Seconds(30))) << h.relay().Log();
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

// `status` and /metrics after a failover: the new primary, its timeline and how long
// ago it was promoted, the standby rebuilt behind it and its lag.
TEST_F(Promote, StatusAndMetricsShowThePrimaryItsLastFailoverAndTheStandbysLag) {
  RelayHarness h(kTopics, 1, ha().conninfo());
  h.StartRelay({"--recreate-missing-slot"});
  InsertEvent(h.db().conninfo(), "f1");
  ASSERT_TRUE(h.collector().WaitForCount(1, absl::Seconds(30))) << h.relay().Log();
  ASSERT_TRUE(PositionReached(ha(), h, PgHa::Other(ha().Primary())));
  std::string before;
  ASSERT_EQ(
      h.RunOutboxd({"status", "--pg", h.db().conninfo(), "--slot", h.slot(), "--json"}, &before),
      0);
  const size_t at = before.find("\"timeline\":");
  ASSERT_NE(at, std::string::npos) << before;
  const int64_t timeline_before = std::atoll(before.c_str() + at + 11);

  const absl::Time killed = absl::Now();
  const std::string old = ha().Failover();
  ASSERT_EQ(ha().Run({"rebuild", old}), 0);
  const std::string after_failover = InsertEvent(h.db().conninfo(), "f1");
  ASSERT_TRUE(WaitUntil(absl::Seconds(90), [&] { return Delivered(h, after_failover); }))
      << h.relay().Log();
  const double since_kill = absl::ToDoubleSeconds(absl::Now() - killed);

  std::string table;
  ASSERT_EQ(h.RunOutboxd({"status", "--pg", h.db().conninfo(), "--slot", h.slot()}, &table), 0);
  EXPECT_NE(table.find("\ntimeline "), std::string::npos) << table;
  EXPECT_NE(table.find(absl::StrCat(" ", timeline_before + 1, ", last failover ")),
            std::string::npos)
      << table;
  EXPECT_NE(table.find(absl::StrCat("standby[node_", old, "]")), std::string::npos) << table;
  EXPECT_NE(table.find(absl::StrCat("127.0.0.1:", ha().Port(ha().Primary()), " (primary)")),
            std::string::npos)
      << table;
  std::string json;
  ASSERT_EQ(
      h.RunOutboxd({"status", "--pg", h.db().conninfo(), "--slot", h.slot(), "--json"}, &json), 0);
  const size_t age_at = json.find("\"last_failover_age_s\":");
  ASSERT_NE(age_at, std::string::npos) << json;
  const double age = std::atof(json.c_str() + age_at + 22);
  EXPECT_GT(age, 0) << json;
  EXPECT_LT(age, since_kill + 60) << json;  // this failover's, not an earlier test's

  const std::string metrics = h.Metrics(h.relay());
  EXPECT_EQ(MetricValue(metrics, "outboxd_primary_changes_total"), 1) << metrics;
  EXPECT_GT(MetricValue(metrics, "outboxd_primary_changed_timestamp_seconds").value_or(0),
            absl::ToDoubleSeconds(killed - absl::UnixEpoch()))
      << metrics;
  EXPECT_EQ(MetricValue(metrics, absl::StrCat("outboxd_primary_info{host=\"127.0.0.1\",port=\"",
                                              ha().Port(ha().Primary()), "\"}")),
            1)
      << metrics;
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

TEST_F(Promote, ThreeFailoversUnderLoadLoseNothingWithRecreateMissingSlot) {
  RelayHarness h(kTopics, 1, ha().conninfo());
  h.StartRelay({"--recreate-missing-slot"});
  Load load(h.db().conninfo());
  WaitForMore(h, 0, 100);
  std::vector<std::string> death_to_first_event;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(PositionReached(ha(), h, PgHa::Other(ha().Primary())));
    const size_t before = h.collector().Count();
    const absl::Time killed = absl::Now();
    const std::string old = ha().Failover();
    WaitForMore(h, before, 1);
    death_to_first_event.push_back(absl::FormatDuration(absl::Now() - killed));
    ASSERT_EQ(ha().Run({"rebuild", old}), 0);
    ASSERT_TRUE(load.WaitForMore(50));
    WaitForMore(h, h.collector().Count(), 50);
  }
  load.Stop();
  const size_t duplicates = ExpectEverythingDelivered(h, absl::Seconds(90));
  const size_t ghosts = Ghosts(h);
  const size_t events = h.OutboxRows().size();
  EXPECT_TRUE(h.relay().Running()) << h.relay().Log();
  const std::string metrics = h.Metrics(h.relay());
  EXPECT_EQ(MetricValue(metrics, "outboxd_primary_changes_total"), 3) << metrics;
  EXPECT_EQ(MetricValue(metrics, absl::StrCat("outboxd_primary_info{host=\"127.0.0.1\",port=\"",
                                              ha().Port(ha().Primary()), "\"}")),
            1)
      << metrics;
  RecordDeliveryFigures(events, duplicates, ghosts);
  std::printf(
      "events %zu, duplicates %zu, ghosts %zu; primary killed to first event published "
      "after: %s\n",
      events, duplicates, ghosts, absl::StrJoin(death_to_first_event, ", ").c_str());
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

// A read-only host is never used for the slot: listed first, it is passed over for
// the primary; given alone, the relay waits for it to become a primary.
TEST_F(Promote, StandbyListedFirstIsPassedOverForThePrimary) {
  RelayHarness h(kTopics, 1, ha().conninfo());
  const std::string primary = ha().Primary();
  const std::string standby = PgHa::Other(primary);
  // libpq does not try the next host after a refusal (no such database yet).
  ASSERT_TRUE(WaitUntil(absl::Seconds(60), [&] {
    return pg::Connection::Open(ha().NodeConninfo(standby, h.db().name())).ok();
  }));
  const std::string standby_first =
      absl::StrCat("host=127.0.0.1,127.0.0.1 port=", ha().Port(standby), ",", ha().Port(primary),
                   " user=postgres dbname=", h.db().name(), " target_session_attrs=read-write");
  const std::vector<std::string> common = {
      "--brokers", h.cluster().bootstraps(), "--slot", h.slot(), "--metrics", "127.0.0.1:0"};
  auto Relay = [&](const std::string& conninfo) {
    std::vector<std::string> args = {BinPath("outboxd"), "run", "--pg", conninfo};
    args.insert(args.end(), common.begin(), common.end());
    return ChildProcess::Start(args);
  };

  auto on_standby = Relay(ha().NodeConninfo(standby, h.db().name()));
  EXPECT_TRUE(on_standby->WaitForLog("is a standby (read-only)", absl::Seconds(30)))
      << on_standby->Log();
  EXPECT_TRUE(on_standby->Running()) << on_standby->Log();
  on_standby->Signal(SIGTERM);
  EXPECT_EQ(on_standby->Wait(absl::Seconds(30)).value_or(-1), 0) << on_standby->Log();

  h.set_relay(Relay(standby_first));
  ASSERT_TRUE(WaitForStreaming(h.relay())) << h.relay().Log();
  const std::string id = InsertEvent(h.db().conninfo(), "s1");
  EXPECT_TRUE(WaitUntil(absl::Seconds(30), [&] { return Delivered(h, id); })) << h.relay().Log();
  const std::string at_primary = absl::StrCat("127.0.0.1:", ha().Port(primary));
  EXPECT_TRUE(h.relay().WaitForLog("connected to PostgreSQL at " + at_primary, absl::Seconds(1)))
      << h.relay().Log();
  const std::string metrics = h.Metrics(h.relay());
  EXPECT_EQ(MetricValue(metrics, absl::StrCat("outboxd_primary_info{host=\"127.0.0.1\",port=\"",
                                              ha().Port(primary), "\"}")),
            1)
      << metrics;
  EXPECT_EQ(MetricValue(metrics, "outboxd_primary_changes_total"), 0) << metrics;
  std::string status;
  EXPECT_EQ(h.RunOutboxd({"status", "--pg", standby_first, "--slot", h.slot(), "--json"}, &status),
            0);
  EXPECT_NE(status.find(absl::StrCat("\"server\":\"", at_primary, "\",\"server_is_primary\":true")),
            std::string::npos)
      << status;
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

// A steady load of ~1,000 events/s (10-row transactions every 10 ms) goes through a
// relay without the flag, then through one holding each transaction for a standby
// that keeps up: every event arrives both times. The latency the flag adds (the mean
// of outboxd_commit_to_ack_seconds of each) is printed for docs/high-availability.md, not
// asserted.
TEST_F(Promote, StandbySlotRelaysASteadyLoadWhileTheStandbyKeepsUp) {
  RelayHarness h(kTopics, 1, ha().conninfo());
  const std::string standby = PgHa::Other(ha().Primary());
  auto mean_latency = [&](std::vector<std::string> args) {
    h.StartRelay(std::move(args));
    const size_t before = h.collector().Count();
    std::atomic<bool> stop{false};
    std::thread writer([&] {
      absl::StatusOr<pg::Connection> conn = pg::Connection::Open(h.db().conninfo());
      ASSERT_TRUE(conn.ok()) << conn.status();
      for (int i = 0; i < 300 && !stop; ++i) {
        const absl::Time next = absl::Now() + absl::Milliseconds(10);
        ASSERT_TRUE(conn->Exec("INSERT INTO outbox (aggregate_id, tipo, payload) SELECT 'l' || "
                               "g % 13, 'pedido.confirmado', '{}' FROM generate_series(1, 10) g")
                        .ok());
        absl::SleepFor(next - absl::Now());  // pacing the writer, not waiting for a state
      }
    });
    writer.join();
    EXPECT_TRUE(h.collector().WaitForCount(before + 3000, absl::Seconds(60))) << h.relay().Log();
    const std::string metrics = h.Metrics(h.relay());
    const double sum = MetricValue(metrics, "outboxd_commit_to_ack_seconds_sum").value_or(0);
    const double count = MetricValue(metrics, "outboxd_commit_to_ack_seconds_count").value_or(1);
    EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
    return count > 0 ? sum / count : 0.0;
  };
  const double without = mean_latency({});
  const double with = mean_latency({"--standby-slot", "node_" + standby});
  RecordProperty("mean_commit_to_ack_ms_without", static_cast<int>(without * 1000));
  RecordProperty("mean_commit_to_ack_ms_with_standby_slot", static_cast<int>(with * 1000));
  std::printf("~1,000 events/s: mean commit-to-ack %.1f ms without --standby-slot, %.1f ms with\n",
              without * 1000, with * 1000);
}

}  // namespace
}  // namespace outboxd::test
