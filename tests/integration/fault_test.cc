// Guarantee 1 under faults: the relay is killed, PostgreSQL crashes, the walsender is
// terminated, a second relay stands by. Each test provokes the fault under load and
// then checks that every committed event reached Kafka (duplicates allowed, counted).
#include <atomic>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "support/metrics_text.h"
#include "support/private_cluster.h"
#include "support/relay_harness.h"
#include "support/wait_until.h"

namespace outboxd::test {
namespace {

const std::vector<std::string> kTopics = {"pedido.confirmado"};

// At least once (--dedupe off, as on a broker that cannot be read back): the kills
// repeat their unconfirmed windows, and nothing is lost (Dedupe.KillNine... in
// dedupe_test.cc has the same kills with the read-back: nothing sent twice).
TEST(RelayFaults, KillNineAtRandomMomentsLosesNothing) {
  RelayHarness h(kTopics);
  h.StartRelay({"--dedupe", "off"});
  Load load(h.db().conninfo());
  const int kKills = 5;
  KillNineUnderLoad(h, load, kKills, {"--dedupe", "off"});
  ASSERT_TRUE(load.WaitForMore(100));
  load.Stop();
  size_t duplicates = ExpectEverythingDelivered(h, absl::Seconds(60));
  std::printf("kill -9 x%d under load, --dedupe off: %zu events, %d transactions, %zu duplicates\n",
              kKills, h.OutboxRows().size(), load.transactions(), duplicates);
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

// Each reconnect streams the unconfirmed window again; --dedupe (the default) reads
// the topic back and sends none of it twice.
TEST(RelayFaults, PostgresCrashAndWalsenderKillReconnectLoseNothingAndSendNothingTwice) {
  PrivateCluster cluster;
  RelayHarness h(kTopics, 3, cluster.conninfo());
  h.StartRelay();
  ASSERT_EQ(h.HealthStatus(h.relay()), 200) << h.relay().Log();
  Load load(h.db().conninfo());
  ASSERT_TRUE(load.WaitForMore(200));

  // The walsender killed by an administrator.
  {
    auto conn = h.db().Connect();
    auto r = conn.ExecParams(
        "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1",
        {h.slot()});
    ASSERT_TRUE(r.ok()) << r.status();
  }
  ASSERT_TRUE(WaitForMetric(h.relay(), "outboxd_reconnects_total", 1, absl::Seconds(30)))
      << h.relay().Log();
  ASSERT_TRUE(load.WaitForMore(200));

  // PostgreSQL crashes (immediate restart: recovery, the slot back at its last
  // checkpointed position) while events are being written.
  ASSERT_TRUE(cluster.RestartImmediate());
  ASSERT_TRUE(load.WaitForMore(200));  // reconnected to the recovered server

  // PostgreSQL away for a while: /healthz says so.
  ASSERT_TRUE(cluster.Stop());
  EXPECT_TRUE(WaitUntil(absl::Seconds(30), [&] { return h.HealthStatus(h.relay()) == 503; }))
      << "healthz while PostgreSQL is down";
  ASSERT_TRUE(cluster.Start());
  ASSERT_TRUE(load.WaitForMore(400));
  load.Stop();

  const size_t duplicates = ExpectEachEventOnce(h);
  EXPECT_TRUE(WaitUntil(absl::Seconds(30), [&] { return h.HealthStatus(h.relay()) == 200; }))
      << h.relay().Log();
  std::string log = h.relay().Log();
  EXPECT_NE(log.find("reconnecting in"), std::string::npos) << log;
  std::printf("walsender killed, crash restart, 2 s down: %zu events, %zu duplicates\n",
              h.OutboxRows().size(), duplicates);
  EXPECT_EQ(h.StopRelay(), 0) << log;
}

TEST(RelayFaults, StandbyTakesOverWithinSecondsWhenTheActiveRelayDies) {
  RelayHarness h(kTopics);
  h.StartRelay();
  std::unique_ptr<ChildProcess> standby = h.SpawnRelay();
  ASSERT_TRUE(standby->WaitForLog("standing by", absl::Seconds(30))) << standby->Log();
  auto conn = h.db().Connect();
  ASSERT_TRUE(
      conn.Exec("INSERT INTO outbox (aggregate_id, tipo, payload) "
                "SELECT 'a' || n % 5, 'pedido.confirmado', '{}' FROM generate_series(1, 50) n")
          .ok());
  ASSERT_TRUE(h.collector().WaitForCount(50, absl::Seconds(30)));

  h.relay().Signal(SIGKILL);
  h.relay().Wait(absl::Seconds(10));
  absl::Time killed = absl::Now();
  ASSERT_TRUE(
      conn.Exec("INSERT INTO outbox (aggregate_id, tipo, payload) "
                "SELECT 'b' || n % 5, 'pedido.confirmado', '{}' FROM generate_series(1, 50) n")
          .ok());
  ASSERT_TRUE(h.collector().WaitForCount(100, absl::Seconds(30))) << standby->Log();
  // How fast is for scripts/bench to say; here, that it took over at all.
  absl::Duration takeover = absl::Now() - killed;
  std::printf("standby took over and delivered in %s\n", absl::FormatDuration(takeover).c_str());
  ExpectEverythingDelivered(h, absl::Seconds(10));
  h.set_relay(std::move(standby));
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

TEST(RelayFaults, SlowBrokerAndTransientProduceErrorsLoseNothing) {
  RelayHarness h(kTopics);
  // One produce request in flight at a time: with requests pipelined, librdkafka
  // 2.0.2's mock broker sometimes acknowledges a retried batch it never stored
  // (kcat finds nothing; the same happens with a bare producer, no relay involved).
  h.StartRelay({"--kafka", "max.in.flight.requests.per.connection=1"});
  ASSERT_TRUE(h.cluster().SetAllBrokersRtt(300).ok());
  Load load(h.db().conninfo());
  ASSERT_TRUE(load.WaitForMore(400));
  ASSERT_TRUE(h.cluster().SetAllBrokersRtt(0).ok());
  // NOT_LEADER_FOR_PARTITION and NOT_ENOUGH_REPLICAS: retriable, must be retried.
  // (Not REQUEST_TIMED_OUT: the mock loses the retried batch outright.)
  h.cluster().PushProduceErrors(6, 3);
  h.cluster().PushProduceErrors(19, 3);
  ASSERT_TRUE(load.WaitForMore(400));
  load.Stop();
  size_t duplicates = ExpectEverythingDelivered(h, absl::Seconds(60));
  std::printf("slow broker + transient errors: %zu events, %zu duplicates\n", h.OutboxRows().size(),
              duplicates);
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

// Point 2's fatal idempotent-producer error, provoked for real (rd_kafka_test_fatal_error
// through the test-only --test-fatal-error-after): the relay drops the producer, makes
// a new one and resumes from the confirmed position; the process stays up and every
// committed event arrives once: the new session reads the topic back (--dedupe) and
// skips what the old producer delivered of the unconfirmed window.
TEST(RelayFaults, FatalProducerErrorRecreatesTheProducerLosesNothingAndSendsNothingTwice) {
  RelayHarness h(kTopics);
  h.StartRelay({"--test-fatal-error-after", "300"});
  Load load(h.db().conninfo());
  ASSERT_TRUE(h.relay().WaitForLog("recreating the producer", absl::Seconds(30)))
      << h.relay().Log();
  ASSERT_TRUE(load.WaitForMore(400));  // load goes on across the new producer
  load.Stop();
  const size_t duplicates = ExpectEachEventOnce(h);
  EXPECT_TRUE(h.relay().Running()) << h.relay().Log();
  const std::string log = h.relay().Log();
  EXPECT_NE(log.find("fatal producer error: Kafka producer fatal error"), std::string::npos) << log;
  size_t sessions = 0;
  for (const std::string& start : kRelayReadsSlot) {
    for (size_t at = log.find(start); at != std::string::npos; at = log.find(start, at + 1)) {
      ++sessions;
    }
  }
  EXPECT_EQ(sessions, 2u) << "one session before the fatal error, one after\n" << log;
  std::printf("fatal producer error x1 under load: %zu events, %zu duplicates\n",
              h.OutboxRows().size(), duplicates);
  EXPECT_EQ(h.StopRelay(), 0) << log;
}

// Point 6: a slot whose WAL was removed (max_slot_wal_keep_size exceeded while the
// relay was away) is never streamed from: outboxd stops with the recovery path.
TEST(RelayFaults, LostSlotStopsWithTheRecoveryPath) {
  PrivateCluster cluster("max_slot_wal_keep_size = 1MB");
  RelayHarness h(kTopics, 3, cluster.conninfo());
  auto conn = h.db().Connect();
  // The relay is not running: WAL piles up behind the slot, then a checkpoint
  // removes the segments it still needed.
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(conn.Exec("INSERT INTO outbox (aggregate_id, tipo, payload) VALUES "
                          "('a', 'pedido.confirmado', '{}'); SELECT pg_switch_wal()")
                    .ok());
  }
  ASSERT_TRUE(conn.Exec("CHECKPOINT").ok());
  ASSERT_EQ(h.db().Scalar("SELECT wal_status FROM pg_replication_slots WHERE slot_name = '" +
                          h.slot() + "'"),
            "lost");
  auto relay = h.SpawnRelay();
  std::optional<int> code = relay->Wait(absl::Seconds(30));
  ASSERT_TRUE(code.has_value()) << relay->Log();
  EXPECT_EQ(*code, 2) << relay->Log();
  EXPECT_NE(relay->Log().find("has lost WAL"), std::string::npos) << relay->Log();
  EXPECT_NE(relay->Log().find("outboxd setup --recreate-slot"), std::string::npos) << relay->Log();
}

void InsertEvent(pg::Connection& conn) {
  ASSERT_TRUE(conn.Exec("INSERT INTO outbox (aggregate_id, tipo, payload) "
                        "VALUES ('a', 'pedido.confirmado', '{}')")
                  .ok());
}

// Issue 20 point 14: the relay's own wait is the whole shutdown budget. The producer
// used to flush again for 5 s in its destructor after "stopped cleanly" had been
// logged; now the process ends within --shutdown-timeout plus its teardown (stated:
// about a second; 2 s allowed here), says how many events it left, and a restart
// with the brokers back sends them.
TEST(RelayFaults, ShutdownWithTheBrokersDownEndsWithinTheTimeoutAndTheRestartSendsTheRest) {
  RelayHarness h(kTopics);
  auto conn = h.db().Connect();
  h.StartRelay({"--shutdown-timeout", "3s"});
  InsertEvent(conn);
  ASSERT_TRUE(h.collector().WaitForCount(1, absl::Seconds(30))) << h.relay().Log();

  ASSERT_TRUE(h.cluster().SetAllBrokersDown().ok());
  for (int i = 0; i < 3; ++i) InsertEvent(conn);
  ASSERT_TRUE(WaitForMetric(h.relay(), "outboxd_events_in_flight", 3, absl::Seconds(30)));
  ASSERT_EQ(MetricValue(h.Metrics(h.relay()), "outboxd_events_in_flight"), 3.0) << h.relay().Log();

  h.relay().Signal(SIGTERM);
  // The one bound on time kept in ctest: it is the documented contract (README: the
  // timeout plus about a second). 4 s of slack for a loaded machine still tells it
  // from the 5 s flush that used to follow.
  std::optional<int> code = h.relay().Wait(absl::Seconds(3 + 4));
  ASSERT_TRUE(code.has_value()) << "still running 4 s after --shutdown-timeout 3s\n"
                                << h.relay().Log();
  EXPECT_EQ(*code, 0) << h.relay().Log();
  const std::string log = h.relay().Log();
  EXPECT_NE(log.find("stopped after --shutdown-timeout 3s with 3 events unacknowledged"),
            std::string::npos)
      << log;
  EXPECT_EQ(log.find("stopped cleanly"), std::string::npos) << log;

  ASSERT_TRUE(h.cluster().SetAllBrokersUp().ok());
  h.StartRelay();
  ASSERT_TRUE(h.collector().WaitForCount(4, absl::Seconds(60))) << h.relay().Log();
  std::set<std::string> ids;
  for (const auto& m : h.collector().Messages()) ids.insert(m.Header("id").value_or(""));
  std::set<std::string> written;
  for (const OutboxRow& row : h.OutboxRows()) written.insert(row.id);
  EXPECT_EQ(ids, written);
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
  EXPECT_NE(h.relay().Log().find("stopped cleanly"), std::string::npos) << h.relay().Log();
  // Kafka's in-flight default (RabbitMQ's is 10,000: relay_rabbitmq_test.cc).
  EXPECT_NE(h.relay().Log().find("(limits 100000, 67108864)"), std::string::npos)
      << h.relay().Log();
}

// Issue 20 point 6: a host that starts the relay before PostgreSQL. Connection
// refused at start is waited for (each attempt logged), and the relay streams once
// the server is up; a wrong password, which only a person can fix, still ends the
// start at once with exit code 2.
TEST(RelayFaults, RunStartedBeforePostgresWaitsForItButAWrongPasswordExitsTwoAtOnce) {
  PrivateCluster cluster;
  {
    absl::StatusOr<pg::Connection> admin = pg::Connection::Open(cluster.conninfo());
    ASSERT_TRUE(admin.ok()) << admin.status();
    ASSERT_TRUE(admin->Exec("ALTER ROLE postgres PASSWORD 'right'").ok());
    // TCP needs the password from here on; the Unix socket stays trusted.
    std::ofstream(cluster.dir() + "/data/pg_hba.conf")
        << "host all all 127.0.0.1/32 scram-sha-256\n"
        << "host replication all 127.0.0.1/32 scram-sha-256\n"
        << "local all all trust\n";
    ASSERT_TRUE(admin->Exec("SELECT pg_reload_conf()").ok());
  }
  RelayHarness h(kTopics, 1, cluster.conninfo() + " password=right");

  auto wrong = ChildProcess::Start({BinPath("outboxd"), "run", "--pg",
                                    h.db().conninfo() + " password=wrong", "--brokers",
                                    h.cluster().bootstraps(), "--slot", h.slot(), "--metrics", ""});
  std::optional<int> code = wrong->Wait(absl::Seconds(30));
  ASSERT_TRUE(code.has_value()) << wrong->Log();
  EXPECT_EQ(*code, 2) << wrong->Log();
  EXPECT_NE(wrong->Log().find("password authentication failed"), std::string::npos) << wrong->Log();
  EXPECT_EQ(wrong->Log().find("not available yet"), std::string::npos) << wrong->Log();

  ASSERT_TRUE(cluster.Stop());
  h.StartRelay({}, "PostgreSQL is not available yet");
  // Still waiting after a few attempts, not exited.
  ASSERT_TRUE(h.relay().WaitForLog("(attempt 3)", absl::Seconds(30))) << h.relay().Log();
  EXPECT_TRUE(h.relay().Running()) << h.relay().Log();
  ASSERT_TRUE(cluster.Start());
  ASSERT_TRUE(WaitForStreaming(h.relay(), absl::Seconds(60))) << h.relay().Log();
  auto conn = h.db().Connect();
  InsertEvent(conn);
  ASSERT_TRUE(h.collector().WaitForCount(1, absl::Seconds(30))) << h.relay().Log();
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

}  // namespace
}  // namespace outboxd::test
