// What networks do (issue 33, part 3): `outboxd run` reaches PostgreSQL through a
// FaultProxy (support/fault_proxy.h) that blackholes, delays and throttles the path.
// A blackhole is a half-open connection: both sockets stay open and nothing arrives,
// which only the relay's own receive timeout can notice. Each test writes under load
// through the fault and checks that every committed event reached Kafka once.
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "support/fault_proxy.h"
#include "support/metrics_text.h"
#include "support/relay_harness.h"
#include "support/wait_until.h"

namespace outboxd::test {
namespace {

const std::vector<std::string> kTopics = {"pedido.confirmado"};

// A proxy in front of the test database's server, and the relay's conninfo through
// it; the test's own connections (the load, the checks) go straight.
class ProxiedPostgres {
 public:
  // `wal_sender_timeout`: the relay's walsender's, set in its conninfo (a short one
  // keeps the stream's receive timeout short too: relay/session.h).
  explicit ProxiedPostgres(RelayHarness& h, const std::string& wal_sender_timeout = "")
      : proxy_("127.0.0.1", std::stoi(h.db().Scalar("SELECT current_setting('port')"))) {
    EXPECT_TRUE(proxy_.Start().ok());
    h.set_relay_conninfo(absl::StrCat(
        h.db().conninfo(), " host=127.0.0.1 port=", proxy_.port(),
        wal_sender_timeout.empty()
            ? ""
            : absl::StrCat(" options='-c wal_sender_timeout=", wal_sender_timeout, "'")));
  }
  FaultProxy& proxy() { return proxy_; }

 private:
  FaultProxy proxy_;
};

double Reconnects(RelayHarness& h) {
  return MetricValue(h.Metrics(h.relay()), "outboxd_reconnects_total").value_or(-1);
}

// The path to PostgreSQL goes silent with both connections open (a dead NAT box): the
// relay notices within --pg-receive-timeout (2 s here, plus a loop turn), /healthz
// says so meanwhile, it reconnects once the path is back, and loses nothing.
TEST(NetworkFaults, BlackholedPostgresIsNoticedWithinTheReceiveTimeoutAndLosesNothing) {
  RelayHarness h(kTopics);
  ProxiedPostgres pg(h, "2s");  // the stream's timeout is at least wal_sender_timeout
  h.StartRelay({"--pg-receive-timeout", "2s"});
  Load load(h.db().conninfo());
  ASSERT_TRUE(load.WaitForMore(100));
  ASSERT_EQ(h.HealthStatus(h.relay()), 200) << h.relay().Log();

  const absl::Time blackholed = absl::Now();
  pg.proxy().Blackhole();
  ASSERT_TRUE(h.relay().WaitForLog("reconnecting in", absl::Seconds(30))) << h.relay().Log();
  const absl::Duration detected = absl::Now() - blackholed;
  EXPECT_TRUE(WaitUntil(absl::Seconds(10), [&] { return h.HealthStatus(h.relay()) == 503; }))
      << "healthz while PostgreSQL is unreachable";
  const std::string log = h.relay().Log();
  EXPECT_TRUE(log.find("no message from PostgreSQL") != std::string::npos ||
              log.find("sent no answer within 2s") != std::string::npos)
      << log;
  // 2 s of silence, the ping at 1 s, the loop's turn of at most 1 s: 8 s is slack
  // for a loaded machine.
  EXPECT_LE(detected, absl::Seconds(8)) << log;
  ASSERT_TRUE(load.WaitForMore(100));  // written while the relay cannot read

  pg.proxy().Heal();
  ASSERT_TRUE(WaitForMetric(h.relay(), "outboxd_connected", 1, absl::Seconds(60)))
      << h.relay().Log();
  ASSERT_TRUE(load.WaitForMore(100));
  load.Stop();
  const size_t duplicates = ExpectEachEventOnce(h);
  EXPECT_TRUE(WaitUntil(absl::Seconds(30), [&] { return h.HealthStatus(h.relay()) == 200; }))
      << h.relay().Log();
  std::printf(
      "blackholed PostgreSQL path noticed in %s (--pg-receive-timeout 2s): %zu events, "
      "%zu duplicates\n",
      absl::FormatDuration(detected).c_str(), h.OutboxRows().size(), duplicates);
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

// 2 s latency spikes and a 64 kB/s cap on the path to PostgreSQL, with the server's
// wal_sender_timeout at 3 s: the relay's feedback keeps the walsender alive, nothing
// times out on either side (no reconnect), and the backlog drains once healed.
TEST(NetworkFaults, LatencySpikesAndABandwidthCapOnThePostgresPathCauseNoReconnect) {
  RelayHarness h(kTopics);
  ProxiedPostgres pg(h, "3s");
  h.StartRelay({"--pg-receive-timeout", "5s"});
  Load load(h.db().conninfo());
  ASSERT_TRUE(load.WaitForMore(100));
  for (int spike = 0; spike < 3; ++spike) {
    const size_t before = h.collector().Count();
    pg.proxy().Stall(absl::Seconds(2));
    WaitForMore(h, before, 50);  // the spike passed and events flow again
  }
  pg.proxy().SetBandwidth(64 << 10);
  ASSERT_TRUE(load.WaitForMore(300));  // seconds of writing behind the cap
  pg.proxy().Heal();
  ASSERT_TRUE(load.WaitForMore(100));
  load.Stop();
  const size_t duplicates = ExpectEachEventOnce(h);
  EXPECT_EQ(Reconnects(h), 0) << h.relay().Log();
  EXPECT_EQ(h.db().Scalar("SELECT count(*) FROM outbox_dead_letter"), "0");
  // The conninfo's wal_sender_timeout took: the feedback went every second.
  EXPECT_NE(h.relay().Log().find("a third of wal_sender_timeout 3000ms"), std::string::npos)
      << h.relay().Log();
  std::printf(
      "3 x 2 s spikes and a 64 kB/s cap on the PostgreSQL path: %zu events, %zu "
      "duplicates, 0 reconnects\n",
      h.OutboxRows().size(), duplicates);
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

// The brokers stop answering while every connection stays open. librdkafka's mock
// brokers advertise their own listeners, so no proxy can sit in their path: a 15 s
// round trip on every response is the blackhole, as the producer sees it (requests
// accepted, nothing back). The slot is never confirmed past what was acknowledged,
// and delivery resumes, nothing lost, when the brokers answer again.
TEST(NetworkFaults, SilentBrokersConfirmNothingEarlyAndDeliveryResumes) {
  RelayHarness h(kTopics);
  h.StartRelay({"--feedback-interval", "200ms"});
  Load load(h.db().conninfo());
  ASSERT_TRUE(load.WaitForMore(100));
  ASSERT_TRUE(h.cluster().SetAllBrokersRtt(15000).ok());
  const pg::Lsn silenced = h.CurrentWalLsn();
  // Written after `silenced`, not acknowledged for 15 s: each status update meanwhile
  // was a chance to confirm it early.
  ASSERT_TRUE(h.WaitForFeedbackWhileInFlight(50, 3, absl::Seconds(10))) << h.relay().Log();
  EXPECT_LE(h.ConfirmedFlushLsn(), silenced);
  ASSERT_TRUE(h.cluster().SetAllBrokersRtt(0).ok());
  ASSERT_TRUE(load.WaitForMore(100));
  load.Stop();
  const size_t duplicates = ExpectEachEventOnce(h);
  EXPECT_EQ(h.db().Scalar("SELECT count(*) FROM outbox_dead_letter"), "0");
  std::printf("brokers silent for 15 s: %zu events, %zu duplicates\n", h.OutboxRows().size(),
              duplicates);
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

// 2 s spikes on every broker response: no dead letter, no reconnect to PostgreSQL
// (the walsender hears the feedback meanwhile), and throughput recovers.
TEST(NetworkFaults, TwoSecondBrokerSpikesCauseNoDeadLetterAndNoReconnect) {
  RelayHarness h(kTopics);
  h.StartRelay();
  Load load(h.db().conninfo());
  ASSERT_TRUE(load.WaitForMore(100));
  for (int spike = 0; spike < 3; ++spike) {
    ASSERT_TRUE(h.cluster().SetAllBrokersRtt(2000).ok());
    ASSERT_TRUE(load.WaitForMore(50));
    ASSERT_TRUE(h.cluster().SetAllBrokersRtt(0).ok());
    const size_t before = h.collector().Count();
    WaitForMore(h, before, 50);  // delivery goes on at full pace
  }
  load.Stop();
  const size_t duplicates = ExpectEachEventOnce(h);
  EXPECT_EQ(Reconnects(h), 0) << h.relay().Log();
  EXPECT_EQ(h.db().Scalar("SELECT count(*) FROM outbox_dead_letter"), "0");
  std::printf("3 x 2 s broker spikes: %zu events, %zu duplicates, 0 reconnects\n",
              h.OutboxRows().size(), duplicates);
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

}  // namespace
}  // namespace outboxd::test
