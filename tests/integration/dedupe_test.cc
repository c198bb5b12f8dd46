// Issue 30, no duplicates (--dedupe, relay/resume_dedupe.h): `outboxd run` against the
// mock cluster over TCP, with kcat as the independent reader. A relay killed under load
// and restarted sends nothing the broker already holds; a gap (a dead letter between
// acknowledged events of one partition) is never skipped as present; other producers'
// messages, even with this relay's ids, are never taken for its own.
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"
#include "support/metrics_text.h"
#include "support/relay_harness.h"
#include "support/wait_until.h"

namespace outboxd::test {
namespace {

const std::vector<std::string> kTopics = {"pedido.confirmado"};

// How many messages of `topic` carry the id, by their outboxd_slot header ("" none).
std::map<std::string, int> CopiesOf(const std::vector<std::string>& headers,
                                    const std::string& id) {
  std::map<std::string, int> by_mark;
  for (const std::string& line : headers) {
    std::string found_id, mark;
    for (absl::string_view field : absl::StrSplit(line, ',')) {
      if (absl::ConsumePrefix(&field, "id=")) found_id = std::string(field);
      if (absl::ConsumePrefix(&field, "outboxd_slot=")) mark = std::string(field);
    }
    if (found_id == id) ++by_mark[mark];
  }
  return by_mark;
}

// Produces one message with kcat, the other producer, with these headers.
void KcatProduce(RelayHarness& h, const std::string& topic,
                 const std::vector<std::string>& headers) {
  std::string command = absl::StrCat("echo '{}' | timeout 30 kcat -b ", h.cluster().bootstraps(),
                                     " -P -t ", topic, " -k other");
  for (const std::string& header : headers) absl::StrAppend(&command, " -H '", header, "'");
  ASSERT_EQ(system(command.c_str()), 0) << command;
}

std::string InsertEvent(TestDatabase& db, const std::string& aggregate, const std::string& type,
                        const std::string& payload = R"({"n": 1})") {
  return db.Scalar(absl::StrCat("INSERT INTO outbox (aggregate_id, tipo, payload) VALUES ('",
                                aggregate, "', '", type, "', '", payload, "') RETURNING id"));
}

std::string Mark(RelayHarness& h) { return h.db().name() + "/" + h.slot(); }

// Events a relay's log says it skipped as already at the broker ("--dedupe: N of the
// M events resumed since ... were already at the broker").
int SkippedInLog(const std::string& log) {
  int skipped = 0;
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    const size_t at = line.find("--dedupe: ");
    if (at == absl::string_view::npos || !absl::StrContains(line, "already at the broker")) {
      continue;
    }
    int n = 0;
    if (absl::SimpleAtoi(line.substr(at + 10, line.find(' ', at + 10) - at - 10), &n)) {
      skipped += n;
    }
  }
  return skipped;
}

// What each read-back of pedido.confirmado cost a restart, from the relays' logs
// (base/progress.h's summary: "read-back of Kafka topic T done: N events in 12ms ...").
std::string ReadBackCosts(const std::string& log) {
  constexpr absl::string_view kDone = "read-back of Kafka topic pedido.confirmado done: ";
  std::vector<std::string> costs;
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    const size_t at = line.find(kDone);
    if (at != absl::string_view::npos) costs.emplace_back(line.substr(at + kDone.size()));
  }
  return absl::StrJoin(costs, "; ");
}

// The end of a fault test under load: 200 more transactions after the fault, then each
// event exactly once (ExpectEachEventOnce), the figure printed, a clean stop.
void ExpectEachOnceAfterMoreLoad(RelayHarness& h, Load& load, const char* fault) {
  ASSERT_TRUE(load.WaitForMore(200));
  load.Stop();
  const size_t duplicates = ExpectEachEventOnce(h);
  std::printf("dedupe: %s: %zu events, %zu duplicates\n", fault, h.OutboxRows().size(), duplicates);
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

TEST(Dedupe, KillNineFiveTimesUnderLoadLosesNothingAndSendsNothingTwice) {
  RelayHarness h(kTopics);
  h.StartRelay();
  Load load(h.db().conninfo());
  const int kKills = 5;
  // By the restarted relays: the windows the kills left were real.
  const std::string killed_logs = KillNineUnderLoad(h, load, kKills);
  int skipped = SkippedInLog(killed_logs);
  ASSERT_TRUE(load.WaitForMore(100));
  load.Stop();
  const size_t duplicates = ExpectEachEventOnce(h);
  skipped += SkippedInLog(h.relay().Log());
  EXPECT_GT(skipped, 0) << "no kill left an acknowledged, unconfirmed event to skip";
  std::printf(
      "dedupe: kill -9 x%d under load: %zu events, %d transactions, %d skipped as already "
      "sent, %zu duplicates\n",
      kKills, h.OutboxRows().size(), load.transactions(), skipped, duplicates);
  std::printf("dedupe: read-backs at the restarts: %s\n",
              ReadBackCosts(killed_logs + h.relay().Log()).c_str());
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

// Every broker down under load while 300 transactions commit: the producer keeps its
// messages (run sets message.timeout.ms=0, kafka/publisher.cc, so no outage is longer
// than it), and when the brokers return each event arrives once, none lost.
TEST(Dedupe, ABrokerOutageUnderLoadLosesNothingAndSendsNothingTwice) {
  RelayHarness h(kTopics);
  h.StartRelay();
  Load load(h.db().conninfo());
  ASSERT_TRUE(load.WaitForMore(200));
  for (int broker = 1; broker <= 3; ++broker) ASSERT_TRUE(h.cluster().SetBrokerDown(broker).ok());
  ASSERT_TRUE(load.WaitForMore(300));  // committed meanwhile, held by the producer
  for (int broker = 1; broker <= 3; ++broker) ASSERT_TRUE(h.cluster().SetBrokerUp(broker).ok());
  ExpectEachOnceAfterMoreLoad(h, load, "all brokers down for 300 transactions under load");
}

// The walsender killed while every Produce request fails, retriably: the session ends
// with events still in the producer, unacknowledged, and the next session streams them
// again. None of the old ones may reach the broker after the read-back looked, or they
// go out twice, and none may overtake another (a request retried after the rest was
// dropped broke an aggregate's order once): the session's end drops the producer with
// all of them (Pipeline::DropSinkBacklog). The produce errors last until the relay has
// done that and read back.
TEST(Dedupe, AWalsenderKillWithEventsInFlightSendsNothingTwice) {
  RelayHarness h(kTopics);
  h.StartRelay();
  Load load(h.db().conninfo());
  ASSERT_TRUE(load.WaitForMore(200));
  constexpr int kNotEnoughReplicas = 19;  // retriable: the producer keeps the messages
  h.cluster().PushProduceErrors(kNotEnoughReplicas, 100000);
  ASSERT_TRUE(load.WaitForMore(100));
  auto conn = h.db().Connect();
  ASSERT_TRUE(conn.ExecParams("SELECT pg_terminate_backend(active_pid) FROM "
                              "pg_replication_slots WHERE slot_name = $1",
                              {h.slot()})
                  .ok());
  ASSERT_TRUE(WaitUntil(absl::Seconds(30), [&] {
    const std::string log = h.relay().Log();
    return absl::StrContains(log, "of the ended session the broker had not acknowledged") &&
           absl::StrContains(log, "read-back of Kafka topic pedido.confirmado done");
  })) << h.relay().Log();
  h.cluster().ClearProduceErrors();
  ExpectEachOnceAfterMoreLoad(h, load, "walsender killed, produce failing");
}

// The gap case (issue 30): in one partition an event too large to send is a dead
// letter while the next one is acknowledged; an earlier event, stuck on a broker that
// is down, keeps the slot from confirming either, and the relay is killed. After the
// restart the large event is a dead letter again (once in the table), never skipped
// as present because a later event is there; the next one is not sent twice.
TEST(Dedupe, AGapBeforeAnAcknowledgedEventIsNeverSkippedAsPresent) {
  RelayHarness h(kTopics);
  ASSERT_TRUE(h.cluster().CreateTopic("gap.topic", 1, 3).ok());
  ASSERT_TRUE(h.cluster().SetPartitionLeader("gap.topic", 0, 1).ok());
  ASSERT_TRUE(h.cluster().CreateTopic("stuck.topic", 1, 3).ok());
  ASSERT_TRUE(h.cluster().SetPartitionLeader("stuck.topic", 0, 2).ok());
  h.StartRelay({"--kafka", "message.max.bytes=3000"});
  const std::string before = InsertEvent(h.db(), "a", "gap.topic");
  ASSERT_TRUE(h.WaitForConfirmed(h.CurrentWalLsn(), absl::Seconds(30))) << h.relay().Log();

  ASSERT_TRUE(h.cluster().SetBrokerDown(2).ok());
  const std::string stuck = InsertEvent(h.db(), "s", "stuck.topic");
  const std::string large = InsertEvent(
      h.db(), "b", "gap.topic", absl::StrCat(R"({"blob": ")", std::string(5000, 'x'), R"("})"));
  const std::string next = InsertEvent(h.db(), "c", "gap.topic");
  ASSERT_TRUE(h.db().WaitForScalar("SELECT count(*) FROM outbox_dead_letter", "1"));
  std::map<std::string, int> copies;
  ASSERT_TRUE(WaitUntil(absl::Seconds(30), [&] {
    copies = CopiesOf(KcatHeaders(h, "gap.topic"), next);
    return copies[Mark(h)] == 1;
  })) << h.relay().Log();
  h.relay().Signal(SIGKILL);
  ASSERT_EQ(h.relay().Wait(absl::Seconds(10)), 128 + SIGKILL);

  ASSERT_TRUE(h.cluster().SetBrokerUp(2).ok());
  h.StartRelay({"--kafka", "message.max.bytes=3000"});
  ASSERT_TRUE(h.WaitForConfirmed(h.CurrentWalLsn(), absl::Seconds(30))) << h.relay().Log();
  const std::vector<std::string> gap = KcatHeaders(h, "gap.topic");
  EXPECT_EQ(CopiesOf(gap, before)[Mark(h)], 1);
  EXPECT_EQ(CopiesOf(gap, next)[Mark(h)], 1) << "acknowledged before the kill: not sent again";
  EXPECT_TRUE(CopiesOf(gap, large).empty()) << "too large: never at the broker";
  EXPECT_EQ(CopiesOf(KcatHeaders(h, "stuck.topic"), stuck)[Mark(h)], 1);
  EXPECT_EQ(h.db().Scalar(
                absl::StrCat("SELECT count(*) FROM outbox_dead_letter WHERE id = '", large, "'")),
            "1")
      << "the large event is still a dead letter, replayable";
  EXPECT_TRUE(absl::StrContains(h.relay().Log(), "read-back of Kafka topic gap.topic"))
      << h.relay().Log();
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

// Two outbox rows with one id (an adopted table without that key, two partitions of
// one) on two aggregates in two partitions: the first is stuck behind a broker that
// is down, the second reaches the broker, and the relay is killed. After the restart
// the first is sent and the second is not. With presence by id alone the second's
// message answered for the first, which was skipped: lost.
TEST(Dedupe, TwoRowsWithOneIdAreTwoEventsAcrossAKill) {
  RelayHarness h(kTopics);
  h.db().Exec("ALTER TABLE outbox DROP CONSTRAINT outbox_id_key");
  ASSERT_TRUE(h.cluster().CreateTopic("dup.topic", 2, 3).ok());
  ASSERT_TRUE(h.cluster().SetPartitionLeader("dup.topic", 0, 1).ok());
  ASSERT_TRUE(h.cluster().SetPartitionLeader("dup.topic", 1, 1).ok());
  h.StartRelay();
  // Which partition each of a few keys hashes to: one key for each.
  for (int i = 0; i < 8; ++i) InsertEvent(h.db(), absl::StrCat("k", i), "dup.topic");
  ASSERT_TRUE(h.WaitForConfirmed(h.CurrentWalLsn(), absl::Seconds(30))) << h.relay().Log();
  std::map<std::string, std::string> key_of_partition;
  for (const std::string& line : KcatLines(h, "dup.topic", "%p %k")) {
    key_of_partition.emplace(line.substr(0, line.find(' ')), line.substr(line.find(' ') + 1));
  }
  ASSERT_EQ(key_of_partition.size(), 2u) << "8 keys, all in one partition";
  const std::string stuck = key_of_partition["0"];
  const std::string through = key_of_partition["1"];
  ASSERT_TRUE(h.cluster().SetPartitionLeader("dup.topic", 0, 2).ok());
  ASSERT_TRUE(h.cluster().SetBrokerDown(2).ok());

  const std::string id = "7d3c2a8e-0000-4000-8000-000000000001";
  for (const std::string& aggregate : {stuck, through}) {
    h.db().Exec(absl::StrCat("INSERT INTO outbox (id, aggregate_id, tipo, payload) VALUES ('", id,
                             "', '", aggregate, "', 'dup.topic', '{}')"));
  }
  // The second reached the broker (kcat would wait for the partition that is down).
  ASSERT_TRUE(WaitForMetric(h.relay(), "outboxd_events_published_total{topic=\"dup.topic\"}", 9,
                            absl::Seconds(30)))
      << h.relay().Log();
  h.relay().Signal(SIGKILL);
  ASSERT_EQ(h.relay().Wait(absl::Seconds(10)), 128 + SIGKILL);

  ASSERT_TRUE(h.cluster().SetBrokerUp(2).ok());
  h.StartRelay();
  ASSERT_TRUE(h.WaitForConfirmed(h.CurrentWalLsn(), absl::Seconds(30))) << h.relay().Log();
  // The key of each copy of `id` in dup.topic, as kcat reads them.
  std::vector<std::string> copies;
  for (const std::string& line : KcatLines(h, "dup.topic", "%h %k")) {
    if (absl::StrContains(line, "id=" + id)) copies.push_back(line.substr(line.rfind(' ') + 1));
  }
  std::sort(copies.begin(), copies.end());
  std::vector<std::string> expected = {stuck, through};
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(copies, expected) << "each row once: the stuck one sent, the other not again\n"
                              << h.relay().Log();
  EXPECT_EQ(MetricValue(h.Metrics(h.relay()), "outboxd_dedupe_skipped_total"), 1)
      << h.relay().Log();
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

// Another producer writes to the topic meanwhile, one of them copying the id of an
// event the relay has not delivered yet (with no mark, and with another slot's): the
// restarted relay still sends that event, and the foreign messages stay as they were.
TEST(Dedupe, OtherProducersMessagesAreNeverTakenForTheRelaysOwn) {
  RelayHarness h(kTopics);
  ASSERT_TRUE(h.cluster().CreateTopic("shared.topic", 1, 3).ok());
  ASSERT_TRUE(h.cluster().SetPartitionLeader("shared.topic", 0, 2).ok());
  h.StartRelay();
  const std::string first = InsertEvent(h.db(), "a", "shared.topic");
  ASSERT_TRUE(h.WaitForConfirmed(h.CurrentWalLsn(), absl::Seconds(30))) << h.relay().Log();
  KcatProduce(h, "shared.topic", {"id=theirs-1"});

  ASSERT_TRUE(h.cluster().SetBrokerDown(2).ok());
  const std::string pending = InsertEvent(h.db(), "b", "shared.topic");  // in flight
  h.relay().Signal(SIGKILL);
  ASSERT_EQ(h.relay().Wait(absl::Seconds(10)), 128 + SIGKILL);
  ASSERT_TRUE(h.cluster().SetBrokerUp(2).ok());
  // Copies of the pending event's id, below the window and marked by nobody or by
  // another relay: none of them is this relay's.
  KcatProduce(h, "shared.topic", {"id=" + pending, "lsn=0/1"});
  KcatProduce(h, "shared.topic", {"id=" + pending, "lsn=0/1", "outboxd_slot=other/" + h.slot()});

  h.StartRelay();
  ASSERT_TRUE(h.WaitForConfirmed(h.CurrentWalLsn(), absl::Seconds(30))) << h.relay().Log();
  const std::vector<std::string> shared = KcatHeaders(h, "shared.topic");
  EXPECT_EQ(CopiesOf(shared, first)[Mark(h)], 1);
  std::map<std::string, int> copies = CopiesOf(shared, pending);
  EXPECT_EQ(copies[Mark(h)], 1) << "sent: the copies are not the relay's";
  EXPECT_EQ(copies[""], 1);
  EXPECT_EQ(copies["other/" + h.slot()], 1);
  EXPECT_EQ(CopiesOf(shared, "theirs-1").size(), 1u);
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

}  // namespace
}  // namespace outboxd::test
