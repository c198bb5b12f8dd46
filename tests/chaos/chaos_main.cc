// outboxd-chaos: the chaos run of issue 3. A randomized schedule of faults (relay
// kill -9, every broker down, a slow broker, transient produce errors, PostgreSQL
// crash-restart, walsender killed) under a steady mixed load, with two relays on one
// slot; then an independent check that every committed event reached Kafka or the
// dead-letter table, that no rolled-back event appeared anywhere, and that each
// aggregate's events came in commit order (see checker.h for the exact rule).
//
// With --sink rabbitmq the relays publish to a RabbitMQ node of the run's own
// (scripts/rabbitmq), read back from one durable queue by an independent rabbitmq-c
// consumer (amqp_reader.h), and the faults are the node's: relay kill -9,
// close_all_connections, kill -9 and restart of the node, a memory alarm held a few
// seconds, and the PostgreSQL crash-restart.
//
// With --sink nats the relays publish to a nats-server of the run's own (scripts/nats,
// JetStream with file storage), read back by an independent libnats reader
// (nats_reader.h), under relay kill -9, kill -9 of the server with a start on the same
// store after an outage, the server paused (SIGSTOP) past the sink's ack wait, the
// PostgreSQL crash-restart and the walsender killed. JetStream drops a repeated
// Nats-Msg-Id within the stream's duplicate window (2 minutes, longer than the run),
// so here a duplicate in the stream fails the run as a loss does. On Kafka,
// --no-duplicates does the same: the relays read the topic back after each restart
// (--dedupe, relay/resume_dedupe.h) and skip what it already holds.
//
// With --network the relays reach PostgreSQL through a fault proxy
// (support/fault_proxy.h) and the faults are the path's: a blackhole (every socket
// open, nothing forwarded: noticed by the relays' 3 s --pg-receive-timeout), 2 s
// stalls, a 64 kB/s cap and resets, with relay kills and a slow broker around them.
//
// With --replica PostgreSQL is a primary and its streaming standby (scripts/pg-ha,
// ha_pair.h); the relays follow whichever is primary (a two-host --pg,
// --recreate-missing-slot), and the faults add failovers: promote (kill -9 of the
// primary) and switchover (its clean stop), each promoting the standby and
// rebuilding the old primary as its standby. The check then reads the surviving
// timeline: events in the broker whose rows it lacks are ghosts, counted and printed,
// and with --standby-slot (publish only what the standby flushed) there must be none.
//
//   outboxd-chaos --minutes 5 [--seed 42] [--rate 100] [--sink rabbitmq|nats]
//                 [--replica [--standby-slot]]              (scripts/chaos wraps it)
//
// Everything it runs is its own: a private PostgreSQL cluster, the mock broker (or
// the RabbitMQ node, or the NATS server) as a separate process, the relays as child
// processes. Exit 0 when the check passes, 1 when something was lost, a rolled-back
// event appeared or order broke, 2 when the run could not be set up.
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <map>
#include <random>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "chaos/amqp_reader.h"
#include "chaos/broker.h"
#include "chaos/broker_node.h"
#include "chaos/checker.h"
#include "chaos/ha_pair.h"
#include "chaos/kafka_reader.h"
#include "chaos/load.h"
#include "chaos/nats_reader.h"
#include "chaos/relays.h"
#include "chaos/schedule.h"
#include "pg/lsn.h"
#include "support/child_process.h"
#include "support/fault_proxy.h"
#include "support/pg_fixture.h"
#include "support/private_cluster.h"

namespace outboxd::chaos {
namespace {

constexpr int kPartitions = 4;
// RabbitMQ: the relays' exchange and the reader's queue. The binding takes the normal
// events' routing keys (chaos.a, chaos.b) only, so the load's invalid-topic poison
// ("chaos bad topic!") is unroutable: returned, and dead-lettered as with Kafka.
constexpr char kExchange[] = "chaos";
constexpr char kQueue[] = "chaos-check";
constexpr char kBinding[] = "chaos.*";
// NATS: the stream the reader makes and the relays publish to. It takes the normal
// events' subjects (chaos.a, chaos.b); the invalid-topic poison ("chaos bad topic!")
// is no NATS subject at all, refused by the sink and dead-lettered.
constexpr char kStream[] = "CHAOS";
constexpr char kSubjects[] = "chaos.*";

struct Options {
  double minutes = 1;
  uint64_t seed = 0;
  double rate = 100;
  bool keep = false;
  std::string sink = "kafka";  // or "rabbitmq", "nats"
  bool scalar_poison_only = false;
  bool replica = false;       // a primary and its standby, and failover faults
  bool standby_slot = false;  // --replica: the relays wait for the standby (no ghosts)
  std::string partition_by;   // "" (a plain outbox), day, week, month: setup --partition-by
  // Kafka: the relays read the topic back after each restart (--dedupe, the default,
  // relay/resume_dedupe.h), so a duplicate fails the run as a loss does.
  bool no_duplicates = false;
  // The relays reach PostgreSQL through a fault proxy, and the faults are the path's.
  bool network = false;
};

void Say(const std::string& line) {
  std::printf("chaos: %s\n", line.c_str());
  std::fflush(stdout);
}

class ChaosRun {
 public:
  ChaosRun(Options options, std::string dir) : options_(options), dir_(std::move(dir)) {}
  // Exit code.
  int Run();

 private:
  absl::Status SetUp();
  // The broker and the reader, with the relays' flags for it.
  absl::Status SetUpKafka(std::vector<std::string>& sink_args);
  absl::Status SetUpRabbit(std::vector<std::string>& sink_args);
  absl::Status SetUpNats(std::vector<std::string>& sink_args);
  // One PostgreSQL cluster, or (--replica) a primary and its standby; sets db_.
  absl::Status SetUpPostgres();
  // --replica: the relays' PostgreSQL flags while `standby` is the primary's standby.
  std::vector<std::string> ReplicaArgs(const std::string& standby) const;
  // --replica: promote or switchover, then the old primary rebuilt as the new standby.
  void Failover(const Fault& fault);
  bool rabbit() const { return options_.sink == "rabbitmq"; }
  bool nats() const { return options_.sink == "nats"; }
  const std::vector<FaultKind>& FaultKinds() const;
  // RabbitMQ's and NATS' faults; a non-OK status is a problem of the run.
  absl::Status InjectRabbit(const Fault& fault);
  absl::Status InjectNats(const Fault& fault);
  void Inject(const Fault& fault);
  void ProduceErrors(const Fault& fault);
  void KillWalsender();
  // --network: the proxy, and the relays' conninfo and flags through it.
  absl::Status SetUpProxy(RelayConfig& config);
  void InjectPath(const Fault& fault);
  // Everything committed up to now confirmed by the relays and read by the reader.
  bool Drain(absl::Duration timeout);
  int Report(const Verdict& v, absl::Duration ran);
  void Problem(std::string line) {
    Say("PROBLEM: " + line);
    problems_.push_back(std::move(line));
  }
  std::string Elapsed() const {
    return absl::StrFormat("[%6.1fs]", absl::ToDoubleSeconds(absl::Now() - start_));
  }

  const Options options_;
  const std::string dir_;
  std::unique_ptr<test::PrivateCluster> cluster_;
  std::unique_ptr<HaPair> ha_;  // --replica, instead of cluster_
  std::unique_ptr<test::TestDatabase> db_;
  std::unique_ptr<MockBroker> broker_;  // Kafka
  std::unique_ptr<BrokerNode> node_;    // RabbitMQ or NATS
  std::unique_ptr<Reader> reader_;
  std::unique_ptr<test::FaultProxy> proxy_;  // --network: between the relays and PostgreSQL
  std::unique_ptr<RelayPair> relays_;
  std::unique_ptr<Load> load_;
  std::map<std::string, int> faults_;  // by kind
  // --replica: from the primary's end to the first event committed on the new one read back.
  std::vector<absl::Duration> first_event_after_;
  std::vector<std::string> problems_;  // the run itself misbehaved (not the verdict)
  absl::Time start_;
};

absl::Status ChaosRun::SetUpPostgres() {
  if (options_.replica) {
    // The postgres user runs the servers under dir_: it must get in.
    chmod(dir_.c_str(), 0755);
    absl::StatusOr<std::unique_ptr<HaPair>> ha = HaPair::Start(dir_);
    if (!ha.ok()) return ha.status();
    ha_ = std::move(*ha);
    db_ = test::TestDatabase::Create(ha_->conninfo());
    return absl::OkStatus();
  }
  cluster_ = std::make_unique<test::PrivateCluster>();
  if (cluster_->conninfo().find("host=") == std::string::npos) {
    return absl::UnavailableError(absl::StrCat("PostgreSQL did not start: ", cluster_->conninfo()));
  }
  db_ = test::TestDatabase::Create(cluster_->conninfo());
  return absl::OkStatus();
}

std::vector<std::string> ChaosRun::ReplicaArgs(const std::string& standby) const {
  if (!options_.replica) return {};
  std::vector<std::string> args = {"--recreate-missing-slot"};
  if (options_.standby_slot) args.insert(args.end(), {"--standby-slot", HaPair::SlotOf(standby)});
  return args;
}

absl::Status ChaosRun::SetUp() {
  if (absl::Status pg = SetUpPostgres(); !pg.ok()) return pg;
  std::vector<std::string> sink_args;
  absl::Status s = rabbit() ? SetUpRabbit(sink_args)
                   : nats() ? SetUpNats(sink_args)
                            : SetUpKafka(sink_args);
  if (!s.ok()) return s;
  std::vector<std::string> setup_args = {test::BinPath("outboxd"), "setup",  "--pg",
                                         db_->conninfo(),          "--slot", db_->name()};
  if (!options_.partition_by.empty()) {
    setup_args.insert(setup_args.end(), {"--partition-by", options_.partition_by});
  }
  auto setup = test::ChildProcess::Start(setup_args);
  if (setup->Wait(absl::Seconds(60)) != 0) {
    return absl::InternalError(absl::StrCat("outboxd setup failed: ", setup->Log()));
  }
  RelayConfig config{.conninfo = db_->conninfo(),
                     .sink_args = std::move(sink_args),
                     .slot = db_->name(),
                     .log_dir = dir_,
                     .pg_args = ReplicaArgs("b")};
  if (options_.network) {
    if (absl::Status proxy = SetUpProxy(config); !proxy.ok()) return proxy;
  }
  relays_ = std::make_unique<RelayPair>(std::move(config));
  relays_->StartBoth(/*single_in_flight=*/false);
  if (!relays_->WaitForActive(absl::Seconds(30))) {
    return absl::UnavailableError(absl::StrCat("no relay streams; logs in ", dir_));
  }
  return absl::OkStatus();
}

absl::Status ChaosRun::SetUpProxy(RelayConfig& config) {
  int port = 0;
  if (!absl::SimpleAtoi(db_->Scalar("SELECT current_setting('port')"), &port)) {
    return absl::InternalError("cannot read PostgreSQL's port");
  }
  proxy_ = std::make_unique<test::FaultProxy>("127.0.0.1", port);
  if (absl::Status s = proxy_->Start(); !s.ok()) return s;
  // Seconds, not the defaults' minute: a blackhole is noticed by the relay after 3 s
  // of silence, and its old walsender lets the slot go 5 s after it last heard.
  config.relay_conninfo = absl::StrCat(db_->conninfo(), " host=127.0.0.1 port=", proxy_->port(),
                                       " options='-c wal_sender_timeout=5s'");
  config.pg_args.insert(config.pg_args.end(), {"--pg-receive-timeout", "3s"});
  return absl::OkStatus();
}

void ChaosRun::InjectPath(const Fault& f) {
  switch (f.kind) {
    case FaultKind::kPathBlackhole:
      proxy_->Blackhole();
      break;
    case FaultKind::kPathSpike:
      proxy_->Stall(f.length);
      break;
    case FaultKind::kPathThrottle:
      proxy_->SetBandwidth(64 << 10);
      break;
    case FaultKind::kPathReset:
      proxy_->ResetAll();
      return;
    default:
      Problem(absl::StrCat(KindName(f.kind), " is not a fault of the path"));
      return;
  }
  absl::SleepFor(f.length);
  proxy_->Heal();
}

absl::Status ChaosRun::SetUpKafka(std::vector<std::string>& sink_args) {
  auto broker = MockBroker::Start(dir_, kTopics, kPartitions);
  if (!broker.ok()) return broker.status();
  broker_ = std::move(*broker);
  auto reader = KafkaReader::Start(broker_->bootstraps(), kTopics, kPartitions);
  if (!reader.ok()) return reader.status();
  reader_ = std::move(*reader);
  sink_args = {"--brokers", broker_->bootstraps()};
  return absl::OkStatus();
}

absl::Status ChaosRun::SetUpRabbit(std::vector<std::string>& sink_args) {
  // The node runs as the rabbitmq user (when we are root) under dir_: it must get in.
  chmod(dir_.c_str(), 0755);
  auto node = BrokerNode::Start("rabbitmq", dir_, "OUTBOXD_TEST_AMQP");
  if (!node.ok()) return node.status();
  node_ = std::move(*node);
  auto reader = AmqpReader::Start(node_->url(), kExchange, kQueue, kBinding);
  if (!reader.ok()) return reader.status();
  reader_ = std::move(*reader);
  sink_args = {"--sink", "rabbitmq", "--amqp-url", node_->url(), "--exchange", kExchange};
  return absl::OkStatus();
}

absl::Status ChaosRun::SetUpNats(std::vector<std::string>& sink_args) {
  auto node = BrokerNode::Start("nats", dir_, "OUTBOXD_TEST_NATS");
  if (!node.ok()) return node.status();
  node_ = std::move(*node);
  auto reader = NatsReader::Start(node_->url(), kStream, kSubjects);
  if (!reader.ok()) return reader.status();
  reader_ = std::move(*reader);
  sink_args = {"--sink", "nats", "--nats-url", node_->url(), "--stream", kStream};
  return absl::OkStatus();
}

const std::vector<FaultKind>& ChaosRun::FaultKinds() const {
  if (options_.replica) return kReplicaFaultKinds;
  if (options_.network) return kNetworkFaultKinds;
  if (rabbit()) return kRabbitFaultKinds;
  return nats() ? kNatsFaultKinds : kKafkaFaultKinds;
}

absl::Status ChaosRun::InjectRabbit(const Fault& f) {
  switch (f.kind) {
    case FaultKind::kConnectionsClosed:
      return node_->Tool("rabbitmqctl", {"close_all_connections", "chaos"});
    case FaultKind::kNodeRestart:
      return node_->Script("restart");
    case FaultKind::kMemoryAlarm: {
      absl::Status status = node_->Tool("rabbitmqctl", {"set_vm_memory_high_watermark", "0.00001"});
      absl::SleepFor(f.length);
      if (status.ok()) status = node_->Tool("rabbitmqctl", {"set_vm_memory_high_watermark", "0.4"});
      return status;
    }
    default:
      return absl::InternalError(absl::StrCat(KindName(f.kind), " is not a RabbitMQ fault"));
  }
}

absl::Status ChaosRun::InjectNats(const Fault& f) {
  switch (f.kind) {
    case FaultKind::kServerDown: {
      absl::Status status = node_->Script("kill");
      absl::SleepFor(f.length);
      if (status.ok()) status = node_->Script("restart");
      return status;
    }
    case FaultKind::kServerPause: {
      absl::StatusOr<pid_t> pid = node_->ServerPid();
      if (!pid.ok()) return pid.status();
      if (kill(*pid, SIGSTOP) != 0) return absl::InternalError("kill -STOP of nats-server failed");
      absl::SleepFor(f.length);
      if (kill(*pid, SIGCONT) != 0) return absl::InternalError("kill -CONT of nats-server failed");
      return absl::OkStatus();
    }
    default:
      return absl::InternalError(absl::StrCat(KindName(f.kind), " is not a NATS fault"));
  }
}

void ChaosRun::Inject(const Fault& f) {
  Say(absl::StrCat(Elapsed(), " ", Describe(f), "  (", reader_->Count(), " messages read)"));
  ++faults_[KindName(f.kind)];
  absl::Status status;
  switch (f.kind) {
    case FaultKind::kRelayKill:
      if (relays_->Kill(f.kill_standby).empty()) Problem("no relay to kill");
      break;
    case FaultKind::kBrokersDown:
      status = broker_->Command("down all");
      absl::SleepFor(f.length);
      if (status.ok()) status = broker_->Command("up all");
      break;
    case FaultKind::kSlowBroker:
      status = broker_->Command(absl::StrCat("rtt all ", f.rtt_ms));
      absl::SleepFor(f.length);
      if (status.ok()) status = broker_->Command("rtt all 0");
      break;
    case FaultKind::kProduceErrors:
      ProduceErrors(f);
      break;
    case FaultKind::kPostgresRestart:
      if (!cluster_->RestartImmediate()) Problem("pg_ctl restart -m immediate failed");
      break;
    case FaultKind::kWalsenderKill:
      KillWalsender();
      break;
    case FaultKind::kConnectionsClosed:
    case FaultKind::kNodeRestart:
    case FaultKind::kMemoryAlarm:
      status = InjectRabbit(f);
      break;
    case FaultKind::kServerDown:
    case FaultKind::kServerPause:
      status = InjectNats(f);
      break;
    case FaultKind::kPromote:
    case FaultKind::kSwitchover:
      Failover(f);
      break;
    case FaultKind::kPathBlackhole:
    case FaultKind::kPathSpike:
    case FaultKind::kPathThrottle:
    case FaultKind::kPathReset:
      InjectPath(f);
      break;
  }
  if (!status.ok()) Problem(absl::StrCat("broker command: ", status.message()));
}

// librdkafka 2.0.2's mock sometimes acknowledges a retried batch it never stored
// when produce errors meet pipelined requests, so both relays run with one request
// in flight while errors are pending. The errors are consumed in order by the next
// produce requests, cluster-wide: once an event committed after the injection has
// been read back, none is left and the relays may pipeline again.
void ChaosRun::ProduceErrors(const Fault& f) {
  if (!relays_->StopBoth(absl::Seconds(60))) Problem("a relay did not stop cleanly on SIGTERM");
  relays_->StartBoth(/*single_in_flight=*/true);
  if (!relays_->WaitForActive(absl::Seconds(60))) Problem("no relay streams after the restart");
  absl::Status status =
      broker_->Command(absl::StrCat("produce-errors ", f.error_code, " ", f.error_count));
  if (!status.ok()) Problem(absl::StrCat("broker command: ", status.message()));
  const absl::Time window_end = absl::Now() + f.length;
  std::optional<std::string> marker = load_->CommitMarker(absl::Seconds(60));
  const absl::Time deadline = absl::Now() + absl::Seconds(120);
  while (marker && !reader_->Seen(*marker) && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  if (!marker || !reader_->Seen(*marker)) {
    Problem("the event committed after the produce errors was not delivered within 120 s");
  }
  absl::SleepFor(window_end - absl::Now());
  if (!relays_->StopBoth(absl::Seconds(60))) Problem("a relay did not stop cleanly on SIGTERM");
  relays_->StartBoth(/*single_in_flight=*/false);
}

void ChaosRun::Failover(const Fault& f) {
  const absl::Time begin = absl::Now();
  absl::StatusOr<std::string> old =
      ha_->Failover(f.kind == FaultKind::kPromote ? HaPair::Exit::kKill : HaPair::Exit::kStop);
  if (!old.ok()) {
    Problem(absl::StrCat("failover: ", old.status().message()));
    return;
  }
  const absl::Duration promoted = absl::Now() - begin;
  if (options_.standby_slot) {
    // The old primary becomes the standby, over its slot on the new primary: the relays
    // name that one now (until the rebuild creates it, they hold publishing).
    relays_->SetPgArgs(ReplicaArgs(*old));
    if (!relays_->StopBoth(absl::Seconds(60))) Problem("a relay did not stop cleanly on SIGTERM");
    relays_->StartBoth(/*single_in_flight=*/false);
  }
  // An event committed on the new primary, watched for while the old one is rebuilt:
  // the primary's end to the new one's first event in the broker (with --standby-slot
  // that includes the rebuild: nothing is published before a standby has it).
  const std::optional<std::string> marker = load_->CommitMarker(absl::Seconds(60));
  absl::Time marker_seen = absl::InfinitePast();
  std::thread watch([&] {
    const absl::Time deadline = absl::Now() + absl::Seconds(180);
    while (marker && !reader_->Seen(*marker) && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(20));
    }
    if (marker && reader_->Seen(*marker)) marker_seen = absl::Now();
  });
  const absl::Status rebuilt = ha_->Rebuild(*old);
  const absl::Duration rebuild_done = absl::Now() - begin;
  watch.join();
  if (!rebuilt.ok()) Problem(absl::StrCat("rebuild of node ", *old, ": ", rebuilt.message()));
  if (marker_seen == absl::InfinitePast()) {
    Problem("no event committed on the new primary reached the broker within 180 s");
    return;
  }
  const auto show = [](absl::Duration d) {
    return absl::FormatDuration(absl::Trunc(d, absl::Milliseconds(100)));
  };
  first_event_after_.push_back(marker_seen - begin);
  Say(absl::StrCat("  node ", HaPair::Other(*old), " promoted in ", show(promoted),
                   "; first event from it published ", show(marker_seen - begin), " after the ",
                   f.kind == FaultKind::kPromote ? "kill" : "stop", "; node ", *old,
                   " rebuilt as its standby after ", show(rebuild_done)));
}

void ChaosRun::KillWalsender() {
  absl::StatusOr<pg::Connection> conn = pg::Connection::Open(db_->conninfo());
  absl::StatusOr<pg::Result> r = conn.ok()
                                     ? conn->ExecParams(
                                           "SELECT pg_terminate_backend(active_pid) FROM "
                                           "pg_replication_slots WHERE slot_name = $1 AND active",
                                           {db_->name()})
                                     : absl::StatusOr<pg::Result>(conn.status());
  if (!r.ok()) {
    Problem(absl::StrCat("pg_terminate_backend: ", r.status().message()));
  } else if (r->rows() == 0) {
    Say("  (no walsender was active: a relay is reconnecting)");
  }
}

bool ChaosRun::Drain(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  pg::Lsn head = 0;
  std::string confirmed;
  while (absl::Now() < deadline) {
    absl::StatusOr<pg::Connection> conn = pg::Connection::Open(db_->conninfo());
    absl::StatusOr<pg::Result> r =
        conn.ok() ? conn->ExecParams(
                        "SELECT pg_current_wal_lsn()::text, confirmed_flush_lsn::text "
                        "FROM pg_replication_slots WHERE slot_name = $1",
                        {db_->name()})
                  : absl::StatusOr<pg::Result>(conn.status());
    if (r.ok() && r->rows() == 1) {
      if (head == 0) head = pg::ParseLsn(r->Get(0, 0)).value_or(0);
      confirmed = r->Get(0, 1);
      if (pg::ParseLsn(confirmed).value_or(0) >= head) {
        return reader_->WaitCaughtUp(std::max(deadline - absl::Now(), absl::Seconds(30)));
      }
    }
    absl::SleepFor(absl::Milliseconds(200));
  }
  Problem(absl::StrCat("the slot was not confirmed up to ", pg::FormatLsn(head), " within ",
                       absl::FormatDuration(timeout), " (confirmed: ", confirmed, ")"));
  return false;
}

int ChaosRun::Run() {
  Say(absl::StrCat(
      "seed ", options_.seed, ", ", options_.minutes, " min, ", options_.rate,
      " transactions/s; replay with: scripts/chaos --minutes ", options_.minutes, " --seed ",
      options_.seed, options_.sink == "kafka" ? "" : absl::StrCat(" --sink ", options_.sink),
      options_.scalar_poison_only ? " --scalar-poison-only" : "",
      options_.replica ? " --replica" : "", options_.standby_slot ? " --standby-slot" : "",
      options_.network ? " --network" : "", options_.partition_by.empty() ? "" : " --partition-by ",
      options_.partition_by));
  if (absl::Status s = SetUp(); !s.ok()) {
    Say(absl::StrCat("cannot set up: ", s.message()));
    return 2;
  }
  const absl::Duration run = absl::Seconds(options_.minutes * 60);
  const std::vector<Fault> schedule = MakeSchedule(options_.seed, run, FaultKinds());
  Say(absl::StrCat("PostgreSQL ", options_.replica ? ha_->dir() : cluster_->dir(), ", broker ",
                   node_ != nullptr ? node_->url() : broker_->bootstraps(), ", relay logs in ",
                   dir_, "; ", schedule.size(), " faults scheduled"));
  start_ = absl::Now();
  load_ = std::make_unique<Load>(db_->conninfo(), options_.seed,
                                 LoadOptions{.transactions_per_second = options_.rate,
                                             .invalid_topic_poison = !options_.scalar_poison_only});
  for (const Fault& f : schedule) {
    // Faults run one after another; one that overran delays the next, never overlaps.
    absl::SleepFor(start_ + f.at - absl::Now());
    if (absl::Now() - start_ >= run) break;
    Inject(f);
  }
  absl::SleepFor(start_ + run - absl::Now());
  const absl::Duration ran = absl::Now() - start_;
  load_->Stop();
  Say(absl::StrCat(Elapsed(), " load stopped; waiting for the relays to catch up"));
  Drain(absl::Seconds(180));
  if (!relays_->StopBoth(absl::Seconds(60))) Problem("a relay did not stop cleanly on SIGTERM");
  CheckInput input{.deliveries = {},
                   .rolled_back = load_->RolledBack(),
                   .poison = load_->Poison(),
                   .failover = options_.replica};
  const int64_t skipped = reader_->Skipped();
  const int64_t malformed = reader_->Malformed();
  input.deliveries = reader_->StopAndTake();
  if (skipped > 0)
    Problem(absl::StrCat("the reader fell behind: ", skipped,
                         " messages dropped by the broker before it read them"));
  if (malformed > 0) Problem(absl::StrCat(malformed, " messages without id or lsn header"));
  absl::StatusOr<pg::Connection> conn = pg::Connection::Open(db_->conninfo());
  absl::Status read = conn.ok() ? ReadTables(*conn, input) : conn.status();
  if (!read.ok()) {
    Say(absl::StrCat("cannot check: ", read.message()));
    return 2;
  }
  return Report(Check(input), ran);
}

int ChaosRun::Report(const Verdict& v, absl::Duration ran) {
  const LoadCounts load = load_->Counts();
  int total = 0;
  std::vector<std::string> kinds;
  for (const auto& [kind, n] : faults_) {
    total += n;
    kinds.push_back(absl::StrCat(kind, " ", n));
  }
  Say(absl::StrCat("seed ", options_.seed, ", ran ",
                   absl::FormatDuration(absl::Trunc(ran, absl::Seconds(1)))));
  Say(absl::StrCat("events ", v.committed, " committed (", load.committed_transactions,
                   " transactions, ", load.rollbacks, " rolled back, ", load.failed_transactions,
                   " cut by faults)"));
  Say(absl::StrCat("faults ", total, ": ", absl::StrJoin(kinds, ", ")));
  Say(absl::StrCat(options_.sink, " ", v.messages, " messages, ", v.published,
                   " events published; ", "dead-lettered ", v.dead_lettered, " (poison events: ",
                   load.poison_scalar, " scalar payload, ", load.poison_topic, " invalid topic)"));
  Say(absl::StrCat("lost ", v.lost, ", duplicates ", v.duplicates, " (", v.in_both,
                   " both published and dead-lettered), rolled-back seen ", v.rolled_back_seen,
                   ", never-written seen ", v.unknown, ", poison published ", v.poison_published,
                   ", order violations ", v.disorder, ", lsn mismatches ", v.lsn_mismatch,
                   options_.replica ? absl::StrCat(", ghosts ", v.ghosts) : ""));
  if (options_.replica) {
    Say("| events | faults | lost | duplicates | ghosts | order violations |");
    Say(absl::StrCat("| ", v.committed, " | ", total, " | ", v.lost, " | ", v.duplicates, " | ",
                     v.ghosts, " | ", v.disorder, " |"));
  } else {
    Say("| events | faults | lost | duplicates | order violations | seed |");
    Say(absl::StrCat("| ", v.committed, " | ", total, " | ", v.lost, " | ", v.duplicates, " | ",
                     v.disorder, " | ", options_.seed, " |"));
  }
  if (!first_event_after_.empty()) {
    std::vector<std::string> times;
    for (absl::Duration d : first_event_after_) {
      times.push_back(absl::FormatDuration(absl::Trunc(d, absl::Milliseconds(100))));
    }
    Say(absl::StrCat("primary gone to the new primary's first event published: ",
                     absl::StrJoin(times, ", ")));
  }
  if (nats() && v.duplicates > 0) {
    Problem(absl::StrCat(v.duplicates,
                         " duplicates although JetStream drops a repeated "
                         "Nats-Msg-Id within the duplicate window"));
  } else if (options_.no_duplicates && v.duplicates > 0) {
    Problem(
        absl::StrCat(v.duplicates, " duplicates although the relays read Kafka back (--dedupe)"));
  }
  if (options_.standby_slot && v.ghosts > 0) {
    Problem(absl::StrCat(v.ghosts, " ghost events although the relays waited for the standby"));
  }
  int refused = 0;
  for (const UnexpectedExit& e : relays_->UnexpectedExits()) {
    const std::string line = absl::StrCat(e.relay, " exit ", e.code, ": ", e.last_line);
    if (e.reached_slot) {
      Problem(absl::StrCat("a running relay exited: ", line));
    } else {
      ++refused;
      Say(absl::StrCat("  start refused (restarted): ", line));
    }
  }
  Say(absl::StrCat("relays started ", relays_->Starts(), " times (", refused,
                   " refused to start while PostgreSQL was away)"));
  for (const std::string& e : v.examples) Say("  " + e);
  const bool pass = v.ok() && problems_.empty();
  // PostgreSQL's log beside the relays' (a walsender's end is said only there).
  if ((!pass || options_.keep) && cluster_ != nullptr) {
    std::error_code ignored;
    std::filesystem::copy_file(cluster_->dir() + "/server.log", dir_ + "/postgresql.log",
                               std::filesystem::copy_options::overwrite_existing, ignored);
  }
  Say(pass ? "PASS" : absl::StrCat("FAIL (seed ", options_.seed, "; logs kept in ", dir_, ")"));
  return pass ? 0 : 1;
}

}  // namespace
}  // namespace outboxd::chaos

int main(int argc, char** argv) {
  CLI::App app{"outboxd chaos run: random faults under load, then a loss/order check"};
  outboxd::chaos::Options options;
  options.seed = std::random_device{}();
  app.add_option("--minutes", options.minutes, "how long faults are injected")
      ->check(CLI::Range(0.1, 24 * 60.0));
  app.add_option("--seed", options.seed, "replay the fault schedule of an earlier run");
  app.add_option("--rate", options.rate, "load, in transactions per second")
      ->check(CLI::Range(1.0, 5000.0));
  app.add_flag("--keep", options.keep, "keep the relay logs even when the run passes");
  app.add_option("--sink", options.sink,
                 "the relays' broker: kafka (the mock cluster), rabbitmq or nats (JetStream)")
      ->check(CLI::IsMember({"kafka", "rabbitmq", "nats"}));
  app.add_flag("--scalar-poison-only", options.scalar_poison_only,
               "poison events are JSON scalars only, never an invalid topic / unroutable key");
  auto* replica = app.add_flag("--replica", options.replica,
                               "PostgreSQL as a primary and its streaming standby (scripts/pg-ha), "
                               "with failover faults: promote, switchover");
  app.add_flag("--standby-slot", options.standby_slot,
               "with --replica: the relays publish only what the standby flushed "
               "(--standby-slot), and the run fails on any ghost event")
      ->needs(replica);
  app.add_option("--partition-by", options.partition_by,
                 "a partitioned outbox (outboxd setup --partition-by): day, week or month")
      ->check(CLI::IsMember({"day", "week", "month"}));
  app.add_flag("--network", options.network,
               "the relays reach PostgreSQL through a fault proxy, and the faults are the "
               "path's: blackhole, 2 s spikes, a 64 kB/s cap, resets (and relay kill, slow broker)")
      ->excludes(replica);
  app.add_flag("--no-duplicates", options.no_duplicates,
               "Kafka: any duplicate fails the run (the relays' --dedupe reads the topic back)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (options.network && options.sink != "kafka") {
    // Its deck has the mock cluster's slow-broker fault.
    std::fprintf(stderr, "--network runs against the mock Kafka cluster only: drop --sink\n");
    return 2;
  }
  char dir[] = "/tmp/outboxd-chaos-XXXXXX";
  if (mkdtemp(dir) == nullptr) {
    std::perror("mkdtemp");
    return 2;
  }
  int code = outboxd::chaos::ChaosRun(options, dir).Run();
  if (code == 0 && !options.keep) std::filesystem::remove_all(dir);
  return code;
}
