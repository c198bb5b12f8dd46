// The end-to-end harness: a fresh database with `outboxd setup` done, an in-process
// mock Kafka cluster, a collector reading every partition, and `outboxd run` as a
// child process.
#ifndef OUTBOXD_TESTS_SUPPORT_RELAY_HARNESS_H_
#define OUTBOXD_TESTS_SUPPORT_RELAY_HARNESS_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "kafka/mock_cluster.h"
#include "pg/lsn.h"
#include "support/child_process.h"
#include "support/kafka_collector.h"
#include "support/outbox_load.h"
#include "support/pg_fixture.h"

namespace outboxd::test {

// One outbox row as PostgreSQL holds it.
struct OutboxRow {
  int64_t seq;
  std::string id;
  std::string aggregate_id;
  std::string type;
  std::string payload;     // payload::text
  std::string created_at;  // criado_em rendered in UTC, ISO DateStyle
};

// Waits until `relay` (run with --metrics 127.0.0.1:0) streams: outboxd_connected 1.
bool WaitForStreaming(ChildProcess& relay, absl::Duration timeout = absl::Seconds(30));

class RelayHarness {
 public:
  // Creates the database, runs `outboxd setup` (twice when asked) and the cluster.
  // `pg_base`: the cluster's maintenance conninfo (default: OUTBOXD_TEST_PG).
  explicit RelayHarness(const std::vector<std::string>& topics, int brokers = 3,
                        const std::string& pg_base = "");
  ~RelayHarness();

  TestDatabase& db() { return *db_; }
  kafka::MockCluster& cluster() { return *cluster_; }
  KafkaCollector& collector() { return *collector_; }
  const std::string& slot() const { return db_->name(); }

  // Runs `outboxd <args...>` to completion; returns its exit code.
  int RunOutboxd(std::vector<std::string> args, std::string* output = nullptr);
  // `dead-letter replay` of this slot's letters from this database to this cluster,
  // then `extra`: arguments for RunOutboxd.
  std::vector<std::string> ReplayArgs(const std::vector<std::string>& extra = {});
  // Starts `outboxd run` against this database and cluster and waits until it
  // streams (outboxd_connected is 1), or, given `wait_for`, until its log says that
  // (a state no metric shows: "standing by", "created slot").
  void StartRelay(std::vector<std::string> extra_args = {}, const std::string& wait_for = "");
  // Another `outboxd run` on the same slot (a standby), not owned by the harness.
  std::unique_ptr<ChildProcess> SpawnRelay(std::vector<std::string> extra_args = {});
  // The --pg the relays get from now on (default: the test database's conninfo), e.g.
  // through a FaultProxy (support/fault_proxy.h).
  void set_relay_conninfo(std::string conninfo) { relay_conninfo_ = std::move(conninfo); }
  ChildProcess& relay() { return *relay_; }
  void set_relay(std::unique_ptr<ChildProcess> relay) { relay_ = std::move(relay); }
  // The relay's /healthz status code (it runs with --metrics 127.0.0.1:0), or -1.
  int HealthStatus(ChildProcess& relay);
  // The relay's /metrics text, or "".
  std::string Metrics(ChildProcess& relay);
  // SIGTERM and wait; returns the exit code.
  int StopRelay();

  std::vector<OutboxRow> OutboxRows();
  pg::Lsn CurrentWalLsn();
  pg::Lsn ConfirmedFlushLsn();
  // pg_current_wal_lsn() - confirmed_flush_lsn, read in one query (may be < 0 when the
  // slot was confirmed at the very head).
  int64_t SlotLagBytes();
  // Waits until a session of this database (other than the harness's) has started a
  // query LIKE `pattern` `rounds` times from now, each after the one before, as seen
  // in pg_stat_activity: the positive sign that a periodic job went round (the
  // position recorder's horizon, cleanup's DELETE) when a test must show that it
  // did NOT do something meanwhile.
  bool WaitForQueryRounds(const std::string& pattern, int rounds, absl::Duration timeout);
  // Waits until the relay holds at least `events` unacknowledged events
  // (outboxd_events_in_flight) and has since sent the server `rounds` standby status
  // updates (pg_stat_replication.reply_time moved on each time): each was its chance to
  // confirm what it must not. A test that the slot does NOT advance past a point waits
  // for this, then reads confirmed_flush_lsn, which never goes backwards.
  bool WaitForFeedbackWhileInFlight(int events, int rounds, absl::Duration timeout);
  // Waits until the slot's confirmed_flush_lsn >= lsn.
  bool WaitForConfirmed(pg::Lsn lsn, absl::Duration timeout);

 private:
  std::unique_ptr<TestDatabase> db_;
  std::unique_ptr<kafka::MockCluster> cluster_;
  std::unique_ptr<KafkaCollector> collector_;
  std::unique_ptr<ChildProcess> relay_;
  std::string relay_conninfo_;

  // Waits `rounds` times until `newest_after(since)`, a query of one timestamp newer
  // than `since` (or ''), returns one; each round starts from the one before.
  template <typename Query>
  bool WaitForNewerTimestamps(Query newest_after, int rounds, absl::Duration timeout);
};

// Every row of the outbox (topic pedido.confirmado) reaches the collector within
// `timeout`; per aggregate, the first delivery of each event respects commit (seq)
// order (messages whose event the table does not hold are left to the caller: ghosts of a
// failover). Returns how many messages were duplicates.
size_t ExpectEverythingDelivered(RelayHarness& h, absl::Duration timeout);

// Kills the relay (-9) `kills` times, each at a random moment of the running load,
// and starts it again with `args`; returns the killed relays' logs, one after another.
std::string KillNineUnderLoad(RelayHarness& h, Load& load, int kills,
                              const std::vector<std::string>& args = {});

// Every message's headers in `topic` as kcat, the independent reader, prints them
// ("id=...,type=...,..."), one line each.
std::vector<std::string> KcatHeaders(RelayHarness& h, const std::string& topic);
// Every message of `topic` as kcat prints it with this -f format ("%k %p": key and
// partition), one line each.
std::vector<std::string> KcatLines(RelayHarness& h, const std::string& topic,
                                   const std::string& format);

// ExpectEverythingDelivered with no duplicate, and kcat too finds each row of the
// outbox exactly once in pedido.confirmado and nothing else there: no event lost,
// none sent twice (--dedupe, relay/resume_dedupe.h). Returns the duplicates.
size_t ExpectEachEventOnce(RelayHarness& h);

// Waits (up to 90 s, a test failure past it) until the collector holds `n` more
// messages than `since`; returns how long it took.
absl::Duration WaitForMore(RelayHarness& h, size_t since, size_t n);

// Messages whose event the table does not hold: after a failover, ghosts of
// transactions the new primary never had.
size_t Ghosts(RelayHarness& h);

// The end of a broker outage: every broker back, all `events` delivered and
// acknowledged, `outboxd cleanup --retention 0s` leaves the outbox empty, and the
// relay stops with exit code 0.
void ExpectCleanAfterTheOutage(RelayHarness& h, size_t events);

// `n` dead letters written straight into the table as the relay would have (ids
// 'e<i>', aggregates 'a<i % aggregates>'), their topic and payload SQL expressions
// of i.
void InsertDeadLetters(TestDatabase& db, int n, int aggregates, const std::string& topic_sql,
                       const std::string& payload_sql);

// A failover test's figures, as properties of the test in its XML report.
void RecordDeliveryFigures(size_t events, size_t duplicates, size_t ghosts);

// `outboxd status --json --slot <the slot>` on the test database until its output
// contains `needle` (the last output in `last`).
bool WaitForStatus(RelayHarness& h, const std::string& needle, absl::Duration timeout,
                   std::string* last);

// A partition `<table>_<name>` of the range-partitioned `table` (the outbox, the
// inbox) for the UTC day `days` from today (negative: past).
void CreateDayPartition(TestDatabase& db, const std::string& table, const std::string& name,
                        int days);

}  // namespace outboxd::test

#endif  // OUTBOXD_TESTS_SUPPORT_RELAY_HARNESS_H_
