// The example billing service on RabbitMQ, the real binaries end to end:
// `outboxd run --sink rabbitmq` relays confirmed orders from the outbox, and
// `outboxd-example-billing --sink rabbitmq` bills each one once through the inbox,
// including after it is killed -9 and started again (what it had not acked comes
// again and is skipped, never billed twice).
#include <csignal>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "support/amqp_fixture.h"
#include "support/child_process.h"
#include "support/set_up_database.h"
#include "support/wait_until.h"

namespace outboxd::test {
namespace {

class BillingRabbitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    db_ = CreateSetUpDatabase();
    broker_ = TestBroker::Create(VhostKind::kOwn);
  }
  void TearDown() override {
    for (ChildProcess* p : {billing_.get(), relay_.get()}) {
      if (p != nullptr && p->Running()) {
        p->Signal(SIGTERM);
        EXPECT_EQ(p->Wait(absl::Seconds(60)), 0) << p->Log();
      }
    }
  }

  void StartBilling() {
    billing_ =
        ChildProcess::Start({BinPath("outboxd-example-billing"), "--pg", db_->conninfo(), "--sink",
                             "rabbitmq", "--amqp-url", broker_->url(), "--exchange",
                             broker_->Name("outboxd"), "--group", broker_->Name("billing")});
  }

  // Orders pedido-FROM .. pedido-TO-1, each one confirmed event.
  void Confirm(int from, int to) {
    for (int n = from; n < to; ++n) {
      db_->Exec(absl::StrCat("INSERT INTO outbox (aggregate_id, tipo, payload) VALUES ('pedido-", n,
                             "', 'pedido.confirmado', '{\"pedidoId\": \"pedido-", n,
                             "\", \"clienteId\": \"c-1\", \"totalCentavos\": 1990}')"));
    }
  }

  int64_t Invoices() { return std::stoll(db_->Scalar("SELECT count(*) FROM faturas")); }
  int64_t Orders() {
    return std::stoll(db_->Scalar("SELECT count(DISTINCT pedido_id) FROM faturas"));
  }

  std::unique_ptr<TestDatabase> db_;
  std::unique_ptr<TestBroker> broker_;
  std::unique_ptr<ChildProcess> billing_;
  std::unique_ptr<ChildProcess> relay_;
};

TEST_F(BillingRabbitTest, EveryConfirmedOrderIsBilledOnceAcrossAKill) {
  StartBilling();
  // The queue is the billing service's: once it is bound, nothing the relay
  // publishes is unroutable.
  ASSERT_TRUE(WaitUntil(absl::Seconds(60), [&] {
    return broker_->Ctl({"list_bindings", "-p", broker_->vhost(), "--quiet"})
               .find(broker_->Name("billing")) != std::string::npos;
  })) << billing_->Log();
  relay_ =
      ChildProcess::Start({BinPath("outboxd"), "run", "--pg", db_->conninfo(), "--slot",
                           db_->name(), "--sink", "rabbitmq", "--amqp-url", broker_->url(),
                           "--exchange", broker_->Name("outboxd"), "--metrics", "127.0.0.1:0"});
  Confirm(0, 20);
  ASSERT_TRUE(WaitUntil(absl::Seconds(60), [&] { return Invoices() >= 20; })) << billing_->Log();

  // A crash mid-stream: whatever it had processed but not acked comes again. The
  // orders confirmed while it is down are the restarted one's for sure (the killed one
  // may have billed all of 20..39 before the signal landed).
  Confirm(20, 40);
  billing_->Signal(SIGKILL);
  billing_->Wait(absl::Seconds(10));
  Confirm(40, 60);
  StartBilling();
  ASSERT_TRUE(WaitUntil(absl::Seconds(60), [&] { return Orders() >= 60; })) << billing_->Log();
  EXPECT_EQ(Invoices(), 60) << "an order billed twice";
  EXPECT_NE(billing_->Log().find("processed pedido-"), std::string::npos) << billing_->Log();
}

}  // namespace
}  // namespace outboxd::test
