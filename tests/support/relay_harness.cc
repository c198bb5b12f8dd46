#include "support/relay_harness.h"

#include <sys/wait.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <tuple>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "support/metrics_text.h"
#include "support/wait_until.h"

namespace outboxd::test {

RelayHarness::RelayHarness(const std::vector<std::string>& topics, int brokers,
                           const std::string& pg_base) {
  db_ = pg_base.empty() ? TestDatabase::Create() : TestDatabase::Create(pg_base);
  auto cluster = kafka::MockCluster::Create(brokers);
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  cluster_ = std::move(*cluster);
  for (const std::string& topic : topics) {
    EXPECT_TRUE(cluster_->CreateTopic(topic, 4, std::min(brokers, 3)).ok());
  }
  std::string output;
  EXPECT_EQ(RunOutboxd({"setup", "--pg", db_->conninfo(), "--slot", slot()}, &output), 0) << output;
  auto collector = KafkaCollector::Start(cluster_->bootstraps(), topics);
  EXPECT_TRUE(collector.ok()) << collector.status();
  collector_ = std::move(*collector);
}

RelayHarness::~RelayHarness() {
  if (relay_ && relay_->Running()) StopRelay();
  collector_.reset();
}

int RelayHarness::RunOutboxd(std::vector<std::string> args, std::string* output) {
  args.insert(args.begin(), BinPath("outboxd"));
  auto child = ChildProcess::Start(args);
  std::optional<int> code = child->Wait(absl::Seconds(60));
  if (output != nullptr) *output = child->Log();
  return code.value_or(-1);
}

std::vector<std::string> RelayHarness::ReplayArgs(const std::vector<std::string>& extra) {
  std::vector<std::string> args = {
      "dead-letter", "replay",        "--slot",    slot(),
      "--pg",        db_->conninfo(), "--brokers", cluster_->bootstraps()};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

void RelayHarness::StartRelay(std::vector<std::string> extra_args, const std::string& wait_for) {
  relay_ = SpawnRelay(std::move(extra_args));
  if (wait_for.empty()) {
    ASSERT_TRUE(WaitForStreaming(*relay_)) << relay_->Log();
  } else {
    ASSERT_TRUE(relay_->WaitForLog(wait_for, absl::Seconds(30))) << relay_->Log();
  }
}

bool WaitForStreaming(ChildProcess& relay, absl::Duration timeout) {
  return WaitForMetric(relay, "outboxd_connected", 1, timeout);
}

std::unique_ptr<ChildProcess> RelayHarness::SpawnRelay(std::vector<std::string> extra_args) {
  std::vector<std::string> args = {BinPath("outboxd"),
                                   "run",
                                   "--pg",
                                   relay_conninfo_.empty() ? db_->conninfo() : relay_conninfo_,
                                   "--brokers",
                                   cluster_->bootstraps(),
                                   "--slot",
                                   slot(),
                                   "--metrics",
                                   "127.0.0.1:0"};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  return ChildProcess::Start(args);
}

int RelayHarness::HealthStatus(ChildProcess& relay) {
  return HttpGetFromLog(relay, "/healthz").first;
}

std::string RelayHarness::Metrics(ChildProcess& relay) {
  return HttpGetFromLog(relay, "/metrics").second;
}

int RelayHarness::StopRelay() {
  relay_->Signal(SIGTERM);
  return relay_->Wait(absl::Seconds(60)).value_or(-1);
}

std::vector<OutboxRow> RelayHarness::OutboxRows() {
  auto conn = db_->Connect();
  auto r = conn.Exec(
      "SET TimeZone = 'UTC'; SELECT seq, id, aggregate_id, tipo, payload::text, criado_em::text "
      "FROM outbox ORDER BY seq");
  EXPECT_TRUE(r.ok()) << r.status();
  std::vector<OutboxRow> rows;
  for (int i = 0; r.ok() && i < r->rows(); ++i) {
    OutboxRow row;
    EXPECT_TRUE(absl::SimpleAtoi(std::string(r->Get(i, 0)), &row.seq));
    row.id = r->Get(i, 1);
    row.aggregate_id = r->Get(i, 2);
    row.type = r->Get(i, 3);
    row.payload = r->Get(i, 4);
    row.created_at = r->Get(i, 5);
    rows.push_back(std::move(row));
  }
  return rows;
}

pg::Lsn RelayHarness::CurrentWalLsn() {
  auto conn = db_->Connect();
  auto r = conn.Exec("SELECT pg_current_wal_lsn()");
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? pg::ParseLsn(r->Get(0, 0)).value_or(0) : 0;
}

pg::Lsn RelayHarness::ConfirmedFlushLsn() {
  auto conn = db_->Connect();
  auto r = conn.ExecParams(
      "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = $1", {slot()});
  EXPECT_TRUE(r.ok() && r->rows() == 1);
  return r.ok() && r->rows() == 1 ? pg::ParseLsn(r->Get(0, 0)).value_or(0) : 0;
}

int64_t RelayHarness::SlotLagBytes() {
  auto conn = db_->Connect();
  auto r = conn.ExecParams(
      "SELECT (pg_current_wal_lsn() - confirmed_flush_lsn)::bigint FROM pg_replication_slots "
      "WHERE slot_name = $1",
      {slot()});
  EXPECT_TRUE(r.ok() && r->rows() == 1);
  int64_t lag = -1;
  if (r.ok() && r->rows() == 1) {
    EXPECT_TRUE(absl::SimpleAtoi(std::string(r->Get(0, 0)), &lag));
  }
  return lag;
}

template <typename Query>
bool RelayHarness::WaitForNewerTimestamps(Query newest_after, int rounds, absl::Duration timeout) {
  std::string since = db_->Scalar("SELECT clock_timestamp()::text");
  for (int i = 0; i < rounds; ++i) {
    const bool ran = WaitUntil(
        timeout,
        [&] {
          const std::string newer = db_->Scalar(newest_after(since));
          if (newer.empty()) return false;
          since = newer;
          return true;
        },
        absl::Milliseconds(20));
    if (!ran) return false;
  }
  return true;
}

bool RelayHarness::WaitForQueryRounds(const std::string& pattern, int rounds,
                                      absl::Duration timeout) {
  const std::string literal = absl::StrReplaceAll(pattern, {{"'", "''"}});
  return WaitForNewerTimestamps(
      [&](const std::string& since) {
        return "SELECT coalesce(max(query_start)::text, '') FROM pg_stat_activity WHERE datname = "
               "current_database() AND pid <> pg_backend_pid() AND query LIKE '" +
               literal + "' AND query_start > '" + since + "'";
      },
      rounds, timeout);
}

bool RelayHarness::WaitForFeedbackWhileInFlight(int events, int rounds, absl::Duration timeout) {
  if (!WaitForMetric(*relay_, "outboxd_events_in_flight", events, timeout)) return false;
  return WaitForNewerTimestamps(
      [&](const std::string& since) {
        return "SELECT coalesce(max(r.reply_time)::text, '') FROM pg_stat_replication r JOIN "
               "pg_replication_slots s ON s.active_pid = r.pid WHERE s.slot_name = '" +
               slot() + "' AND r.reply_time > '" + since + "'";
      },
      rounds, timeout);
}

bool RelayHarness::WaitForConfirmed(pg::Lsn lsn, absl::Duration timeout) {
  return WaitUntil(timeout, [&] { return ConfirmedFlushLsn() >= lsn; });
}

std::string KillNineUnderLoad(RelayHarness& h, Load& load, int kills,
                              const std::vector<std::string>& args) {
  std::mt19937 rng(std::random_device{}());
  std::string logs;
  for (int k = 0; k < kills; ++k) {
    EXPECT_TRUE(load.WaitForMore(50 + rng() % 250));  // a random moment of the load
    h.relay().Signal(SIGKILL);
    EXPECT_EQ(h.relay().Wait(absl::Seconds(10)), 128 + SIGKILL);
    logs += h.relay().Log();
    h.StartRelay(args);
  }
  return logs;
}

std::vector<std::string> KcatHeaders(RelayHarness& h, const std::string& topic) {
  return KcatLines(h, topic, "%h");
}

std::vector<std::string> KcatLines(RelayHarness& h, const std::string& topic,
                                   const std::string& format) {
  return CommandLines(absl::StrCat("timeout 30 kcat -b ", h.cluster().bootstraps(), " -C -t ",
                                   topic, " -o beginning -e -q -f '", format, "\\n'"));
}

size_t ExpectEachEventOnce(RelayHarness& h) {
  const size_t duplicates = ExpectEverythingDelivered(h, absl::Seconds(60));
  EXPECT_EQ(duplicates, 0u) << h.relay().Log();
  const std::vector<std::string> headers = KcatHeaders(h, "pedido.confirmado");
  const std::vector<OutboxRow> rows = h.OutboxRows();
  EXPECT_EQ(headers.size(), rows.size()) << "messages kcat reads, committed events";
  std::map<std::string, int> seen;
  for (const std::string& line : headers) {
    for (absl::string_view field : absl::StrSplit(line, ',')) {
      if (absl::ConsumePrefix(&field, "id=")) ++seen[std::string(field)];
    }
  }
  for (const OutboxRow& row : rows) EXPECT_EQ(seen[row.id], 1) << "copies of event " << row.id;
  return duplicates;
}

size_t ExpectEverythingDelivered(RelayHarness& h, absl::Duration timeout) {
  std::vector<OutboxRow> rows = h.OutboxRows();
  std::map<std::string, int64_t> seq_of;
  for (const OutboxRow& row : rows) seq_of[row.id] = row.seq;
  std::set<std::string> seen;
  std::vector<CollectedMessage> messages;
  WaitUntil(
      timeout,
      [&] {
        messages = h.collector().Messages();
        seen.clear();
        // Only the table's rows count: a ghost (published, then lost with a failed
        // primary) must not stand in for a row the collector has not read yet.
        for (const auto& m : messages) {
          std::string id = m.Header("id").value_or("");
          if (seq_of.count(id)) seen.insert(std::move(id));
        }
        return seen.size() >= rows.size();
      },
      absl::Milliseconds(200));
  size_t missing = 0;
  for (const OutboxRow& row : rows) {
    if (seen.count(row.id)) continue;
    // Tell a relay that never published it from a collector that missed it (for the
    // first few: each reads the whole topic).
    if (++missing > 3) continue;
    std::string command = "timeout 30 kcat -b " + h.cluster().bootstraps() +
                          " -C -t pedido.confirmado -o beginning -e -q -f '%h\\n' | grep -c " +
                          row.id;
    FILE* p = popen(command.c_str(), "r");
    char buf[32] = {0};
    fread(buf, 1, sizeof(buf) - 1, p);
    pclose(p);
    ADD_FAILURE() << "event " << row.id << " (seq " << row.seq << ", aggregate " << row.aggregate_id
                  << ") missing from the collector; kcat finds it " << buf << " time(s)";
  }
  EXPECT_EQ(missing, 0u) << "of " << rows.size() << " committed events\n"
                         << h.Metrics(h.relay()) << h.relay().Log();
  EXPECT_EQ(h.collector().Skipped(), 0u);
  // Redelivery after a crash repeats a window, so order is checked on first sight.
  std::map<std::string, int64_t> last_seq;  // per aggregate (one partition each)
  std::set<std::string> first_seen;
  std::sort(messages.begin(), messages.end(), [](const auto& a, const auto& b) {
    return std::tie(a.partition, a.offset) < std::tie(b.partition, b.offset);
  });
  for (const auto& m : messages) {
    std::string id = m.Header("id").value_or("");
    if (!first_seen.insert(id).second) continue;
    // Not in the table: a ghost of a transaction lost in a failover (counted there).
    auto known = seq_of.find(id);
    if (known == seq_of.end()) continue;
    const int64_t seq = known->second;
    auto [it, fresh] = last_seq.emplace(m.key, seq);
    if (!fresh) {
      EXPECT_LT(it->second, seq) << "aggregate " << m.key << " out of order";
      it->second = seq;
    }
  }
  return messages.size() - seen.size();
}

absl::Duration WaitForMore(RelayHarness& h, size_t since, size_t n) {
  const absl::Time start = absl::Now();
  EXPECT_TRUE(h.collector().WaitForCount(since + n, absl::Seconds(90)))
      << "stuck at " << h.collector().Count() << "\n"
      << h.relay().Log();
  return absl::Now() - start;
}

void ExpectCleanAfterTheOutage(RelayHarness& h, size_t events) {
  ASSERT_TRUE(h.cluster().SetAllBrokersUp().ok());
  ASSERT_TRUE(h.collector().WaitForCount(events, absl::Seconds(60))) << h.relay().Log();
  std::string out;
  ASSERT_TRUE(WaitForStatus(h, "\"unacked\":0,", absl::Seconds(30), &out)) << out;
  ASSERT_EQ(h.RunOutboxd({"cleanup", "--retention", "0s", "--pg", h.db().conninfo()}, &out), 0)
      << out;
  EXPECT_EQ(h.db().Scalar("SELECT count(*) FROM outbox"), "0");
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

void InsertDeadLetters(TestDatabase& db, int n, int aggregates, const std::string& topic_sql,
                       const std::string& payload_sql) {
  db.Exec(absl::StrCat(
      "INSERT INTO outbox_dead_letter (id, aggregate_id, type, payload, created_at, lsn, topic, "
      "error) SELECT 'e' || i, 'a' || (i % ",
      aggregates, "), t, ", payload_sql, ", '2026-01-01 00:00:00+00', '0/0', t, 'test' ",
      "FROM generate_series(1, ", n, ") i, LATERAL (SELECT ", topic_sql, " AS t) topic"));
}

void RecordDeliveryFigures(size_t events, size_t duplicates, size_t ghosts) {
  ::testing::Test::RecordProperty("events", static_cast<int>(events));
  ::testing::Test::RecordProperty("duplicates", static_cast<int>(duplicates));
  ::testing::Test::RecordProperty("ghosts", static_cast<int>(ghosts));
}

size_t Ghosts(RelayHarness& h) {
  std::set<std::string> rows;
  for (const OutboxRow& row : h.OutboxRows()) rows.insert(row.id);
  size_t ghosts = 0;
  for (const CollectedMessage& m : h.collector().Messages()) {
    ghosts += rows.count(m.Header("id").value_or("")) == 0;
  }
  return ghosts;
}

bool WaitForStatus(RelayHarness& h, const std::string& needle, absl::Duration timeout,
                   std::string* last) {
  return WaitUntil(
      timeout,
      [&] {
        last->clear();
        h.RunOutboxd({"status", "--json", "--slot", h.slot(), "--pg", h.db().conninfo()}, last);
        return absl::StrContains(*last, needle);
      },
      absl::Milliseconds(200));
}

void CreateDayPartition(TestDatabase& db, const std::string& table, const std::string& name,
                        int days) {
  const auto day = [](int offset) {
    return absl::StrCat("((date_trunc('day', now() AT TIME ZONE 'UTC') + interval '", offset,
                        " days') AT TIME ZONE 'UTC')");
  };
  db.Exec(absl::StrCat("CREATE TABLE ", table, "_", name, " PARTITION OF ", table,
                       " FOR VALUES FROM (", day(days), ") TO (", day(days + 1), ")"));
}

}  // namespace outboxd::test
