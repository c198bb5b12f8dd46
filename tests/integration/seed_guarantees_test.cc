// The seed article's three guarantees, each provoked for real, plus its safety net:
//   1. an order that does not change leaves no orphan event (and an error after the
//      event was added takes both back);
//   2. a broker outage loses no event, and the recovery publishes it once (`outboxd
//      run`: the slot's confirmed LSN holds through the outage, then one delivery);
//   3. a duplicate delivery is discarded by the consumer and the effect (an invoice)
//      happens once;
//   and reconciliation: `outboxd reconcile` reports an order confirmed by a "fix
//   script" that bypassed the outbox.
// Real PostgreSQL, librdkafka's mock cluster over TCP, `outboxd run` as a child process.
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "examples/billing.h"
#include "examples/orders.h"
#include "gtest/gtest.h"
#include "inbox/consumer.h"
#include "kafka/publisher.h"
#include "support/inbox_deliveries.h"
#include "support/metrics_text.h"
#include "support/relay_harness.h"
#include "support/set_up_database.h"
#include "support/wait_until.h"

namespace outboxd::test {
namespace {

using examples::ConfirmOrder;

const std::vector<std::string> kTopics = {examples::kOrderConfirmed};

// A database with the outbox and the example's pedidos table, no relay.
std::unique_ptr<TestDatabase> OrdersDatabase() {
  auto db = CreateSetUpDatabase();
  pg::Connection admin = db->Connect();
  EXPECT_TRUE(examples::EnsureOrdersTable(admin).ok());
  return db;
}

void AddOrder(pg::Connection& conn, const std::string& id, const std::string& status) {
  auto r = conn.ExecParams(
      "INSERT INTO pedidos (id, cliente_id, total_centavos, status) VALUES ($1, 'c1', 1000, $2)",
      {id, status});
  ASSERT_TRUE(r.ok()) << r.status();
}

int64_t Count(TestDatabase& db, const std::string& sql) { return std::stoll(db.Scalar(sql)); }

// "pedido ja confirmado nao deixa evento orfao"
TEST(SeedGuarantee, AlreadyConfirmedOrderLeavesNoOrphanEvent) {
  auto db = OrdersDatabase();
  pg::Connection app = db->Connect();
  AddOrder(app, "pedido-1", "confirmado");
  absl::StatusOr<std::optional<std::string>> event = ConfirmOrder(app, "pedido-1");
  ASSERT_TRUE(event.ok()) << event.status();
  EXPECT_FALSE(event->has_value());
  EXPECT_EQ(Count(*db, "SELECT count(*) FROM outbox"), 0);

  // A client's impatient retry of a pending order: one event, not two. A missing
  // order: none.
  AddOrder(app, "pedido-2", "pendente");
  absl::StatusOr<std::optional<std::string>> first = ConfirmOrder(app, "pedido-2");
  absl::StatusOr<std::optional<std::string>> retry = ConfirmOrder(app, "pedido-2");
  absl::StatusOr<std::optional<std::string>> missing = ConfirmOrder(app, "pedido-404");
  ASSERT_TRUE(first.ok() && retry.ok() && missing.ok());
  EXPECT_TRUE(first->has_value());
  EXPECT_FALSE(retry->has_value());
  EXPECT_FALSE(missing->has_value());
  EXPECT_EQ(db->Scalar("SELECT id || ' ' || aggregate_id || ' ' || tipo FROM outbox"),
            **first + " pedido-2 pedido.confirmado");
  EXPECT_EQ(db->Scalar("SELECT payload->>'totalCentavos' FROM outbox"), "1000");
}

// Both or neither, with the failure placed after the event was added: at COMMIT (a
// deferred constraint trigger: the seed's "if the COMMIT fails afterwards") and in
// the INSERT itself.
TEST(SeedGuarantee, ErrorAfterEnqueueRollsBackTheOrderAndTheEvent) {
  auto db = OrdersDatabase();
  db->Exec(R"sql(
    CREATE FUNCTION falha() RETURNS trigger LANGUAGE plpgsql AS
      $$ BEGIN RAISE EXCEPTION 'falha simulada em %', TG_NAME; END $$;
    CREATE CONSTRAINT TRIGGER no_commit AFTER INSERT ON outbox
      DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION falha())sql");
  pg::Connection app = db->Connect();
  AddOrder(app, "pedido-1", "pendente");
  absl::StatusOr<std::optional<std::string>> at_commit = ConfirmOrder(app, "pedido-1");
  EXPECT_FALSE(at_commit.ok());
  EXPECT_NE(at_commit.status().message().find("no_commit"), absl::string_view::npos)
      << at_commit.status();

  db->Exec(
      "DROP TRIGGER no_commit ON outbox; CREATE TRIGGER no_insert BEFORE INSERT ON outbox "
      "FOR EACH ROW EXECUTE FUNCTION falha()");
  absl::StatusOr<std::optional<std::string>> at_insert = ConfirmOrder(app, "pedido-1");
  EXPECT_FALSE(at_insert.ok());
  EXPECT_NE(at_insert.status().message().find("no_insert"), absl::string_view::npos)
      << at_insert.status();

  EXPECT_EQ(db->Scalar("SELECT status FROM pedidos"), "pendente");
  EXPECT_EQ(Count(*db, "SELECT count(*) FROM outbox"), 0);
  // The connection is usable again and the order confirms once the fault is gone.
  db->Exec("DROP TRIGGER no_insert ON outbox");
  absl::StatusOr<std::optional<std::string>> ok = ConfirmOrder(app, "pedido-1");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_TRUE(ok->has_value());
}

// "broker fora do ar nao perde o evento e a recuperacao publica uma vez", with the
// CDC relay: while every broker is down the slot's confirmed LSN stays before the
// order's transaction; when they return, the event arrives exactly once.
TEST(SeedGuarantee, BrokerOutageLosesNoEventAndTheRecoveryPublishesItOnce) {
  RelayHarness h(kTopics);
  pg::Connection app = h.db().Connect();
  ASSERT_TRUE(examples::EnsureOrdersTable(app).ok());
  h.StartRelay({"--feedback-interval", "1s"});
  AddOrder(app, "pedido-1", "pendente");
  ASSERT_TRUE(ConfirmOrder(app, "pedido-1").ok());
  ASSERT_TRUE(h.collector().WaitForCount(1, absl::Seconds(30))) << h.relay().Log();

  ASSERT_TRUE(h.cluster().SetAllBrokersDown().ok());
  AddOrder(app, "pedido-2", "pendente");
  absl::StatusOr<std::optional<std::string>> event = ConfirmOrder(app, "pedido-2");
  ASSERT_TRUE(event.ok() && event->has_value()) << event.status();
  // The relay holds the event, unacknowledged, and reports its position three times.
  ASSERT_TRUE(h.WaitForFeedbackWhileInFlight(1, 3, absl::Seconds(30))) << h.relay().Log();
  // Other databases on the shared cluster write WAL too, and an idle relay may confirm
  // it; what must hold is that the slot never reaches the unacknowledged commit.
  const pg::Lsn confirmed_during_outage = h.ConfirmedFlushLsn();
  EXPECT_EQ(h.collector().Count(), 1u);
  ASSERT_TRUE(h.relay().Running()) << h.relay().Log();

  ASSERT_TRUE(h.cluster().SetAllBrokersUp().ok());
  ASSERT_TRUE(h.collector().WaitForCount(2, absl::Seconds(60))) << h.relay().Log();
  EXPECT_TRUE(h.WaitForConfirmed(h.CurrentWalLsn(), absl::Seconds(15)));
  ASSERT_TRUE(h.collector().WaitUntilCaughtUp(absl::Seconds(30)));  // a second copy included
  int copies = 0;
  pg::Lsn commit = 0;
  for (const CollectedMessage& m : h.collector().Messages()) {
    if (m.Header("id") != **event) continue;
    ++copies;
    commit = pg::ParseLsn(m.Header("lsn").value_or("")).value_or(0);
  }
  EXPECT_EQ(copies, 1);
  ASSERT_NE(commit, 0u);
  EXPECT_LE(confirmed_during_outage, commit)
      << "confirmed " << pg::FormatLsn(confirmed_during_outage)
      << " past the unacknowledged commit at " << pg::FormatLsn(commit);
  EXPECT_EQ(h.collector().Count(), 2u);
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

// Sends a message again exactly as the relay did (key, value, every header).
void Redeliver(const std::string& brokers, const CollectedMessage& m) {
  auto publisher = kafka::Publisher::Create({.brokers = brokers}, nullptr);
  ASSERT_TRUE(publisher.ok()) << publisher.status();
  std::vector<kafka::Header> headers;
  for (const auto& [name, value] : m.headers) headers.push_back({name, value});
  ASSERT_TRUE((*publisher)
                  ->Produce({.topic = m.topic, .key = m.key, .value = m.value, .headers = headers})
                  .ok());
  ASSERT_TRUE((*publisher)->Flush(absl::Seconds(10)).ok());
}

// "entrega duplicada e descartada pelo consumidor", end to end: ConfirmOrder, `outboxd
// run`, Kafka, the billing consumer; the same message delivered twice bills once.
TEST(SeedGuarantee, DuplicateDeliveryIsDiscardedAndTheInvoiceIsIssuedOnce) {
  RelayHarness h(kTopics);
  pg::Connection app = h.db().Connect();
  ASSERT_TRUE(examples::EnsureOrdersTable(app).ok());
  ASSERT_TRUE(examples::EnsureInvoicesTable(app).ok());
  h.StartRelay();
  AddOrder(app, "pedido-1", "pendente");
  ASSERT_TRUE(ConfirmOrder(app, "pedido-1").ok());
  ASSERT_TRUE(h.collector().WaitForCount(1, absl::Seconds(30))) << h.relay().Log();
  Redeliver(h.cluster().bootstraps(), h.collector().Messages()[0]);
  ASSERT_TRUE(h.collector().WaitForCount(2, absl::Seconds(30)));

  auto consumer = inbox::Consumer::Create(
      h.db().Connect(),
      {.brokers = h.cluster().bootstraps(), .group_id = "billing", .topics = kTopics},
      [](pg::Connection& conn, const inbox::Message& m) {
        return examples::IssueInvoice(conn, m).status();
      });
  ASSERT_TRUE(consumer.ok()) << consumer.status();
  std::vector<inbox::Delivery> got = PollDeliveries(**consumer, 2);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].result, inbox::Delivery::Result::kProcessed);
  EXPECT_EQ(got[1].result, inbox::Delivery::Result::kDuplicate);
  EXPECT_EQ(got[0].message.id, got[1].message.id);
  EXPECT_EQ(Count(h.db(), "SELECT count(*) FROM faturas"), 1);
  EXPECT_EQ(h.db().Scalar("SELECT pedido_id || ' ' || total_centavos || ' ' || message_id "
                          "FROM faturas"),
            "pedido-1 1000 " + got[0].message.id);
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

// The seed's safety net: orders confirmed in the window cross-checked with events. A
// "fix script" that confirms an order by hand (outside ConfirmOrder) is reported.
TEST(SeedReconciliation, FixScriptThatBypassedTheOutboxIsReported) {
  RelayHarness h(kTopics);
  pg::Connection app = h.db().Connect();
  ASSERT_TRUE(examples::EnsureOrdersTable(app).ok());
  for (int i = 1; i <= 4; ++i) AddOrder(app, absl::StrCat("pedido-", i), "pendente");
  for (int i = 1; i <= 3; ++i) ASSERT_TRUE(ConfirmOrder(app, absl::StrCat("pedido-", i)).ok());
  h.db().Exec(
      "UPDATE pedidos SET status = 'confirmado', confirmado_em = now() "
      "WHERE id = 'pedido-4'");  // the fix script
  // Confirmed three days ago with its event: outside the window, neither counts.
  AddOrder(app, "pedido-old", "pendente");
  ASSERT_TRUE(ConfirmOrder(app, "pedido-old").ok());
  h.db().Exec(
      "UPDATE pedidos SET confirmado_em = now() - interval '3 days' WHERE id = "
      "'pedido-old'; UPDATE outbox SET criado_em = now() - interval '3 days' WHERE "
      "aggregate_id = 'pedido-old'");

  const std::vector<std::string> reconcile = {
      "reconcile",
      "--pg",
      h.db().conninfo(),
      "--type",
      "pedido.confirmado",
      "--since",
      "24h",
      "--expect",
      "SELECT id FROM pedidos WHERE status = 'confirmado' AND confirmado_em >= $1;"};
  std::string output;
  EXPECT_EQ(h.RunOutboxd(reconcile, &output), 1) << output;
  EXPECT_NE(output.find("pedido-4\n"), std::string::npos) << output;
  EXPECT_NE(output.find("1 of 4 expected rows"), std::string::npos) << output;
  for (const char* fine : {"pedido-1", "pedido-2", "pedido-3", "pedido-old"}) {
    EXPECT_EQ(output.find(fine), std::string::npos) << fine << " reported:\n" << output;
  }

  // Repaired by publishing the missing event through the outbox: nothing to report.
  h.db().Exec(
      "INSERT INTO outbox (aggregate_id, tipo, payload) "
      "VALUES ('pedido-4', 'pedido.confirmado', '{\"pedidoId\": \"pedido-4\"}')");
  EXPECT_EQ(h.RunOutboxd(reconcile, &output), 0) << output;
}

TEST(SeedReconciliation, BadQueryOrConfigurationExitsTwo) {
  RelayHarness h(kTopics);
  auto run = [&](const std::string& expect, const std::string& since = "24h") {
    std::string output;
    int code = h.RunOutboxd({"reconcile", "--pg", h.db().conninfo(), "--type", "pedido.confirmado",
                             "--since", since, "--expect", expect},
                            &output);
    return std::make_pair(code, output);
  };
  EXPECT_EQ(run("SELEC id FROM pedidos").first, 2);
  EXPECT_EQ(run("SELECT id FROM tabela_que_nao_existe").first, 2);
  EXPECT_EQ(run("SELECT 1; SELECT 2").first, 2);
  EXPECT_EQ(run("SELECT 'x'", "ontem").first, 2);
  // The expect query runs read-only: a reconcile can never change data.
  h.db().Exec("CREATE TABLE pedidos (id text); CREATE SEQUENCE s");
  auto [code, output] = run("SELECT nextval('s')");
  EXPECT_EQ(code, 2) << output;
  EXPECT_NE(output.find("read-only transaction"), std::string::npos) << output;
  EXPECT_EQ(run("WITH u AS (UPDATE pedidos SET id = 'y' RETURNING id) SELECT id FROM u").first, 2);
  EXPECT_EQ(h.db().Scalar("SELECT last_value FROM s"), "1");
  EXPECT_EQ(run("SELECT 'nada' WHERE false").first, 0);
}

}  // namespace
}  // namespace outboxd::test
