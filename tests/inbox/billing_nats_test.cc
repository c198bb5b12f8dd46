// The example billing service on NATS JetStream, the real binaries end to end:
// `outboxd run --sink nats` relays confirmed orders from the outbox, and
// `outboxd-example-billing --sink nats` bills each one once through the inbox from a
// durable JetStream consumer, across three kill -9s mid-stream and restarts: what the
// killed one had fetched and not acked comes again after the ack wait and is billed
// once (or skipped, when its COMMIT had landed before the kill). The server is the
// test's own and requires a password, which both binaries read from a secret file
// and never print. The service logs the trace id of each event that carries a W3C
// traceparent (issue 32): the writer's trace, set with SET LOCAL, reaches it.
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "support/child_process.h"
#include "support/jetstream_client.h"
#include "support/set_up_database.h"
#include "support/wait_until.h"

namespace outboxd::test {
namespace {

constexpr char kPassword[] = "s3cr3t-billing";

class BillingNatsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (TestNatsUrl().empty()) GTEST_FAIL() << kNoTestNats;
    db_ = CreateSetUpDatabase();
    server_ = std::make_unique<PrivateNatsServer>(
        absl::StrCat("'authorization { user: billing, password: ", kPassword, " }'"));
    char path[] = "/tmp/outboxd-nats-url.XXXXXX";
    const int fd = mkstemp(path);  // 0600: a secret file as it should be
    ASSERT_GE(fd, 0);
    const std::string url =
        absl::StrCat("nats://billing:", kPassword, "@", server_->url().substr(7));
    ASSERT_EQ(write(fd, url.data(), url.size()), static_cast<ssize_t>(url.size()));
    close(fd);
    url_file_ = path;
  }
  void TearDown() override {
    for (ChildProcess* p : {billing_.get(), relay_.get()}) {
      if (p != nullptr && p->Running()) {
        p->Signal(SIGTERM);
        EXPECT_EQ(p->Wait(absl::Seconds(60)), 0) << p->Log();
        EXPECT_EQ(p->Log().find(kPassword), std::string::npos) << p->Log();
      }
    }
    if (!url_file_.empty()) unlink(url_file_.c_str());
  }

  // A short ack wait: what a killed consumer held comes again within seconds.
  void StartBilling() {
    billing_ =
        ChildProcess::Start({BinPath("outboxd-example-billing"), "--pg", db_->conninfo(), "--sink",
                             "nats", "--nats-url-file", url_file_, "--stream", "BILLING", "--topic",
                             "loja.pedido.confirmado", "--group", "billing", "--ack-wait", "2s"});
  }

  // Orders pedido-FROM .. pedido-TO-1, each one confirmed event, in one transaction.
  void Confirm(int from, int to) {
    db_->Exec(absl::StrCat(
        "INSERT INTO outbox (aggregate_id, tipo, payload) SELECT 'pedido-' || n, "
        "'pedido.confirmado', jsonb_build_object('pedidoId', 'pedido-' || n, 'clienteId', "
        "'c-1', 'totalCentavos', 1990) FROM generate_series(",
        from, ", ", to - 1, ") AS n"));
  }

  int64_t Invoices() { return std::stoll(db_->Scalar("SELECT count(*) FROM faturas")); }
  int64_t Orders() {
    return std::stoll(db_->Scalar("SELECT count(DISTINCT pedido_id) FROM faturas"));
  }

  std::unique_ptr<TestDatabase> db_;
  std::unique_ptr<PrivateNatsServer> server_;
  std::string url_file_;
  std::unique_ptr<ChildProcess> billing_;
  std::unique_ptr<ChildProcess> relay_;
};

TEST_F(BillingNatsTest, EveryConfirmedOrderIsBilledOnceAcrossKills) {
  // Started before the relay: it waits for the stream the relay creates.
  StartBilling();
  ASSERT_TRUE(billing_->WaitForLog("does not exist", absl::Seconds(60))) << billing_->Log();
  relay_ =
      ChildProcess::Start({BinPath("outboxd"), "run", "--pg", db_->conninfo(), "--slot",
                           db_->name(), "--sink", "nats", "--nats-url-file", url_file_, "--stream",
                           "BILLING", "--topic", "loja.{type}", "--metrics", "127.0.0.1:0"});
  Confirm(0, 20);
  ASSERT_TRUE(WaitUntil(absl::Seconds(60), [&] { return Invoices() >= 20; })) << billing_->Log();

  // Three crashes mid-stream: 200 orders each, the consumer killed once it has billed
  // 20 of them, 20 more confirmed while it is down.
  int confirmed = 20;
  for (int round = 0; round < 3; ++round) {
    Confirm(confirmed, confirmed + 200);
    ASSERT_TRUE(WaitUntil(absl::Seconds(60), [&] { return Orders() >= confirmed + 20; }))
        << billing_->Log();
    billing_->Signal(SIGKILL);
    billing_->Wait(absl::Seconds(10));
    const int64_t at_kill = Orders();
    Confirm(confirmed + 200, confirmed + 220);
    confirmed += 220;
    std::printf("round %d: %lld of %d orders billed at the kill\n", round,
                static_cast<long long>(at_kill), confirmed);
    EXPECT_EQ(billing_->Log().find(kPassword), std::string::npos);
    StartBilling();
    ASSERT_TRUE(WaitUntil(absl::Seconds(60), [&] { return Orders() >= confirmed; }))
        << billing_->Log();
  }
  EXPECT_EQ(Invoices(), confirmed) << "an order billed twice";
  EXPECT_NE(billing_->Log().find("processed pedido-"), std::string::npos) << billing_->Log();
}

// The writer sets its trace context for the transaction; the headers column's default
// captures it, the relay publishes it as a NATS header, the inbox hands it to the
// service, which logs the trace id; an order without one is logged without.
TEST_F(BillingNatsTest, TheServiceLogsTheTraceIdTheWriterSet) {
  auto setup = ChildProcess::Start({BinPath("outboxd"), "setup", "--pg", db_->conninfo(), "--slot",
                                    db_->name(), "--headers-column", "headers"});
  ASSERT_EQ(setup->Wait(absl::Seconds(60)), 0) << setup->Log();
  StartBilling();  // it waits for the stream the relay creates
  ASSERT_TRUE(billing_->WaitForLog("does not exist", absl::Seconds(60))) << billing_->Log();
  relay_ = ChildProcess::Start({BinPath("outboxd"), "run", "--pg", db_->conninfo(), "--slot",
                                db_->name(), "--sink", "nats", "--nats-url-file", url_file_,
                                "--stream", "BILLING", "--topic", "loja.{type}", "--metrics",
                                "127.0.0.1:0", "--headers-column", "headers"});
  db_->Exec(
      "BEGIN; SET LOCAL outboxd.traceparent = "
      "'00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'; "
      "INSERT INTO outbox (aggregate_id, tipo, payload) VALUES ('pedido-traced', "
      "'pedido.confirmado', '{\"pedidoId\": \"pedido-traced\", \"clienteId\": \"c-1\", "
      "\"totalCentavos\": 1990}'); COMMIT");
  Confirm(0, 1);
  ASSERT_TRUE(WaitUntil(absl::Seconds(60), [&] { return Invoices() >= 2; })) << billing_->Log();
  ASSERT_TRUE(billing_->WaitForLog("trace 4bf92f3577b34da6a3ce929d0e0e4736", absl::Seconds(10)))
      << billing_->Log();
  const std::string log = billing_->Log();
  const size_t plain = log.find("processed pedido-0 message");
  ASSERT_NE(plain, std::string::npos) << log;
  EXPECT_EQ(log.substr(plain, log.find('\n', plain) - plain).find("trace"), std::string::npos)
      << log;
}

}  // namespace
}  // namespace outboxd::test
