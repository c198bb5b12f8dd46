// A range-partitioned outbox (by criado_em), end to end on real PostgreSQL: one a
// user created (issue 19 point 1) and one `outboxd setup --partition-by` creates.
// Setup publishes it through the partition root (a publication that names the leaf
// partitions is switched), run relays rows from every partition in order, status,
// reconcile, poll and dead-letter replay work on it, and cleanup deletes leaf by
// leaf: a ctid names a row in one partition only (src/ops/cleanup.cc).
#include <csignal>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "support/doc_commands.h"
#include "support/metrics_text.h"
#include "support/outbox_load.h"
#include "support/outbox_schema.h"
#include "support/relay_harness.h"
#include "support/wait_until.h"

namespace outboxd::test {
namespace {

const std::vector<std::string> kTopics = {"pedido.confirmado"};

// The default outbox's columns (src/ops/internal/outbox_table.cc), partitioned by
// day the way a user would: the key in the primary key, yesterday, today and a
// DEFAULT partition; the publication created by hand without
// publish_via_partition_root (what PostgreSQL does unless told).
const std::string kUserPartitionedOutbox = std::string(kPartitionedOutboxTable) + R"sql(
CREATE TABLE outbox_yesterday PARTITION OF outbox FOR VALUES FROM (current_date - 1) TO (current_date);
CREATE TABLE outbox_today PARTITION OF outbox FOR VALUES FROM (current_date) TO (current_date + 1);
CREATE TABLE outbox_other PARTITION OF outbox DEFAULT;
CREATE PUBLICATION outboxd FOR TABLE outbox WITH (publish = 'insert');
)sql";

// `n` events of `batch`, created `days` days from now, over five aggregates.
void InsertEvents(pg::Connection& conn, const std::string& batch, int n, int days = 0) {
  for (int i = 0; i < n; ++i) {
    auto r = conn.Exec(absl::StrFormat(
        "INSERT INTO outbox (aggregate_id, tipo, payload, criado_em) VALUES ('%s-%d', "
        "'pedido.confirmado', '{\"batch\": \"%s\", \"i\": %d}', now() + interval '%d days')",
        batch, i % 5, batch, i, days));
    ASSERT_TRUE(r.ok()) << r.status();
  }
}

int CountBatch(TestDatabase& db, const std::string& batch) {
  return std::stoi(db.Scalar(
      absl::StrCat("SELECT count(*) FROM outbox WHERE payload->>'batch' = '", batch, "'")));
}

int Outboxd(RelayHarness& h, std::vector<std::string> args, std::string* out) {
  args.insert(args.end(), {"--pg", h.db().conninfo()});
  return h.RunOutboxd(std::move(args), out);
}

// The harness set up the plain outbox; this one replaces it with the user's.
void ReplaceWithUserPartitionedOutbox(RelayHarness& h) {
  h.db().Exec(absl::StrCat("SELECT pg_drop_replication_slot('", h.slot(),
                           "'); DROP PUBLICATION outboxd; DROP TABLE outbox"));
  h.db().Exec(kUserPartitionedOutbox);
}

// What the relay's position recorder runs, as pg_stat_activity shows it.
constexpr char kHorizonQuery[] = "SELECT pg_snapshot_xmin%";

TEST(PartitionedOutbox, AUserPartitionedOutboxIsSetUpAndRelayedFromEveryPartition) {
  RelayHarness h(kTopics);
  ReplaceWithUserPartitionedOutbox(h);
  // Before setup switches the publication, run says what to do instead of "does not
  // publish table public.outbox".
  std::string out;
  EXPECT_EQ(Outboxd(h, {"run", "--brokers", h.cluster().bootstraps(), "--slot", h.slot()}, &out), 2)
      << out;
  EXPECT_TRUE(absl::StrContains(out, "run outboxd setup (it switches the publication)")) << out;

  ASSERT_EQ(Outboxd(h, {"setup", "--slot", h.slot()}, &out), 0) << out;
  EXPECT_TRUE(absl::StrContains(out, "publication outboxd now publishes via the partition root"))
      << out;
  EXPECT_EQ(h.db().Scalar("SELECT pubviaroot FROM pg_publication WHERE pubname = 'outboxd'"), "t");
  ASSERT_EQ(Outboxd(h, {"setup", "--slot", h.slot()}, &out), 0) << out;  // idempotent

  h.StartRelay({"--cleanup-interval", "0s"});
  auto conn = h.db().Connect();
  InsertEvents(conn, "yesterday", 10, -1);
  InsertEvents(conn, "today", 10);
  InsertEvents(conn, "beyond", 5, 30);  // no partition of its own: DEFAULT
  EXPECT_EQ(h.db().Scalar("SELECT count(*) FROM outbox_other"), "5");
  ExpectEverythingDelivered(h, absl::Seconds(60));
  std::string status;
  ASSERT_TRUE(WaitForStatus(h, "\"unacked\":0,", absl::Seconds(30), &status)) << status;
}

// Cleanup on a partitioned outbox deletes leaf by leaf. On the root, `ctid =
// ANY(...)` matched the same ctid in every partition: an acknowledged row of
// yesterday took today's unacknowledged row at the same place with it.
TEST(PartitionedOutbox, CleanupDuringABrokerOutageKeepsEveryUnacknowledgedRow) {
  RelayHarness h(kTopics);
  ReplaceWithUserPartitionedOutbox(h);
  std::string out;
  ASSERT_EQ(Outboxd(h, {"setup", "--slot", h.slot()}, &out), 0) << out;
  h.StartRelay({"--cleanup-interval", "0s"});
  auto conn = h.db().Connect();
  InsertEvents(conn, "acked", 20);
  ASSERT_TRUE(h.collector().WaitForCount(20, absl::Seconds(60))) << h.relay().Log();
  std::string status;
  ASSERT_TRUE(WaitForStatus(h, "\"unacked\":0,", absl::Seconds(30), &status)) << status;

  // Today's partition holds the acknowledged rows, DEFAULT the unacknowledged ones:
  // the first rows of each sit at the same ctids.
  ASSERT_TRUE(h.cluster().SetAllBrokersDown().ok());
  InsertEvents(conn, "outage", 30, -5);  // before every range: DEFAULT
  ASSERT_TRUE(h.WaitForQueryRounds(kHorizonQuery, 3, absl::Seconds(30))) << h.relay().Log();
  ASSERT_EQ(Outboxd(h, {"cleanup", "--retention", "0s", "--batch", "7"}, &out), 0) << out;
  EXPECT_EQ(CountBatch(h.db(), "acked"), 0) << out;
  EXPECT_EQ(CountBatch(h.db(), "outage"), 30) << out;
  EXPECT_TRUE(absl::StrContains(out,
                                "0 rows deleted from and 30 left in the DEFAULT partition "
                                "outbox_other"))
      << out;

  ExpectCleanAfterTheOutage(h, 50);
}

// The harness set up the plain outbox; `outboxd setup --partition-by day` makes a
// partitioned one in its place.
void ReplaceWithSetupPartitionedOutbox(RelayHarness& h, std::string* out) {
  h.db().Exec(absl::StrCat("SELECT pg_drop_replication_slot('", h.slot(),
                           "'); DROP PUBLICATION outboxd; DROP TABLE outbox"));
  ASSERT_EQ(Outboxd(h, {"setup", "--slot", h.slot(), "--partition-by", "day"}, out), 0) << *out;
}

int Leaves(TestDatabase& db) {
  return std::stoi(db.Scalar("SELECT count(*) FROM pg_partition_tree('outbox') WHERE isleaf"));
}

// Issue 19 point 2: a day per partition, three ahead and DEFAULT; rows of one
// aggregate spread over several days (so over several partitions) arrive in order.
TEST(PartitionedOutbox, SetupPartitionByDayDeliversRowsSpreadOverSeveralDaysInOrder) {
  RelayHarness h(kTopics);
  std::string out;
  ReplaceWithSetupPartitionedOutbox(h, &out);
  const std::string today = h.db().Scalar("SELECT to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD')");
  EXPECT_TRUE(absl::StrContains(out, "setup: partition outbox_p" + today)) << out;
  EXPECT_TRUE(absl::StrContains(out, "setup: partition outbox_default")) << out;
  EXPECT_EQ(Leaves(h.db()), 5);  // today, three ahead, DEFAULT
  EXPECT_EQ(h.db().Scalar("SELECT pubviaroot FROM pg_publication WHERE pubname = 'outboxd'"), "t");
  EXPECT_EQ(h.db().Scalar("SELECT pg_get_constraintdef(oid) FROM pg_constraint "
                          "WHERE conrelid = 'outbox'::regclass AND contype = 'p'"),
            "PRIMARY KEY (seq, criado_em)");
  ASSERT_EQ(Outboxd(h, {"setup", "--slot", h.slot(), "--partition-by", "day"}, &out), 0) << out;
  EXPECT_FALSE(absl::StrContains(out, "setup: partition")) << out;  // nothing more to create
  EXPECT_EQ(Leaves(h.db()), 5);

  h.StartRelay({"--cleanup-interval", "0s"});
  auto conn = h.db().Connect();
  for (int day : {0, 2, 1, 3, 10, -4, 0}) {  // 10 and -4: DEFAULT
    InsertEvents(conn, absl::StrCat("day", day), 5, day);
  }
  EXPECT_EQ(h.db().Scalar("SELECT count(*) FROM outbox_default"), "10");
  EXPECT_EQ(ExpectEverythingDelivered(h, absl::Seconds(60)), 0u);
  EXPECT_EQ(h.collector().Messages().size(), 35u);
}

// Issue 19 point 3: cleanup drops exactly the partitions whose rows are all
// acknowledged and whose day is over, keeps the one holding an event the broker has
// not acknowledged (an outage), deletes DEFAULT's rows one by one and says so, and
// creates again a partition ahead that is missing.
TEST(PartitionedOutbox, CleanupDropsExactlyTheFullyAcknowledgedPartitions) {
  RelayHarness h(kTopics);
  std::string out;
  ReplaceWithSetupPartitionedOutbox(h, &out);
  for (int days : {-3, -2, -1})
    CreateDayPartition(h.db(), "outbox", absl::StrCat("old", -days), days);
  h.StartRelay({"--cleanup-interval", "0s"});
  auto conn = h.db().Connect();
  InsertEvents(conn, "old3", 5, -3);
  InsertEvents(conn, "old2", 5, -2);
  InsertEvents(conn, "gone", 3, -10);  // before every range: DEFAULT
  ASSERT_TRUE(h.collector().WaitForCount(13, absl::Seconds(60))) << h.relay().Log();
  std::string status;
  ASSERT_TRUE(WaitForStatus(h, "\"unacked\":0,", absl::Seconds(30), &status)) << status;
  EXPECT_TRUE(absl::StrContains(status, "\"default_partition_rows\":3}")) << status;

  ASSERT_TRUE(h.cluster().SetAllBrokersDown().ok());
  InsertEvents(conn, "old1", 5, -1);
  InsertEvents(conn, "today", 5);
  ASSERT_TRUE(h.WaitForQueryRounds(kHorizonQuery, 3, absl::Seconds(30))) << h.relay().Log();
  const std::string last_ahead = h.db().Scalar(
      "SELECT 'outbox_p' || to_char(now() AT TIME ZONE 'UTC' + interval '3 days', 'YYYYMMDD')");
  h.db().Exec("DROP TABLE " + last_ahead);
  EXPECT_EQ(Leaves(h.db()), 7);  // old3, old2, old1, today, two ahead, DEFAULT
  ASSERT_EQ(Outboxd(h, {"cleanup", "--retention", "0s"}, &out), 0) << out;
  EXPECT_EQ(Leaves(h.db()), 6) << out;  // old3 and old2 dropped, the last ahead created
  EXPECT_EQ(h.db().Scalar("SELECT to_regclass('outbox_old3') IS NULL AND "
                          "to_regclass('outbox_old2') IS NULL AND to_regclass('" +
                          last_ahead + "') IS NOT NULL"),
            "t");
  EXPECT_TRUE(absl::StrContains(out, "created 1 partitions ahead, dropped 2 acknowledged")) << out;
  EXPECT_TRUE(absl::StrContains(out, "kept partition outbox_old1 holds unacknowledged rows"))
      << out;
  EXPECT_TRUE(absl::StrContains(out, "3 rows deleted from and 0 left in the DEFAULT partition"))
      << out;
  EXPECT_EQ(CountBatch(h.db(), "old1"), 5);
  EXPECT_EQ(CountBatch(h.db(), "today"), 5);
  ASSERT_EQ(Outboxd(h, {"status", "--json", "--slot", h.slot()}, &out), 0) << out;
  EXPECT_TRUE(absl::StrContains(out, "\"default_partition_rows\":0}")) << out;

  ASSERT_TRUE(h.cluster().SetAllBrokersUp().ok());
  ASSERT_TRUE(h.collector().WaitForCount(23, absl::Seconds(60))) << h.relay().Log();
  ASSERT_TRUE(WaitForStatus(h, "\"unacked\":0,", absl::Seconds(30), &status)) << status;
  ASSERT_EQ(Outboxd(h, {"cleanup", "--retention", "0s"}, &out), 0) << out;
  EXPECT_EQ(Leaves(h.db()), 5) << out;
  EXPECT_EQ(h.db().Scalar("SELECT count(*) FROM outbox"), "0") << out;
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

// Issue 19 point 3: the relay killed -9 while its cleanup job drops a partition
// (held on a lock the test takes) loses nothing: the drop is one transaction that
// dies with it, and the restarted relay delivers every row and drops the partition.
TEST(PartitionedOutbox, KillDuringAPartitionDropLosesNothing) {
  RelayHarness h(kTopics);
  std::string out;
  ReplaceWithSetupPartitionedOutbox(h, &out);
  CreateDayPartition(h.db(), "outbox", "old1", -1);
  // The rows first (an empty partition is acknowledged: the job would drop it at once).
  auto conn = h.db().Connect();
  InsertEvents(conn, "old1", 10, -1);
  InsertEvents(conn, "today", 10);
  auto holder = h.db().Connect();
  auto locked = holder.Exec("BEGIN; LOCK TABLE outbox_old1 IN ACCESS SHARE MODE");
  ASSERT_TRUE(locked.ok()) << locked.status();
  h.StartRelay({"--cleanup-interval", "1s", "--retention", "1s"});
  ASSERT_TRUE(h.collector().WaitForCount(20, absl::Seconds(60))) << h.relay().Log();
  // The job's DETACH waits for the test's lock: kill the relay then.
  ASSERT_TRUE(h.WaitForQueryRounds("ALTER TABLE%DETACH PARTITION%", 1, absl::Seconds(60)))
      << h.relay().Log();
  h.relay().Signal(SIGKILL);
  h.relay().Wait(absl::Seconds(30));
  ASSERT_TRUE(holder.Exec("COMMIT").ok());
  EXPECT_EQ(h.db().Scalar("SELECT to_regclass('outbox_old1') IS NOT NULL"), "t");
  InsertEvents(conn, "between", 10);

  h.StartRelay({"--cleanup-interval", "1s", "--retention", "1s"});
  InsertEvents(conn, "after", 10, -1);  // into old1 again, before it goes
  EXPECT_TRUE(WaitUntil(absl::Seconds(60), [&] {
    return h.db().Scalar("SELECT to_regclass('outbox_old1') IS NULL") == "t";
  })) << h.relay().Log();
  ASSERT_TRUE(h.collector().WaitForCount(40, absl::Seconds(60))) << h.relay().Log();
  std::set<std::string> seen;
  for (const CollectedMessage& m : h.collector().Messages()) {
    seen.insert(absl::StrCat(m.value));
  }
  for (const char* batch : {"old1", "today", "between", "after"}) {
    for (int i = 0; i < 10; ++i) {
      const std::string value = absl::StrFormat("{\"i\": %d, \"batch\": \"%s\"}", i, batch);
      EXPECT_TRUE(seen.count(value)) << value << " lost";
    }
  }
  // The job logs the drop only at the end of its round, after the row-level pass over
  // every leaf and the inbox's: the partition is gone (the DROP committed) and the
  // rows all arrived well before that under load.
  EXPECT_TRUE(h.relay().WaitForLog("dropped 1 acknowledged partitions", absl::Seconds(30)))
      << h.relay().Log();
  // A row in DEFAULT (no partition so far ahead) shows on the run's gauge.
  InsertEvents(conn, "far", 1, 30);
  EXPECT_TRUE(
      WaitForMetric(h.relay(), "outboxd_outbox_default_partition_rows", 1, absl::Seconds(30)))
      << h.relay().Log();
}

// Issue 19 point 4: docs/operations.md's "Moving to a partitioned outbox", run as written there
// with a writer and the relay running through the swap: every row of both tables
// delivered, first deliveries in seq order per aggregate.
TEST(PartitionedOutbox, MovingAPlainOutboxWithWritersAndTheRelayRunningLosesNothing) {
  RelayHarness h(kTopics);
  h.StartRelay({"--cleanup-interval", "0s"});
  Load load(h.db().conninfo());
  ASSERT_TRUE(load.WaitForMore(50)) << h.relay().Log();
  for (const std::string& sql :
       DocBlocks("docs/operations.md", "sql", "-- 1. the partitioned table")) {
    h.db().Exec(sql);
  }
  ASSERT_TRUE(load.WaitForMore(20)) << h.relay().Log();
  const std::vector<std::string> swap = DocBlocks("docs/operations.md", "sql", "-- 2. the swap");
  ASSERT_EQ(swap.size(), 1u);
  h.db().Exec(swap[0]);
  EXPECT_EQ(h.db().Scalar("SELECT relkind FROM pg_class WHERE oid = 'outbox'::regclass"), "p");
  ASSERT_TRUE(load.WaitForMore(50)) << h.relay().Log();
  for (std::vector<std::string> args :
       DocCommands("docs/operations.md", "# 3. the partitions", h.db().conninfo(), "")) {
    args.insert(args.end(), {"--slot", h.slot()});
    std::string out;
    ASSERT_EQ(h.RunOutboxd(args, &out), 0) << out;
    EXPECT_TRUE(absl::StrContains(out, "setup: partition outbox_p")) << out;
  }
  ASSERT_TRUE(load.WaitForMore(50)) << h.relay().Log();
  load.Stop();
  EXPECT_NE(h.db().Scalar("SELECT count(*) FROM outbox_plain"), "0");
  EXPECT_NE(h.db().Scalar("SELECT count(*) FROM outbox"), "0");

  // Every row of both tables, by id; per aggregate in seq order (seq goes on).
  auto rows = h.db().Connect().Exec(
      "SELECT id::text, aggregate_id FROM (SELECT id, aggregate_id, seq FROM outbox_plain "
      "UNION ALL SELECT id, aggregate_id, seq FROM outbox) r ORDER BY seq");
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_TRUE(h.collector().WaitForCount(rows->rows(), absl::Seconds(90))) << h.relay().Log();
  std::map<std::string, std::vector<std::string>> delivered;  // aggregate -> ids
  std::set<std::string> seen;
  for (const CollectedMessage& m : h.collector().Messages()) {
    const std::string id = m.Header("id").value_or("");
    if (seen.insert(id).second) delivered[m.key].push_back(id);
  }
  std::map<std::string, std::vector<std::string>> written;
  for (int i = 0; i < rows->rows(); ++i) {
    written[std::string(rows->Get(i, 1))].push_back(std::string(rows->Get(i, 0)));
  }
  EXPECT_EQ(delivered, written);
  std::string status;
  ASSERT_TRUE(WaitForStatus(h, "\"unacked\":0,", absl::Seconds(30), &status)) << status;
  h.db().Exec("DROP TABLE outbox_plain");
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

// A user's partitioned outbox without a DEFAULT partition: cleanup detaches
// CONCURRENTLY (writers never wait). A round killed while the detach waited for an
// older snapshot leaves it pending; the next round finishes it (FINALIZE) and drops
// the partition once every row in it is acknowledged.
TEST(PartitionedOutbox, WithoutDefaultPartitionsAreDetachedConcurrentlyAndAKilledDetachIsFinished) {
  RelayHarness h(kTopics);
  h.db().Exec(absl::StrCat("SELECT pg_drop_replication_slot('", h.slot(),
                           "'); DROP PUBLICATION outboxd; DROP TABLE outbox"));
  std::string ddl = kUserPartitionedOutbox;
  ddl = ddl.substr(0, ddl.find("CREATE TABLE outbox_yesterday"));  // the table alone
  h.db().Exec(ddl);
  for (int days : {-2, -1, 0})
    CreateDayPartition(h.db(), "outbox", absl::StrCat("d", days + 2), days);
  std::string out;
  ASSERT_EQ(Outboxd(h, {"setup", "--slot", h.slot()}, &out), 0) << out;
  h.StartRelay({"--cleanup-interval", "0s"});
  auto conn = h.db().Connect();
  InsertEvents(conn, "d0", 5, -2);
  InsertEvents(conn, "d1", 5, -1);
  InsertEvents(conn, "d2", 5);
  ASSERT_TRUE(h.collector().WaitForCount(15, absl::Seconds(60))) << h.relay().Log();
  std::string status;
  ASSERT_TRUE(WaitForStatus(h, "\"unacked\":0,", absl::Seconds(30), &status)) << status;

  // What the job does before its DETACH ... CONCURRENTLY of outbox_d1 (mark it), then
  // the detach, cancelled while it waits for a transaction's snapshot: as if killed.
  h.db().Exec("COMMENT ON TABLE outbox_d1 IS 'outboxd: detached from outbox to be dropped'");
  auto reader = h.db().Connect();
  ASSERT_TRUE(
      reader.Exec("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM outbox").ok());
  std::thread detach([&] {
    auto detacher = h.db().Connect();
    (void)detacher.Exec("ALTER TABLE outbox DETACH PARTITION outbox_d1 CONCURRENTLY");
  });
  ASSERT_TRUE(WaitUntil(absl::Seconds(30), [&] {
    return h.db().Scalar(
               "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE query LIKE "
               "'ALTER TABLE outbox DETACH%' AND wait_event IS NOT NULL "
               "UNION ALL SELECT false LIMIT 1") == "t";
  }));
  detach.join();
  ASSERT_TRUE(reader.Exec("COMMIT").ok());
  ASSERT_EQ(h.db().Scalar("SELECT inhdetachpending FROM pg_inherits "
                          "WHERE inhrelid = 'outbox_d1'::regclass"),
            "t");

  ASSERT_EQ(Outboxd(h, {"cleanup", "--retention", "0s"}, &out), 0) << out;
  EXPECT_EQ(
      h.db().Scalar("SELECT to_regclass('outbox_d0') IS NULL AND "
                    "to_regclass('outbox_d1') IS NULL AND to_regclass('outbox_d2') IS NOT NULL"),
      "t")
      << out;
  EXPECT_TRUE(absl::StrContains(out, "dropped 2 acknowledged partitions")) << out;
  EXPECT_FALSE(absl::StrContains(out, "upkeep failed")) << out;
  EXPECT_EQ(h.db().Scalar("SELECT count(*) FROM outbox"), "0") << out;
  InsertEvents(conn, "later", 5);
  ASSERT_TRUE(h.collector().WaitForCount(20, absl::Seconds(60))) << h.relay().Log();
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

// Weeks start on Monday and months on the 1st (UTC), named after their first day;
// cleanup infers the width from the newest partition and creates a missing one ahead.
TEST(PartitionedOutbox, WeeksAndMonthsAreCutInUtcAndKeptAheadByCleanup) {
  for (const std::string unit : {"week", "month"}) {
    RelayHarness h(kTopics);
    h.db().Exec(absl::StrCat("SELECT pg_drop_replication_slot('", h.slot(),
                             "'); DROP PUBLICATION outboxd; DROP TABLE outbox"));
    std::string out;
    ASSERT_EQ(
        Outboxd(h, {"setup", "--slot", h.slot(), "--partition-by", unit, "--partitions-ahead", "2"},
                &out),
        0)
        << out;
    const std::string first = h.db().Scalar("SELECT to_char(date_trunc('" + unit +
                                            "', now() AT TIME ZONE 'UTC'), 'YYYYMMDD')");
    const std::string last =
        h.db().Scalar("SELECT to_char(date_trunc('" + unit +
                      "', now() AT TIME ZONE 'UTC') + interval '2 " + unit + "', 'YYYYMMDD')");
    EXPECT_TRUE(absl::StrContains(out, "setup: partition outbox_p" + first)) << out;
    EXPECT_TRUE(absl::StrContains(out, "setup: partition outbox_p" + last)) << out;
    EXPECT_EQ(Leaves(h.db()), 4) << unit;  // the current one, two ahead, DEFAULT
    h.db().Exec("DROP TABLE outbox_p" + last);
    ASSERT_EQ(Outboxd(h, {"cleanup", "--partitions-ahead", "2"}, &out), 0) << out;
    EXPECT_TRUE(absl::StrContains(out, "created 1 partitions ahead")) << unit << out;
    EXPECT_EQ(h.db().Scalar("SELECT to_regclass('outbox_p" + last + "') IS NOT NULL"), "t") << out;
  }
}

// The lost-slot recovery on a partitioned outbox: setup --recreate-slot, and run
// republishes, from every partition, the rows after the last acknowledged position.
TEST(PartitionedOutbox, ARecreatedSlotRepublishesFromEveryPartition) {
  RelayHarness h(kTopics);
  std::string out;
  ReplaceWithSetupPartitionedOutbox(h, &out);
  h.StartRelay({"--cleanup-interval", "0s"});
  auto conn = h.db().Connect();
  InsertEvents(conn, "before", 10, -1);
  ASSERT_TRUE(h.collector().WaitForCount(10, absl::Seconds(60))) << h.relay().Log();
  std::string status;
  ASSERT_TRUE(WaitForStatus(h, "\"unacked\":0,", absl::Seconds(30), &status)) << status;
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
  InsertEvents(conn, "away", 5, -1);
  InsertEvents(conn, "away", 5);
  InsertEvents(conn, "away", 5, 30);  // DEFAULT
  ASSERT_EQ(Outboxd(h, {"setup", "--slot", h.slot(), "--recreate-slot"}, &out), 0) << out;
  h.StartRelay({"--cleanup-interval", "0s"}, "backfill done");
  InsertEvents(conn, "after", 5, 1);
  EXPECT_EQ(ExpectEverythingDelivered(h, absl::Seconds(60)), 0u);
  EXPECT_EQ(h.collector().Messages().size(), 30u);
}

// reconcile reads the outbox through its root, dead-letter replay publishes from the
// dead-letter table beside it, and the polling relay marks rows in every partition.
TEST(PartitionedOutbox, ReconcilePollAndDeadLetterReplayWorkOnIt) {
  RelayHarness h(kTopics);
  ReplaceWithUserPartitionedOutbox(h);
  std::string out;
  ASSERT_EQ(Outboxd(h, {"setup", "--slot", h.slot()}, &out), 0) << out;
  auto conn = h.db().Connect();
  InsertEvents(conn, "yesterday", 3, -1);
  InsertEvents(conn, "today", 3);
  InsertEvents(conn, "beyond", 3, 30);

  const std::vector<std::string> reconcile = {
      "reconcile",
      "--type",
      "pedido.confirmado",
      "--since",
      "48h",
      "--expect",
      "SELECT a FROM (VALUES ('yesterday-0'), ('today-2'), ('missing-1')) v(a) "
      "WHERE $1::timestamptz IS NOT NULL"};
  EXPECT_EQ(Outboxd(h, reconcile, &out), 1) << out;
  EXPECT_TRUE(absl::StrContains(out, "missing-1\n")) << out;
  EXPECT_FALSE(absl::StrContains(out, "today-2")) << out;

  auto poll = ChildProcess::Start({BinPath("outboxd"), "poll", "--pg", h.db().conninfo(),
                                   "--brokers", h.cluster().bootstraps(), "--interval", "100ms"});
  ASSERT_TRUE(h.collector().WaitForCount(9, absl::Seconds(60))) << poll->Log();
  EXPECT_TRUE(h.db().WaitForScalar("SELECT count(*) FROM outbox WHERE publicado_em IS NULL", "0"))
      << poll->Log();
  poll->Signal(SIGTERM);
  EXPECT_EQ(poll->Wait(absl::Seconds(60)).value_or(-1), 0) << poll->Log();

  h.db().Exec(
      "INSERT INTO outbox_dead_letter (id, aggregate_id, type, payload, created_at, lsn, topic, "
      "error) VALUES (gen_random_uuid()::text, 'parked', 'pedido.confirmado', '{\"n\": 1}', "
      "'2026-12-03T10:00:00+00:00', '0/16B3748', 'pedido.confirmado', 'test')");
  EXPECT_EQ(Outboxd(h,
                    {"dead-letter", "replay", "--brokers", h.cluster().bootstraps(), "--aggregate",
                     "parked"},
                    &out),
            0)
      << out;
  ASSERT_TRUE(h.collector().WaitForCount(10, absl::Seconds(60)));
  EXPECT_EQ(h.db().Scalar("SELECT count(*) FROM outbox_dead_letter"), "0");
}

}  // namespace
}  // namespace outboxd::test
