// `outboxd run|poll|dead-letter replay --sink rabbitmq`, the real binary, against the
// real RabbitMQ node and PostgreSQL: what the queue holds (read back by pika), what
// the slot confirms, and what survives a closed connection, a killed node, a memory
// alarm and a killed relay.
#include <unistd.h>

#include <csignal>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pg/lsn.h"
#include "support/amqp_fixture.h"
#include "support/child_process.h"
#include "support/metrics_text.h"
#include "support/outbox_load.h"
#include "support/pg_fixture.h"
#include "support/wait_until.h"

namespace outboxd::test {
namespace {

using ::testing::HasSubstr;

constexpr char kType[] = "pedido.confirmado";

// A database with `outboxd setup` done, a queue bound to the relay's exchange, and the
// messages taken from it so far.
class RabbitHarness {
 public:
  explicit RabbitHarness(const AmqpNode& node = AmqpNode::Shared(),
                         VhostKind kind = VhostKind::kShared, const std::string& binding = "#")
      : db_(TestDatabase::Create()), broker_(TestBroker::Create(kind, node)) {
    exchange_ = broker_->Name("outboxd");
    queue_ = broker_->Name("events");
    std::string output;
    EXPECT_EQ(Outboxd({"setup", "--pg", db_->conninfo(), "--slot", db_->name()}, &output), 0)
        << output;
    if (!binding.empty()) broker_->BindQueue(exchange_, queue_, binding);
  }
  ~RabbitHarness() {
    if (relay_ && relay_->Running()) StopRelay();
  }

  TestDatabase& db() { return *db_; }
  TestBroker& broker() { return *broker_; }
  ChildProcess& relay() { return *relay_; }
  const std::string& queue() const { return queue_; }

  std::vector<std::string> SinkArgs() const {
    return {"--sink", "rabbitmq", "--amqp-url", broker_->url(), "--exchange", exchange_};
  }

  int Outboxd(std::vector<std::string> args, std::string* output) {
    std::unique_ptr<ChildProcess> child = StartOutboxd(std::move(args));
    std::optional<int> code = child->Wait(absl::Seconds(120));
    if (output != nullptr) *output = child->Log();
    return code.value_or(-1);
  }

  std::unique_ptr<ChildProcess> StartOutboxd(std::vector<std::string> args) {
    args.insert(args.begin(), BinPath("outboxd"));
    return ChildProcess::Start(args);
  }

  // `args` on this database (--pg) and this exchange (--sink rabbitmq ...).
  std::vector<std::string> WithSink(std::vector<std::string> args) const {
    args.insert(args.end(), {"--pg", db_->conninfo()});
    for (const std::string& a : SinkArgs()) args.push_back(a);
    return args;
  }

  void StartRelay(std::vector<std::string> extra = {}) {
    extra.insert(extra.begin(), {"run", "--slot", db_->name(), "--metrics", "127.0.0.1:0"});
    relay_ = StartOutboxd(WithSink(std::move(extra)));
    ASSERT_TRUE(relay_->WaitForAnyLog(kRelayReadsSlot, absl::Seconds(60))) << relay_->Log();
  }

  // SIGTERM to the relay; its exit code once it stopped (-1 if not within 60 s).
  int StopRelay() {
    relay_->Signal(SIGTERM);
    return relay_->Wait(absl::Seconds(60)).value_or(-1);
  }

  // One pedido.confirmado event of `aggregate` with this JSON payload.
  void Insert(const std::string& aggregate, const std::string& payload) {
    db_->Exec(absl::StrCat("INSERT INTO outbox (aggregate_id, tipo, payload) VALUES ('", aggregate,
                           "', '", kType, "', '", payload, "')"));
  }

  // In one transaction, events {"n": g} for g in [first, last], of the aggregates
  // <prefix>0 .. <prefix><aggregates - 1> in turn (g % aggregates).
  void InsertSeries(const std::string& prefix, int aggregates, int first, int last) {
    db_->Exec(absl::StrCat("INSERT INTO outbox (aggregate_id, tipo, payload) SELECT '", prefix,
                           "' || (g % ", aggregates, "), '", kType,
                           "', json_build_object('n', g)::jsonb FROM generate_series(", first, ", ",
                           last, ") g"));
  }

  // `outboxd dead-letter replay` of this relay's letters (`extra`: e.g. --aggregate a);
  // its exit code, its log in `output`.
  int Replay(std::string* output, std::vector<std::string> extra = {}) {
    extra.insert(extra.begin(), {"dead-letter", "replay", "--slot", db_->name()});
    return Outboxd(WithSink(std::move(extra)), output);
  }

  // Until outbox_dead_letter holds `count` rows (60 s at most).
  ::testing::AssertionResult DeadLettersReach(int count) {
    const std::string want = std::to_string(count);
    const auto held = [&] { return db_->Scalar("SELECT count(*) FROM outbox_dead_letter"); };
    if (WaitUntil(
            absl::Seconds(60), [&] { return held() == want; }, absl::Milliseconds(200))) {
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure() << held() << " dead letters, not " << want << "\n"
                                         << (relay_ ? relay_->Log() : "");
  }

  // One event of `aggregate` whose 1.5 MiB payload is over the node's 1 MiB
  // max_message_size (scripts/rabbitmq).
  void InsertOversized(const std::string& aggregate) {
    db_->Exec("INSERT INTO outbox (aggregate_id, tipo, payload) VALUES ('" + aggregate +
              "', 'pedido.confirmado', json_build_object('pad', repeat('x', 1572864))::jsonb)");
  }

  // The bodies of `aggregate`'s messages taken so far, in arrival order.
  std::vector<std::string> BodiesOf(const std::string& aggregate) const {
    std::vector<std::string> bodies;
    for (const AmqpMessage& m : taken_) {
      if (Header(m, "aggregate_id") == aggregate) bodies.push_back(m.body);
    }
    return bodies;
  }

  // Takes what the queue holds now into messages().
  void Take() {
    for (AmqpMessage& m : broker_->Drain(queue_)) taken_.push_back(std::move(m));
  }
  const std::vector<AmqpMessage>& messages() const { return taken_; }

  struct Row {
    int64_t seq;
    std::string id;
    std::string aggregate_id;
  };
  std::vector<Row> Rows() {
    std::vector<Row> rows;
    pg::Result r = db_->Exec("SELECT seq, id, aggregate_id FROM outbox ORDER BY seq");
    for (int i = 0; i < r.rows(); ++i) {
      Row row;
      EXPECT_TRUE(absl::SimpleAtoi(std::string(r.Get(i, 0)), &row.seq));
      row.id = r.Get(i, 1);
      row.aggregate_id = r.Get(i, 2);
      rows.push_back(std::move(row));
    }
    return rows;
  }

  pg::Lsn ConfirmedFlushLsn() {
    return pg::ParseLsn(db_->Scalar("SELECT confirmed_flush_lsn FROM pg_replication_slots "
                                    "WHERE slot_name = '" +
                                    db_->name() + "'"))
        .value_or(0);
  }

  // Takes from the queue until every outbox row arrived (or the deadline passed);
  // then checks each arrived, and that the first arrival of each aggregate's events
  // follows commit order. Returns the number of duplicates.
  size_t ExpectEverythingOnceInOrder(absl::Duration timeout) {
    std::vector<Row> rows = Rows();
    std::map<std::string, int64_t> seq_of;
    for (const Row& row : rows) seq_of[row.id] = row.seq;
    std::set<std::string> seen;
    WaitUntil(timeout, [&] {
      Take();
      seen.clear();
      for (const AmqpMessage& m : taken_) seen.insert(m.message_id);
      return seen.size() >= rows.size();
    });
    size_t missing = 0;
    for (const Row& row : rows) missing += seen.count(row.id) == 0;
    EXPECT_EQ(missing, 0u) << "of " << rows.size() << " committed events\n"
                           << (relay_ ? relay_->Log() : "");
    std::map<std::string, int64_t> last_seq;
    std::set<std::string> first;
    for (const AmqpMessage& m : taken_) {
      EXPECT_EQ(seq_of.count(m.message_id), 1u) << "not an outbox row: " << m.message_id;
      if (!first.insert(m.message_id).second) continue;
      std::string aggregate = Header(m, "aggregate_id");
      int64_t seq = seq_of[m.message_id];
      auto [it, fresh] = last_seq.emplace(aggregate, seq);
      if (!fresh) {
        EXPECT_LT(it->second, seq) << "aggregate " << aggregate << " out of order";
        it->second = seq;
      }
    }
    return taken_.size() - first.size();
  }

  static std::string Header(const AmqpMessage& m, const std::string& name) {
    for (absl::string_view pair : absl::StrSplit(m.headers, ';')) {
      std::pair<std::string, std::string> kv = absl::StrSplit(pair, absl::MaxSplits('=', 1));
      if (kv.first == name) return kv.second;
    }
    return "";
  }

 private:
  std::unique_ptr<TestDatabase> db_;
  std::unique_ptr<TestBroker> broker_;
  std::string exchange_;
  std::string queue_;
  std::unique_ptr<ChildProcess> relay_;
  std::vector<AmqpMessage> taken_;
};

// A check that the slot never runs ahead of the broker: after reading the slot's
// confirmed_flush_lsn L, everything the queue holds is taken; every event of a
// transaction committed before L must be among what was taken by then.
class AheadCheck {
 public:
  void Sample(RabbitHarness& h, int times = 1) {
    for (int i = 0; i < times; ++i) {
      pg::Lsn confirmed = h.ConfirmedFlushLsn();
      h.Take();
      samples_.push_back({confirmed, h.messages().size()});
    }
  }
  // Once every message is known (with its lsn header): checks each sample.
  void Verify(const RabbitHarness& h) const {
    const std::vector<AmqpMessage>& all = h.messages();
    std::map<std::string, pg::Lsn> lsn_of;
    for (const AmqpMessage& m : all) {
      lsn_of[m.message_id] = pg::ParseLsn(RabbitHarness::Header(m, "lsn")).value_or(0);
    }
    for (const auto& [confirmed, taken] : samples_) {
      std::set<std::string> had;
      for (size_t i = 0; i < taken; ++i) had.insert(all[i].message_id);
      for (const auto& [id, lsn] : lsn_of) {
        if (lsn < confirmed) {
          EXPECT_TRUE(had.count(id))
              << "slot confirmed " << pg::FormatLsn(confirmed) << " while event " << id << " of "
              << pg::FormatLsn(lsn) << " was not in the queue";
        }
      }
    }
  }
  size_t samples() const { return samples_.size(); }

 private:
  std::vector<std::pair<pg::Lsn, size_t>> samples_;
};

// The end of a test under load: the load stopped, every committed event arrived once
// and in order per aggregate, the slot never confirmed ahead of the queue (when
// sampled), and the figures printed.
void StopLoadAndExpectNothingLost(RabbitHarness& h, Load& load, const AheadCheck* ahead) {
  load.Stop();
  const size_t duplicates = h.ExpectEverythingOnceInOrder(absl::Seconds(90));
  if (ahead != nullptr) ahead->Verify(h);
  std::printf("%d transactions, %zu messages, %zu duplicates, %zu slot samples\n",
              load.transactions(), h.messages().size(), duplicates,
              ahead != nullptr ? ahead->samples() : 0);
}

TEST(RelayOnRabbitMq, EveryCommittedEventArrivesOnceInOrderWithPropertiesAndHeaders) {
  RabbitHarness h;
  h.StartRelay({"--header", "trace=/trace"});
  h.db().Exec(
      "INSERT INTO outbox (aggregate_id, tipo, payload, criado_em) VALUES "
      "('a1', 'pedido.confirmado', '{\"n\":1,\"trace\":\"t-1\"}', '2026-12-03 12:00:05.25+00')");
  h.InsertSeries("a", 5, 2, 200);
  h.db().Exec(
      "BEGIN; INSERT INTO outbox (aggregate_id, tipo, payload) VALUES ('rolled', "
      "'pedido.confirmado', '{}'); ROLLBACK");
  EXPECT_EQ(h.ExpectEverythingOnceInOrder(absl::Seconds(60)), 0u);
  ASSERT_EQ(h.messages().size(), 200u);
  const AmqpMessage& m = h.messages()[0];
  std::string id = h.db().Scalar("SELECT id FROM outbox WHERE payload->>'n' = '1'");
  EXPECT_EQ(m.message_id, id);
  EXPECT_EQ(m.routing_key, kType);
  EXPECT_EQ(m.type, kType);
  EXPECT_EQ(m.content_type, "application/json");
  EXPECT_EQ(m.delivery_mode, "2");
  EXPECT_EQ(m.timestamp, "1796299205");
  EXPECT_EQ(RabbitHarness::Header(m, "aggregate_id"), "a1");
  EXPECT_EQ(RabbitHarness::Header(m, "created_at"), "2026-12-03T12:00:05.25+00:00");
  EXPECT_FALSE(RabbitHarness::Header(m, "lsn").empty());
  EXPECT_EQ(RabbitHarness::Header(m, "trace"), "t-1");
  EXPECT_EQ(RabbitHarness::Header(m, "id"), "");  // a property, not a header
  EXPECT_EQ(m.body, R"({"n": 1, "trace": "t-1"})");
  for (const AmqpMessage& each : h.messages()) {
    EXPECT_NE(RabbitHarness::Header(each, "aggregate_id"), "rolled");
  }
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

// A queue confirms a backlog at the broker's pace, so the relay keeps 10,000 events in
// flight to RabbitMQ by default (Kafka's 100,000 only cost it memory: 47 against 22
// MiB on a 100,000-event backlog); a given --max-in-flight wins. The stop line names
// the limits in force.
TEST(RelayOnRabbitMq, InFlightLimitIsTenThousandUnlessGiven) {
  RabbitHarness h;
  h.StartRelay();
  ASSERT_EQ(h.StopRelay(), 0) << h.relay().Log();
  EXPECT_THAT(h.relay().Log(), HasSubstr("(limits 10000, 67108864)"));
  h.StartRelay({"--max-in-flight", "500"});
  ASSERT_EQ(h.StopRelay(), 0) << h.relay().Log();
  EXPECT_THAT(h.relay().Log(), HasSubstr("(limits 500, 67108864)"));
}

TEST(RelayOnRabbitMq, EnvelopeFormatSetsItsContentType) {
  RabbitHarness h;
  h.StartRelay({"--format", "envelope"});
  h.Insert("e", "{}");
  h.ExpectEverythingOnceInOrder(absl::Seconds(60));
  ASSERT_EQ(h.messages().size(), 1u);
  EXPECT_EQ(h.messages()[0].content_type, "application/vnd.outboxd.envelope+json");
  EXPECT_THAT(h.messages()[0].body, HasSubstr("\"payload\""));
}

// No queue bound for one routing key, and a payload over max_message_size: both are
// dead letters (with the reason), the relay goes on, and `dead-letter replay --sink
// rabbitmq` delivers them once a queue is bound and the limit allows.
TEST(RelayOnRabbitMq, UnroutableAndOversizedEventsAreDeadLetteredAndReplay) {
  RabbitHarness h(AmqpNode::Shared(), VhostKind::kShared, kType);
  h.StartRelay({"--topic", "{type}"});
  h.db().Exec(
      "INSERT INTO outbox (aggregate_id, tipo, payload) VALUES "
      "('u', 'fatura.paga', '{\"n\":1}'), ('ok', 'pedido.confirmado', '{\"n\":2}')");
  h.InsertOversized("big");
  h.Insert("ok", R"({"n":3})");
  ASSERT_TRUE(h.DeadLettersReach(2));
  EXPECT_EQ(h.db().Scalar("SELECT error FROM outbox_dead_letter WHERE aggregate_id = 'u'"),
            "no queue bound for routing key fatura.paga");
  EXPECT_THAT(h.db().Scalar("SELECT error FROM outbox_dead_letter WHERE aggregate_id = 'big'"),
              HasSubstr("max"));
  WaitUntil(absl::Seconds(60), [&] {
    h.Take();
    return h.BodiesOf("ok").size() >= 2;
  });
  EXPECT_THAT(h.BodiesOf("ok"), ::testing::ElementsAre(R"({"n": 2})", R"({"n": 3})"));

  // Fixed: a queue for fatura.paga (bound on the same exchange).
  h.broker().BindQueue(h.broker().Name("outboxd"), h.broker().Name("faturas"), "fatura.#");
  std::string output;
  EXPECT_EQ(h.Replay(&output, {"--aggregate", "u"}), 0) << output;
  EXPECT_THAT(output, ::testing::Not(HasSubstr("guest:guest")));
  std::vector<AmqpMessage> faturas = h.broker().Drain(h.broker().Name("faturas"));
  ASSERT_EQ(faturas.size(), 1u);
  EXPECT_EQ(faturas[0].body, R"({"n": 1})");
  EXPECT_EQ(faturas[0].type, "fatura.paga");
  // The oversized one stays, still refused, with its reason.
  EXPECT_EQ(h.Replay(&output), 1) << output;
  EXPECT_EQ(h.db().Scalar("SELECT aggregate_id FROM outbox_dead_letter"), "big");
}

// basic.return of an event comes after the broker routed what the relay published
// behind it on the channel. Its aggregate's later events, in the same transaction,
// must not reach the queue before it: they are dead-lettered right behind it, and a
// replay delivers the three in order (scripts/chaos --sink rabbitmq counted order
// violations here while the sink published them at once).
TEST(RelayOnRabbitMq, AReturnedEventsFollowersWaitBehindItAndReplayInOrder) {
  RabbitHarness h(AmqpNode::Shared(), VhostKind::kShared, "pedido.#");
  h.StartRelay({"--topic", "{type}"});
  h.db().Exec(
      "INSERT INTO outbox (aggregate_id, tipo, payload) VALUES "
      "('a', 'fatura.paga', '{\"n\":1}'), ('a', 'pedido.confirmado', '{\"n\":2}'), "
      "('b', 'pedido.confirmado', '{\"n\":3}'), ('a', 'pedido.confirmado', '{\"n\":4}')");
  ASSERT_TRUE(h.DeadLettersReach(3));
  EXPECT_EQ(h.db().Scalar("SELECT string_agg(payload, ' ' ORDER BY seq) FROM outbox_dead_letter "
                          "WHERE aggregate_id = 'a'"),
            R"({"n": 1} {"n": 2} {"n": 4})")
      << h.relay().Log();
  EXPECT_EQ(h.db().Scalar("SELECT error FROM outbox_dead_letter ORDER BY seq LIMIT 1"),
            "no queue bound for routing key fatura.paga");
  WaitUntil(absl::Seconds(60), [&] {
    h.Take();
    return !h.BodiesOf("b").empty();
  });
  EXPECT_THAT(h.BodiesOf("b"), ::testing::ElementsAre(R"({"n": 3})"));
  EXPECT_THAT(h.BodiesOf("a"), ::testing::IsEmpty()) << "a follower overtook the returned event";

  // Fixed: the queue takes fatura.paga too; the replay delivers a's events in order.
  h.broker().BindQueue(h.broker().Name("outboxd"), h.queue(), "fatura.#");
  std::string output;
  EXPECT_EQ(h.Replay(&output, {"--aggregate", "a"}), 0) << output;
  h.Take();
  EXPECT_THAT(h.BodiesOf("a"), ::testing::ElementsAre(R"({"n": 1})", R"({"n": 2})", R"({"n": 4})"));
  EXPECT_EQ(h.db().Scalar("SELECT count(*) FROM outbox_dead_letter"), "0");
}

// An event over the node's max_message_size is a dead letter; once the limit is
// raised (a node of the test's own: the limit is node-wide), `dead-letter replay
// --sink rabbitmq` delivers it, and the aggregate's event parked behind it.
TEST(RelayOnRabbitMq, AnOversizedDeadLetterReplaysOnceTheLimitIsRaised) {
  std::unique_ptr<AmqpNode> node = AmqpNode::StartPrivate();
  RabbitHarness h(*node);
  h.StartRelay();
  h.InsertOversized("big");
  ASSERT_TRUE(h.DeadLettersReach(1));
  // Committed after it: parked behind it, as with Kafka.
  h.Insert("big", R"({"after": true})");
  ASSERT_TRUE(h.DeadLettersReach(2));
  node->Ctl({"eval", "application:set_env(rabbit, max_message_size, 4194304)."});
  std::string output;
  EXPECT_EQ(h.Replay(&output), 0) << output;
  EXPECT_EQ(h.db().Scalar("SELECT count(*) FROM outbox_dead_letter"), "0");
  EXPECT_EQ(h.ExpectEverythingOnceInOrder(absl::Seconds(60)), 0u);
  ASSERT_EQ(h.messages().size(), 2u);
  EXPECT_GT(h.messages()[0].body.size(), 1572864u);
  EXPECT_EQ(h.messages()[1].body, R"({"after": true})");
}

// `rabbitmqctl close_all_connections` three times under load: 0 lost, order kept,
// and the slot never confirmed past an event the queue did not hold yet.
TEST(RelayOnRabbitMq, ClosedConnectionsUnderLoadLoseNothingAndNeverConfirmAhead) {
  RabbitHarness h(AmqpNode::Shared(), VhostKind::kOwn);
  h.StartRelay({"--feedback-interval", "1s"});
  Load load(h.db().conninfo());
  AheadCheck ahead;
  for (int round = 0; round < 3; ++round) {
    ahead.Sample(h, 3);
    h.broker().Ctl({"close_all_connections", "-p", h.broker().vhost(), "test"});
    ahead.Sample(h, 3);
  }
  StopLoadAndExpectNothingLost(h, load, &ahead);
  EXPECT_THAT(h.relay().Log(), HasSubstr("reconnected to RabbitMQ"));
}

// kill -9 of the RabbitMQ node under load, then a restart on the same data: the
// relay waits, publishes the unconfirmed again in order; 0 lost.
TEST(RelayOnRabbitMq, KillNineOfTheNodeUnderLoadLosesNothing) {
  std::unique_ptr<AmqpNode> node = AmqpNode::StartPrivate();
  RabbitHarness h(*node);
  h.StartRelay();
  Load load(h.db().conninfo());
  AheadCheck ahead;
  ahead.Sample(h, 3);
  std::string output;
  ASSERT_EQ(RunCommand(std::string(OUTBOXD_SOURCE_DIR) + "/scripts/rabbitmq kill " + node->dir(),
                       &output),
            0)
      << output;
  ASSERT_TRUE(h.relay().WaitForLog("RabbitMQ connection lost", absl::Seconds(30)))
      << h.relay().Log();
  const pg::Lsn confirmed_down = h.ConfirmedFlushLsn();
  ASSERT_EQ(RunCommand(std::string(OUTBOXD_SOURCE_DIR) + "/scripts/rabbitmq restart " + node->dir(),
                       &output),
            0)
      << output;
  ASSERT_TRUE(h.relay().WaitForLog("reconnected to RabbitMQ", absl::Seconds(60)))
      << h.relay().Log();
  ahead.Sample(h, 3);
  StopLoadAndExpectNothingLost(h, load, &ahead);
  EXPECT_GT(h.ConfirmedFlushLsn(), confirmed_down);
}

// A memory alarm held 10 s: the relay stops reading (received_lsn stays behind what
// was committed meanwhile) but keeps sending feedback (the walsender's reply_time
// moves) without confirming the slot past what the queue holds; once lifted,
// everything arrives, in order.
TEST(RelayOnRabbitMq, AMemoryAlarmPausesReadingKeepsFeedbackAndLosesNothing) {
  std::unique_ptr<AmqpNode> node = AmqpNode::StartPrivate();
  RabbitHarness h(*node);
  h.StartRelay({"--feedback-interval", "1s"});
  Load load(h.db().conninfo());
  AheadCheck ahead;
  ASSERT_TRUE(load.WaitForMore(200));  // traffic flowing before the alarm
  node->Ctl({"set_vm_memory_high_watermark", "0.0000001"});
  ASSERT_TRUE(h.relay().WaitForLog("RabbitMQ blocked the connection", absl::Seconds(30)))
      << h.relay().Log();
  const std::string reply_sql =
      "SELECT extract(epoch FROM r.reply_time) FROM pg_stat_replication r JOIN "
      "pg_replication_slots s ON s.active_pid = r.pid WHERE s.slot_name = '" +
      h.db().name() + "'";
  const std::string reply_before = h.db().Scalar(reply_sql);
  auto received_lsn = [&h]() {
    return MetricValue(HttpGetFromLog(h.relay(), "/metrics").second, "outboxd_received_lsn");
  };
  // The alarm is held while the load commits 3,000 more transactions (about 10 s).
  // Once the relay is stuck on the blocked connection (after the first 500), it reads
  // nothing more from the WAL while the load goes on committing.
  ASSERT_TRUE(load.WaitForMore(500));
  ahead.Sample(h);
  const std::optional<double> received_early = received_lsn();
  const pg::Lsn wal_early = pg::ParseLsn(h.db().Scalar("SELECT pg_current_wal_lsn()")).value_or(0);
  ASSERT_TRUE(load.WaitForMore(2500));
  ahead.Sample(h);
  const std::optional<double> received_late = received_lsn();
  const pg::Lsn wal_late = pg::ParseLsn(h.db().Scalar("SELECT pg_current_wal_lsn()")).value_or(0);
  const std::string reply_after = h.db().Scalar(reply_sql);
  EXPECT_GT(std::stod(reply_after), std::stod(reply_before)) << "no feedback during the alarm";
  ASSERT_TRUE(received_early.has_value() && received_late.has_value());
  EXPECT_GT(wal_late, wal_early) << "the load stopped committing";
  EXPECT_EQ(*received_late, *received_early) << "reading went on while blocked";
  node->Ctl({"set_vm_memory_high_watermark", "0.4"});
  ASSERT_TRUE(h.relay().WaitForLog("RabbitMQ unblocked the connection", absl::Seconds(60)))
      << h.relay().Log();
  ahead.Sample(h, 3);
  StopLoadAndExpectNothingLost(h, load, &ahead);
  EXPECT_TRUE(h.relay().Running());
}

// kill -9 of the relay under load, three times: the next one resumes from the slot;
// 0 lost, order per aggregate kept.
TEST(RelayOnRabbitMq, KillNineOfTheRelayUnderLoadLosesNothing) {
  RabbitHarness h;
  h.StartRelay();
  Load load(h.db().conninfo());
  for (int k = 0; k < 3; ++k) {
    ASSERT_TRUE(load.WaitForMore(150));  // the relay has been publishing a while
    h.relay().Signal(SIGKILL);
    ASSERT_EQ(h.relay().Wait(absl::Seconds(10)), 128 + SIGKILL);
    h.StartRelay();
  }
  StopLoadAndExpectNothingLost(h, load, /*ahead=*/nullptr);
}

// Competing consumers with per-aggregate order (docs/usage.md, "RabbitMQ instead of
// Kafka"): outboxd's exchange feeds an x-consistent-hash exchange hashing the aggregate_id header into
// four queues, one consumer each. Every aggregate's events land in one queue only,
// in commit order.
TEST(RelayOnRabbitMq, AConsistentHashExchangeKeepsEachAggregateInOneQueueInOrder) {
  RabbitHarness h(AmqpNode::Shared(), VhostKind::kOwn, /*binding=*/"");
  const std::string hash = h.broker().Name("by_aggregate");
  const std::string prefix = h.broker().Name("worker");
  std::string output;
  ASSERT_EQ(RunCommand("/usr/bin/python3 " + std::string(OUTBOXD_SOURCE_DIR) +
                           "/tests/support/amqp_peer.py hash '" + h.broker().url() + "' " +
                           h.broker().Name("outboxd") + " " + hash + " " + prefix + " 4",
                       &output),
            0)
      << output;
  h.StartRelay({"--no-declare"});
  for (int tx = 0; tx < 20; ++tx) {
    h.db().Exec(
        absl::StrCat("INSERT INTO outbox (aggregate_id, tipo, payload) SELECT 'agg-' || (g % 20), "
                     "'pedido.confirmado', json_build_object('tx', ",
                     tx, ", 'g', g)::jsonb FROM generate_series(1, 20) g"));
  }
  std::vector<RabbitHarness::Row> rows = h.Rows();
  std::map<std::string, int64_t> seq_of;
  for (const RabbitHarness::Row& row : rows) seq_of[row.id] = row.seq;
  std::map<std::string, std::set<int>> queues_of;  // aggregate -> queues it landed in
  std::map<std::string, int64_t> last_seq;
  std::set<int> used;
  size_t got = 0;
  WaitUntil(absl::Seconds(60), [&] {
    for (int q = 0; q < 4; ++q) {
      for (const AmqpMessage& m : h.broker().Drain(prefix + std::to_string(q))) {
        ++got;
        const std::string aggregate = RabbitHarness::Header(m, "aggregate_id");
        queues_of[aggregate].insert(q);
        used.insert(q);
        auto [it, fresh] = last_seq.emplace(aggregate, seq_of[m.message_id]);
        if (!fresh) {
          EXPECT_LT(it->second, seq_of[m.message_id]) << "aggregate " << aggregate;
          it->second = seq_of[m.message_id];
        }
      }
    }
    return got >= rows.size();
  });
  EXPECT_EQ(got, rows.size());
  EXPECT_EQ(queues_of.size(), 20u);
  for (const auto& [aggregate, queues] : queues_of) {
    EXPECT_EQ(queues.size(), 1u) << "aggregate " << aggregate << " split across queues";
  }
  EXPECT_GE(used.size(), 2u) << "the hash spread nothing";
}

// amqps:// with the node's CA, the URL (with its password) from --amqp-url-file:
// events arrive, and neither the password nor the file's URL reaches the log.
TEST(RelayOnRabbitMq, OverTlsWithTheUrlFromAFileAndNoPasswordInTheLog) {
  RabbitHarness h;
  const AmqpNode& node = AmqpNode::Shared();
  ASSERT_FALSE(node.tls_url().empty()) << "OUTBOXD_TEST_AMQPS not set (scripts/rabbitmq)";
  // The shared node's TLS URL names vhost "/", where the harness's queue is bound.
  char path[] = "/tmp/outboxd-amqp-url.XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  const std::string url = node.tls_url() + "\n";
  ASSERT_EQ(write(fd, url.data(), url.size()), static_cast<ssize_t>(url.size()));
  close(fd);
  std::vector<std::string> args = {
      BinPath("outboxd"), "run",          "--pg",       h.db().conninfo(),         "--slot",
      h.db().name(),      "--sink",       "rabbitmq",   "--amqp-url-file",         path,
      "--amqp-ca-file",   node.ca_file(), "--exchange", h.broker().Name("outboxd")};
  auto relay = ChildProcess::Start(args);
  ASSERT_TRUE(relay->WaitForAnyLog(kRelayReadsSlot, absl::Seconds(60))) << relay->Log();
  h.Insert("t", "{}");
  EXPECT_EQ(h.ExpectEverythingOnceInOrder(absl::Seconds(60)), 0u);
  EXPECT_EQ(h.messages().size(), 1u);
  relay->Signal(SIGTERM);
  EXPECT_EQ(relay->Wait(absl::Seconds(60)), 0);
  EXPECT_THAT(relay->Log(), HasSubstr("RabbitMQ amqps://localhost:"));
  EXPECT_THAT(relay->Log(), ::testing::Not(HasSubstr("guest:guest")));
  unlink(path);
}

TEST(PollOnRabbitMq, EveryPendingEventArrivesAndIsMarkedPublished) {
  RabbitHarness h;
  h.InsertSeries("p", 3, 1, 50);
  std::unique_ptr<ChildProcess> poll = h.StartOutboxd(h.WithSink({"poll", "--interval", "100ms"}));
  EXPECT_EQ(h.ExpectEverythingOnceInOrder(absl::Seconds(60)), 0u) << poll->Log();
  const auto pending = [&] {
    return h.db().Scalar("SELECT count(*) FROM outbox WHERE publicado_em IS NULL");
  };
  EXPECT_TRUE(WaitUntil(absl::Seconds(30), [&] { return pending() == "0"; }))
      << pending() << " pending\n"
      << poll->Log();
  EXPECT_EQ(RabbitHarness::Header(h.messages()[0], "lsn"), "");
  poll->Signal(SIGTERM);
  EXPECT_EQ(poll->Wait(absl::Seconds(60)), 0) << poll->Log();
}

TEST(RelayOnRabbitMq, ConfigurationErrorsEndTheStartWithExitTwoAndNoPassword) {
  RabbitHarness h;
  std::string output;
  std::string wrong = h.broker().url();
  wrong.replace(wrong.find("guest:guest"), 11, "guest:not-the-password");
  EXPECT_EQ(h.Outboxd({"run", "--pg", h.db().conninfo(), "--slot", h.db().name(), "--sink",
                       "rabbitmq", "--amqp-url", wrong},
                      &output),
            2);
  EXPECT_THAT(output, HasSubstr("check the user and password"));
  EXPECT_THAT(output, ::testing::Not(HasSubstr("not-the-password")));
  EXPECT_EQ(h.Outboxd({"run", "--pg", h.db().conninfo(), "--sink", "rabbitmq"}, &output), 2);
  EXPECT_THAT(output, HasSubstr("--sink rabbitmq needs --amqp-url"));
  EXPECT_EQ(h.Outboxd({"run", "--pg", h.db().conninfo()}, &output), 2);
  EXPECT_THAT(output, HasSubstr("--brokers is required"));
  EXPECT_EQ(h.Outboxd({"run", "--pg", h.db().conninfo(), "--slot", h.db().name(), "--sink",
                       "rabbitmq", "--amqp-url", h.broker().url(), "--exchange",
                       h.broker().Name("missing"), "--no-declare"},
                      &output),
            2);
  EXPECT_THAT(output, HasSubstr("declare it as a durable topic exchange"));
}

}  // namespace
}  // namespace outboxd::test
