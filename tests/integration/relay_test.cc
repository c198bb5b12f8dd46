// `outboxd run` end to end: a real PostgreSQL, the mock Kafka cluster over TCP, the
// relay as a separate process. At least once, confirm after ack, order, bounded resources
// (docs/architecture.md).
#include <cstdio>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "support/relay_harness.h"
#include "support/wait_until.h"

namespace outboxd::test {
namespace {

const std::vector<std::string> kTopics = {"pedido.confirmado", "pedido.cancelado"};

void MustExec(pg::Connection& conn, const std::string& sql) {
  auto r = conn.Exec(sql);
  ASSERT_TRUE(r.ok()) << sql << ": " << r.status();
}

std::string Insert(int i, const std::string& aggregate, const std::string& type) {
  return absl::StrFormat(
      "INSERT INTO outbox (aggregate_id, tipo, payload) VALUES ('%s', '%s', "
      "'{\"i\": %d, \"pedidoId\": \"%s\", \"nota\": \"ação \\\"citada\\\"\"}')",
      aggregate, type, i, aggregate);
}

std::string Shell(const std::string& command) {
  std::string out;
  FILE* p = popen(command.c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  pclose(p);
  return out;
}

// Thousands of events over dozens of aggregates, single- and multi-row transactions,
// some rolled back, updates and deletes on the outbox: every committed insert arrives
// once with the right key, value and headers, in commit order per aggregate, nothing
// rolled back or updated is published, and the slot is confirmed to the WAL head.
TEST(Relay, EveryCommittedEventArrivesInOrderWithItsHeaders) {
  RelayHarness h(kTopics);
  h.StartRelay();
  auto conn = h.db().Connect();
  std::set<std::string> deleted_ids;
  int rolled_back = 0;
  for (int i = 0; i < 1200; ++i) {
    std::string agg = absl::StrCat("pedido-", i % 40);
    std::string type = kTopics[i % 7 == 0 ? 1 : 0];
    switch (i % 10) {
      case 6:
      case 7: {  // one statement, five rows, three aggregates
        std::string sql = "INSERT INTO outbox (aggregate_id, tipo, payload) VALUES ";
        for (int k = 0; k < 5; ++k) {
          absl::StrAppend(&sql, k ? "," : "", "('pedido-", (i + k % 3) % 40, "', '", type,
                          "', '{\"i\": ", i, ", \"k\": ", k, "}')");
        }
        MustExec(conn, sql);
        break;
      }
      case 8:  // rolled back: never published
        MustExec(conn, "BEGIN; " + Insert(-i, agg, type) + "; ROLLBACK");
        ++rolled_back;
        break;
      case 9:  // ten rows of one aggregate in one transaction, with an UPDATE on the outbox
        MustExec(conn,
                 absl::StrCat(
                     "BEGIN; INSERT INTO outbox (aggregate_id, tipo, payload) "
                     "SELECT '",
                     agg, "', '", type, "', jsonb_build_object('i', ", i,
                     ", 'n', n) FROM generate_series(1, 10) n; "
                     "UPDATE outbox SET tentativas = tentativas + 1 WHERE seq % 50 = 0; COMMIT"));
        break;
      default:
        MustExec(conn, Insert(i, agg, type));
    }
    if (i % 300 == 299) {  // deleting a row does not unpublish it, and is not an event
      auto r =
          conn.Exec("DELETE FROM outbox WHERE seq = (SELECT min(seq) FROM outbox) RETURNING id");
      ASSERT_TRUE(r.ok()) << r.status();
      deleted_ids.insert(std::string(r->Get(0, 0)));
    }
  }
  pg::Lsn head = h.CurrentWalLsn();
  std::vector<OutboxRow> rows = h.OutboxRows();
  const size_t expected = rows.size() + deleted_ids.size();
  ASSERT_GT(expected, 2500u);

  ASSERT_TRUE(h.collector().WaitForCount(expected, absl::Seconds(60)))
      << "got " << h.collector().Messages().size() << " of " << expected << "\n"
      << h.relay().Log();
  // Anything extra (rolled back, updates) was sent before the slot was confirmed past
  // the head, and is read once the collector has caught up with the topics.
  ASSERT_TRUE(h.WaitForConfirmed(head, absl::Seconds(60))) << h.relay().Log();
  ASSERT_TRUE(h.collector().WaitUntilCaughtUp(absl::Seconds(30)));
  std::vector<CollectedMessage> messages = h.collector().Messages();
  ASSERT_EQ(messages.size(), expected);

  // Expected created_at and transaction grouping, computed by PostgreSQL itself.
  std::map<std::string, std::string> iso_created_at, xid_of;
  auto meta = conn.Exec(
      "SET TimeZone='UTC'; SELECT id, regexp_replace(replace(criado_em::text, ' ', 'T'), "
      "'([+-][0-9]{2})$', '\\1:00'), xmin::text, tentativas FROM outbox");
  ASSERT_TRUE(meta.ok()) << meta.status();
  for (int r = 0; r < meta->rows(); ++r) {
    iso_created_at[std::string(meta->Get(r, 0))] = meta->Get(r, 1);
    // An UPDATE gives the row a new xmin: group only rows never updated.
    if (meta->Get(r, 3) == "0") xid_of[std::string(meta->Get(r, 0))] = meta->Get(r, 2);
  }

  std::map<std::string, const OutboxRow*> by_id;
  for (const OutboxRow& row : rows) by_id[row.id] = &row;
  std::map<std::string, std::vector<std::pair<int64_t, int64_t>>> per_aggregate;  // offset, seq
  std::map<std::string, int32_t> partition_of;
  std::map<std::string, std::string> lsn_of_xid;
  std::set<std::string> seen;
  for (const CollectedMessage& m : messages) {
    std::string id = m.Header("id").value_or("");
    ASSERT_TRUE(seen.insert(id).second) << "duplicate " << id;
    if (deleted_ids.count(id)) continue;
    ASSERT_TRUE(by_id.count(id)) << "published an event that is not in the outbox: " << id;
    const OutboxRow& row = *by_id[id];
    EXPECT_EQ(m.topic, row.type);
    EXPECT_EQ(m.key, row.aggregate_id);
    EXPECT_EQ(m.value, row.payload);
    EXPECT_EQ(m.Header("type"), row.type);
    EXPECT_EQ(m.Header("aggregate_id"), row.aggregate_id);
    EXPECT_EQ(m.Header("created_at"), iso_created_at[id]);
    std::string lsn = m.Header("lsn").value_or("");
    EXPECT_TRUE(pg::ParseLsn(lsn).ok()) << lsn;
    // Every row of one transaction carries that transaction's commit LSN.
    if (xid_of.count(id)) {
      auto [it, inserted] = lsn_of_xid.emplace(xid_of[id], lsn);
      EXPECT_EQ(it->second, lsn) << "rows of one transaction with different lsn headers";
    }
    // Order holds per key within a topic (the default topic is the event type).
    std::string stream = m.topic + "/" + row.aggregate_id;
    per_aggregate[stream].push_back({m.offset, row.seq});
    auto [p, first] = partition_of.emplace(stream, m.partition);
    EXPECT_EQ(p->second, m.partition) << "one aggregate on two partitions";
  }
  EXPECT_EQ(seen.size(), expected);
  for (auto& [agg, events] : per_aggregate) {
    std::sort(events.begin(), events.end());  // broker order
    for (size_t i = 1; i < events.size(); ++i) {
      ASSERT_LT(events[i - 1].second, events[i].second)
          << "aggregate " << agg << " out of order at offsets " << events[i - 1].first << ", "
          << events[i].first << " partition " << partition_of[agg];
    }
  }
  // An independent client agrees on what the broker holds.
  std::string kcat =
      Shell(absl::StrCat("kcat -b ", h.cluster().bootstraps(),
                         " -C -t pedido.cancelado -o beginning -e -q -f '%k\\n' | wc -l"));
  size_t cancelled = 0;
  for (const CollectedMessage& m : messages) cancelled += m.topic == "pedido.cancelado";
  EXPECT_EQ(std::stoul(kcat), cancelled);

  EXPECT_TRUE(h.WaitForConfirmed(head, absl::Seconds(15)))
      << "confirmed " << pg::FormatLsn(h.ConfirmedFlushLsn()) << " head " << pg::FormatLsn(head);
  EXPECT_GT(rolled_back, 0);
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

// With every broker down, events inserted meanwhile never move confirmed_flush_lsn
// past them; when the brokers return, they are delivered by the same process.
TEST(Relay, BrokerOutageHoldsTheSlotThenDeliversWithoutRestart) {
  RelayHarness h(kTopics);
  h.StartRelay({"--feedback-interval", "1s"});
  auto conn = h.db().Connect();
  for (int i = 0; i < 20; ++i) MustExec(conn, Insert(i, absl::StrCat("a", i % 4), kTopics[0]));
  ASSERT_TRUE(h.collector().WaitForCount(20, absl::Seconds(30)));
  ASSERT_TRUE(h.WaitForConfirmed(h.CurrentWalLsn(), absl::Seconds(15)));

  ASSERT_TRUE(h.cluster().SetAllBrokersDown().ok());
  for (int i = 20; i < 70; ++i) MustExec(conn, Insert(i, absl::StrCat("a", i % 4), kTopics[0]));
  // The relay holds the 50 events and reports its position three times meanwhile.
  ASSERT_TRUE(h.WaitForFeedbackWhileInFlight(50, 3, absl::Seconds(30))) << h.relay().Log();
  const pg::Lsn confirmed_during_outage = h.ConfirmedFlushLsn();
  EXPECT_EQ(h.collector().Messages().size(), 20u);
  ASSERT_TRUE(h.relay().Running());

  ASSERT_TRUE(h.cluster().SetAllBrokersUp().ok());
  ASSERT_TRUE(h.collector().WaitForCount(70, absl::Seconds(60))) << h.relay().Log();
  EXPECT_TRUE(h.WaitForConfirmed(h.CurrentWalLsn(), absl::Seconds(15)));
  // The first transaction written during the outage: the slot was never confirmed
  // at or past its commit record (other databases' WAL before it may be confirmed).
  pg::Lsn first_outage_commit = ~pg::Lsn{0};
  for (const auto& m : h.collector().Messages()) {
    if (m.value.find("\"i\": 20,") != std::string::npos) {
      first_outage_commit = pg::ParseLsn(m.Header("lsn").value_or("")).value_or(0);
    }
  }
  ASSERT_NE(first_outage_commit, ~pg::Lsn{0}) << "event 20 not found";
  EXPECT_LE(confirmed_during_outage, first_outage_commit)
      << "confirmed " << pg::FormatLsn(confirmed_during_outage) << " past the unacknowledged "
      << "transaction committed at " << pg::FormatLsn(first_outage_commit);
  std::set<std::string> ids;
  for (const auto& m : h.collector().Messages()) ids.insert(m.Header("id").value_or(""));
  EXPECT_EQ(ids.size(), 70u);
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

// Trap "idle slot pins WAL": with the outbox idle and another table writing tens of
// MiB, the slot's lag returns under 1 MiB within seconds.
TEST(Relay, IdleOutboxDoesNotPinWalWhileOtherTablesWrite) {
  RelayHarness h(kTopics);
  auto conn = h.db().Connect();
  MustExec(conn, "CREATE TABLE busy (id bigserial PRIMARY KEY, filler text)");
  h.StartRelay();
  pg::Lsn start = h.CurrentWalLsn();
  for (int i = 0; i < 6; ++i) {
    MustExec(conn,
             "INSERT INTO busy (filler) SELECT repeat(md5(n::text), 32) "
             "FROM generate_series(1, 5000) n");
  }
  pg::Lsn head = h.CurrentWalLsn();
  ASSERT_GT(head - start, 20u << 20) << "the load should write tens of MiB of WAL";
  absl::Time t0 = absl::Now();
  EXPECT_TRUE(WaitUntil(absl::Seconds(15), [&] { return h.SlotLagBytes() < (1 << 20); }))
      << "lag " << h.SlotLagBytes() << " bytes";
  std::printf("wrote %llu MiB of WAL; slot lag under 1 MiB after %s\n",
              static_cast<unsigned long long>((head - start) >> 20),
              absl::FormatDuration(absl::Now() - t0).c_str());
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

// `outboxd setup` is idempotent; SIGTERM stops the relay with exit code 0 after
// confirming what was acknowledged.
TEST(Relay, SetupTwiceThenSigtermExitsZeroAndConfirms) {
  RelayHarness h(kTopics);
  std::string output;
  ASSERT_EQ(h.RunOutboxd({"setup", "--pg", h.db().conninfo(), "--slot", h.slot()}, &output), 0)
      << output;
  h.StartRelay();
  auto conn = h.db().Connect();
  for (int i = 0; i < 10; ++i) MustExec(conn, Insert(i, "x", kTopics[0]));
  ASSERT_TRUE(h.collector().WaitForCount(10, absl::Seconds(30)));
  EXPECT_EQ(h.HealthStatus(h.relay()), 200);
  std::string metrics = h.Metrics(h.relay());
  EXPECT_NE(
      metrics.find(absl::StrCat("outboxd_events_published_total{topic=\"", kTopics[0], "\"} 10\n")),
      std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("outboxd_confirmed_lsn "), std::string::npos) << metrics;
  pg::Lsn last_commit = 0;
  for (const auto& m : h.collector().Messages()) {
    last_commit = std::max(last_commit, pg::ParseLsn(m.Header("lsn").value_or("")).value_or(0));
  }
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
  EXPECT_NE(h.relay().Log().find("stopped cleanly"), std::string::npos) << h.relay().Log();
  // The watermark is always a transaction end or an idle server position, so being at
  // or past the last commit record's start means the last transaction is confirmed.
  EXPECT_GE(h.ConfirmedFlushLsn(), last_commit);
  auto r =
      conn.ExecParams("SELECT active FROM pg_replication_slots WHERE slot_name = $1", {h.slot()});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->Get(0, 0), "f") << "the stream must be ended on exit";
}

}  // namespace
}  // namespace outboxd::test
