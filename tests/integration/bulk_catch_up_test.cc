// The bulk catch-up (issue 17 point 3, src/relay/bulk_stream.h): a backlog read through
// pg_logical_slot_peek_binary_changes in chunks keeps every guarantee of the streamed
// one. Each test writes a backlog while no relay runs, starts `outboxd run` with
// --bulk-catch-up 1 (any backlog) and small chunks (several per backlog), provokes its
// fault mid-chunk and checks what reached the broker: every committed event, in commit
// order per aggregate, and the slot never confirmed past what the broker holds.
#include <csignal>
#include <cstdio>
#include <map>
#include <string>

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
constexpr char kBulkDone[] = "bulk catch-up done on slot";

// `txs` transactions of `rows` rows each over aggregates agg-0..agg-6, committed one by
// one (a DO block's COMMIT) while no relay runs.
void WriteBacklog(RelayHarness& h, int txs, int rows) {
  auto conn = h.db().Connect();
  auto r = conn.Exec(absl::StrCat(
      "DO $$ BEGIN FOR t IN 1..", txs,
      " LOOP INSERT INTO outbox (aggregate_id, tipo, payload) SELECT 'agg-' || ((t * ", rows,
      " + n) % 7), 'pedido.confirmado', jsonb_build_object('t', t, 'n', n) "
      "FROM generate_series(1, ",
      rows, ") n; COMMIT; END LOOP; END $$"));
  ASSERT_TRUE(r.ok()) << r.status();
}

std::vector<std::string> BulkArgs(int chunk) {
  return {"--bulk-catch-up", "1", "--bulk-catch-up-chunk", absl::StrCat(chunk)};
}

double Published(RelayHarness& h, ChildProcess& relay) {
  return MetricValue(h.Metrics(relay),
                     "outboxd_events_published_total{topic=\"pedido.confirmado\"}")
      .value_or(0);
}

TEST(BulkCatchUp, DrainsABacklogThroughSqlInOrderThenStreams) {
  // A cluster of its own: a chunk's end is judged by WAL, and other tests' WAL on the
  // shared cluster made the bulk phase end after 7 of its 16 chunks (seen once).
  PrivateCluster cluster;
  RelayHarness h(kTopics, 3, cluster.conninfo());
  WriteBacklog(h, 5000, 1);  // over 1 MiB of WAL: a catch-up with its progress line
  WriteBacklog(h, 5, 300);   // multi-row transactions, one Commit for 300 rows
  const pg::Lsn backlog_end = h.CurrentWalLsn();
  h.StartRelay(BulkArgs(1000));
  ASSERT_TRUE(h.relay().WaitForLog(kBulkDone, absl::Seconds(90))) << h.relay().Log();
  // Streaming now: a new event arrives through the walsender.
  auto conn = h.db().Connect();
  ASSERT_TRUE(conn.Exec("INSERT INTO outbox (aggregate_id, tipo, payload) "
                        "VALUES ('agg-1', 'pedido.confirmado', '{\"live\": 1}')")
                  .ok());
  const size_t duplicates = ExpectEverythingDelivered(h, absl::Seconds(60));
  EXPECT_EQ(duplicates, 0u) << "no fault, no duplicate";
  EXPECT_TRUE(h.WaitForConfirmed(backlog_end, absl::Seconds(30))) << h.relay().Log();
  const std::string log = h.relay().Log();
  EXPECT_NE(log.find("catching up through SQL (bulk) on slot"), std::string::npos) << log;
  // 5,000 transactions of three messages each (Begin, Insert, Commit), in chunks.
  EXPECT_GE(ScrapeMetric(h.relay(), "outboxd_catchup_bulk_changes_total").value_or(0), 15000)
      << h.Metrics(h.relay());
  // The catch-up's progress follows the bulk phase as it follows a stream.
  EXPECT_TRUE(WaitUntil(absl::Seconds(30), [&] {
    return ScrapeMetric(h.relay(), "outboxd_catchup_eta_seconds") == 0.0;
  })) << h.Metrics(h.relay());
  EXPECT_TRUE(h.relay().WaitForLog("catch-up done", absl::Seconds(30))) << h.relay().Log();
  std::printf("bulk catch-up: %zu events; %s\n", h.OutboxRows().size(),
              log.substr(log.find(kBulkDone), 120).c_str());
  EXPECT_EQ(h.StopRelay(), 0) << log;
}

// --source both: pgoutput's messages 'true' in the peek too; rows and emitted events
// keep one commit order.
TEST(BulkCatchUp, RowsAndEmittedEventsKeepCommitOrderThroughSql) {
  RelayHarness h(kTopics);
  auto conn = h.db().Connect();
  ASSERT_TRUE(
      conn.Exec("DO $$ BEGIN FOR t IN 1..1000 LOOP "
                "INSERT INTO outbox (aggregate_id, tipo, payload) VALUES ("
                "'agg-' || t % 7, 'pedido.confirmado', jsonb_build_object('t', t, 'k', 'a')); "
                "PERFORM outboxd_emit('agg-' || t % 7, 'pedido.confirmado', "
                "jsonb_build_object('t', t, 'k', 'b')); COMMIT; END LOOP; END $$")
          .ok());
  const pg::Lsn backlog_end = h.CurrentWalLsn();
  h.StartRelay({"--source", "both", "--bulk-catch-up", "1", "--bulk-catch-up-chunk", "600"});
  ASSERT_TRUE(h.relay().WaitForLog(kBulkDone, absl::Seconds(90))) << h.relay().Log();
  ASSERT_TRUE(h.collector().WaitForCount(2000, absl::Seconds(60))) << h.relay().Log();
  EXPECT_TRUE(h.WaitForConfirmed(backlog_end, absl::Seconds(30))) << h.relay().Log();
  // Per aggregate: transaction t's row ('a') then its message ('b'), t increasing.
  std::map<std::string, std::pair<int, std::string>> last;
  for (const CollectedMessage& m : h.collector().Messages()) {
    const size_t t_at = m.value.find("\"t\": ");
    ASSERT_NE(t_at, std::string::npos) << m.value;
    const std::pair<int, std::string> at = {std::stoi(m.value.substr(t_at + 5)),
                                            m.value.substr(m.value.find("\"k\": ") + 6, 1)};
    auto [it, fresh] = last.emplace(m.key, at);
    if (!fresh) {
      EXPECT_LT(it->second, at) << "aggregate " << m.key << " out of order";
      it->second = at;
    }
  }
  EXPECT_EQ(h.collector().Messages().size(), 2000u);
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

TEST(BulkCatchUp, KillNineMidChunkLosesNothing) {
  RelayHarness h(kTopics);
  WriteBacklog(h, 6000, 1);
  // Slow acknowledgements: the kill lands in the bulk phase, with a chunk in flight.
  ASSERT_TRUE(h.cluster().SetAllBrokersRtt(50).ok());
  h.StartRelay(BulkArgs(600));
  ASSERT_TRUE(h.collector().WaitForCount(700, absl::Seconds(90))) << h.relay().Log();
  h.relay().Signal(SIGKILL);
  ASSERT_EQ(h.relay().Wait(absl::Seconds(10)), 128 + SIGKILL);
  ASSERT_EQ(h.relay().Log().find(kBulkDone), std::string::npos)
      << "killed after the bulk phase: nothing tested\n"
      << h.relay().Log();
  ASSERT_TRUE(h.cluster().SetAllBrokersRtt(0).ok());
  h.StartRelay(BulkArgs(600));
  ASSERT_TRUE(h.relay().WaitForLog(kBulkDone, absl::Seconds(90))) << h.relay().Log();
  const size_t duplicates = ExpectEverythingDelivered(h, absl::Seconds(60));
  std::printf("kill -9 mid-chunk: %zu events, %zu duplicates\n", h.OutboxRows().size(), duplicates);
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

// A 6,000-event backlog read in chunks of 600 with slow acknowledgements, the
// brokers taken down once 500 events arrived, and events seen waiting for them (the
// oldest unacknowledged one ages).
void BreakTheBrokersMidChunk(RelayHarness& h) {
  WriteBacklog(h, 6000, 1);
  ASSERT_TRUE(h.cluster().SetAllBrokersRtt(50).ok());
  h.StartRelay(BulkArgs(600));
  ASSERT_TRUE(h.collector().WaitForCount(500, absl::Seconds(90))) << h.relay().Log();
  ASSERT_TRUE(h.cluster().SetAllBrokersDown().ok());
  ASSERT_TRUE(WaitForMetric(h.relay(), "outboxd_oldest_unacked_age_seconds", 3, absl::Seconds(60)))
      << h.relay().Log();
}

TEST(BulkCatchUp, BrokerOutageMidChunkNeverConfirmsPastTheBroker) {
  RelayHarness h(kTopics);
  ASSERT_NO_FATAL_FAILURE(BreakTheBrokersMidChunk(h));
  ASSERT_EQ(h.relay().Log().find(kBulkDone), std::string::npos) << h.relay().Log();
  // Killed during the outage: had the slot been advanced past what the broker holds,
  // the restarted relay would never see those events again.
  h.relay().Signal(SIGKILL);
  ASSERT_EQ(h.relay().Wait(absl::Seconds(10)), 128 + SIGKILL);
  ASSERT_TRUE(h.cluster().SetAllBrokersUp().ok());
  ASSERT_TRUE(h.cluster().SetAllBrokersRtt(0).ok());
  h.StartRelay(BulkArgs(600));
  const size_t duplicates = ExpectEverythingDelivered(h, absl::Seconds(90));
  std::printf("broker outage mid-chunk, then kill -9: %zu events, %zu duplicates\n",
              h.OutboxRows().size(), duplicates);
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

TEST(BulkCatchUp, BrokerOutageMidChunkThenBackDeliversEverything) {
  RelayHarness h(kTopics);
  ASSERT_NO_FATAL_FAILURE(BreakTheBrokersMidChunk(h));
  ASSERT_TRUE(h.cluster().SetAllBrokersUp().ok());
  ASSERT_TRUE(h.cluster().SetAllBrokersRtt(0).ok());
  ASSERT_TRUE(h.relay().WaitForLog(kBulkDone, absl::Seconds(90))) << h.relay().Log();
  const size_t duplicates = ExpectEverythingDelivered(h, absl::Seconds(90));
  std::printf("broker outage mid-chunk: %zu events, %zu duplicates\n", h.OutboxRows().size(),
              duplicates);
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

TEST(BulkCatchUp, PoisonEventInAChunkIsDeadLetteredAndItsAggregateParked) {
  RelayHarness h(kTopics);
  // 600 single-row transactions; the 300th is a JSON scalar (never publishable) of
  // aggregate `bad`, the ten after it are `bad`'s followers.
  auto conn = h.db().Connect();
  ASSERT_TRUE(conn.Exec("DO $$ BEGIN FOR t IN 1..600 LOOP "
                        "INSERT INTO outbox (aggregate_id, tipo, payload) VALUES ("
                        "CASE WHEN t BETWEEN 300 AND 310 THEN 'bad' ELSE 'ok-' || t % 5 END, "
                        "'pedido.confirmado', "
                        "CASE WHEN t = 300 THEN '42'::jsonb ELSE jsonb_build_object('t', t) END); "
                        "COMMIT; END LOOP; END $$")
                  .ok());
  const pg::Lsn backlog_end = h.CurrentWalLsn();
  h.StartRelay(BulkArgs(300));
  ASSERT_TRUE(h.relay().WaitForLog(kBulkDone, absl::Seconds(90))) << h.relay().Log();
  ASSERT_TRUE(h.collector().WaitForCount(589, absl::Seconds(60))) << h.relay().Log();
  ASSERT_TRUE(WaitForMetric(h.relay(), "outboxd_events_dead_lettered_total", 11, absl::Seconds(30)))
      << h.relay().Log();
  EXPECT_TRUE(h.WaitForConfirmed(backlog_end, absl::Seconds(30)))
      << "the slot must advance past dead-lettered events\n"
      << h.relay().Log();
  EXPECT_EQ(h.db().Scalar("SELECT string_agg(payload::text, ',' ORDER BY seq) FROM "
                          "(SELECT * FROM outbox_dead_letter ORDER BY seq LIMIT 2) d"),
            "42,{\"t\": 301}");
  EXPECT_EQ(h.db().Scalar("SELECT count(*) FROM outbox_dead_letter WHERE aggregate_id = 'bad'"),
            "11");
  std::map<std::string, int> last_t;  // per aggregate: commit order
  for (const CollectedMessage& m : h.collector().Messages()) {
    EXPECT_NE(m.key, "bad") << "a parked aggregate's event was published";
    const int t = std::stoi(m.value.substr(m.value.find(':') + 1));
    EXPECT_LT(last_t[m.key], t) << "aggregate " << m.key << " out of order";
    last_t[m.key] = t;
  }
  EXPECT_EQ(h.collector().Messages().size(), 589u);
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

TEST(BulkCatchUp, SwitchToStreamingWithWritersRunningLosesNothing) {
  RelayHarness h(kTopics);
  Load load(h.db().conninfo());
  ASSERT_TRUE(load.WaitForMore(1500));  // the backlog, written while no relay runs
  h.StartRelay(BulkArgs(500));
  ASSERT_TRUE(h.relay().WaitForLog(kBulkDone, absl::Seconds(90))) << h.relay().Log();
  ASSERT_TRUE(load.WaitForMore(500));  // written after the switch
  load.Stop();
  const size_t duplicates = ExpectEverythingDelivered(h, absl::Seconds(60));
  EXPECT_EQ(duplicates, 0u) << "no fault, no duplicate";
  std::printf("bulk catch-up under load, then streaming: %zu events, %d transactions\n",
              h.OutboxRows().size(), load.transactions());
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

TEST(BulkCatchUp, SecondRelayStandsByDuringTheBulkPhase) {
  RelayHarness h(kTopics);
  WriteBacklog(h, 6000, 1);
  ASSERT_TRUE(h.cluster().SetAllBrokersRtt(50).ok());
  h.StartRelay(BulkArgs(300));
  // One that would stream and one that would catch up in bulk too: between two peeks
  // the slot is not active, only the lock keeps them off.
  std::unique_ptr<ChildProcess> streamer = h.SpawnRelay({"--bulk-catch-up", "0"});
  std::unique_ptr<ChildProcess> bulk = h.SpawnRelay(BulkArgs(300));
  ASSERT_TRUE(streamer->WaitForLog("standing by", absl::Seconds(30))) << streamer->Log();
  ASSERT_TRUE(bulk->WaitForLog("standing by", absl::Seconds(30))) << bulk->Log();
  ASSERT_EQ(h.relay().Log().find(kBulkDone), std::string::npos)
      << "the bulk phase was over before the standbys came: nothing tested\n"
      << h.relay().Log();
  // Several chunks go by (each a gap without an active slot) with both retrying.
  const size_t seen = h.collector().Messages().size();
  ASSERT_TRUE(h.collector().WaitForCount(seen + 1200, absl::Seconds(90))) << h.relay().Log();
  ASSERT_TRUE(h.cluster().SetAllBrokersRtt(0).ok());
  ASSERT_TRUE(h.relay().WaitForLog(kBulkDone, absl::Seconds(90))) << h.relay().Log();
  const size_t duplicates = ExpectEverythingDelivered(h, absl::Seconds(60));
  EXPECT_EQ(duplicates, 0u) << "a second relay published the same events";
  EXPECT_EQ(Published(h, *streamer), 0) << streamer->Log();
  EXPECT_EQ(Published(h, *bulk), 0) << bulk->Log();
  EXPECT_EQ(streamer->Log().find("streaming slot"), std::string::npos) << streamer->Log();
  EXPECT_EQ(bulk->Log().find("catching up through SQL"), std::string::npos) << bulk->Log();
  streamer->Signal(SIGTERM);
  bulk->Signal(SIGTERM);
  EXPECT_EQ(streamer->Wait(absl::Seconds(30)), 0) << streamer->Log();
  EXPECT_EQ(bulk->Wait(absl::Seconds(30)), 0) << bulk->Log();
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

// A SIGTERM mid-chunk: the relay waits for what is in flight, advances the slot to the
// watermark and exits 0; the next start resumes right after it (no duplicate).
TEST(BulkCatchUp, StopMidChunkAdvancesToTheWatermark) {
  RelayHarness h(kTopics);
  WriteBacklog(h, 6000, 1);
  ASSERT_TRUE(h.cluster().SetAllBrokersRtt(50).ok());
  h.StartRelay(BulkArgs(600));
  ASSERT_TRUE(h.collector().WaitForCount(700, absl::Seconds(90))) << h.relay().Log();
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
  const std::string log = h.relay().Log();
  ASSERT_EQ(log.find(kBulkDone), std::string::npos) << log;
  EXPECT_NE(log.find("bulk catch-up stopped on slot " + h.slot()), std::string::npos) << log;
  // The slot holds the watermark the relay reached ("confirmed X; ..."), not the end
  // of the last whole chunk.
  const size_t at = log.find("info confirmed ");
  ASSERT_NE(at, std::string::npos) << log;
  const size_t from = at + std::string("info confirmed ").size();
  absl::StatusOr<pg::Lsn> watermark = pg::ParseLsn(log.substr(from, log.find(';', from) - from));
  ASSERT_TRUE(watermark.ok()) << log;
  EXPECT_EQ(pg::FormatLsn(h.ConfirmedFlushLsn()), pg::FormatLsn(*watermark)) << log;
  ASSERT_TRUE(h.cluster().SetAllBrokersRtt(0).ok());
  h.StartRelay(BulkArgs(600));
  const size_t duplicates = ExpectEverythingDelivered(h, absl::Seconds(90));
  EXPECT_EQ(duplicates, 0u) << "the restart resumed before the acknowledged position";
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

}  // namespace
}  // namespace outboxd::test
