// inbox::Process on the real PostgreSQL: the mark and the effect commit together or
// not at all (the seed's `consumir`), whatever the handler does.
#include "inbox/inbox.h"

#include <libpq-fe.h>

#include <atomic>
#include <thread>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "support/set_up_database.h"
#include "support/wait_until.h"

namespace outboxd::inbox {
namespace {

constexpr char kId[] = "0b1f6a52-6d8c-4a39-9c1e-3f1d2a7c9e10";

class InboxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    db_ = test::CreateSetUpDatabase();
    db_->Exec("CREATE TABLE efeitos (message_id uuid, valor text)");
  }

  Message Msg(const std::string& id = kId) {
    return Message{.id = id, .topic = "pedido.confirmado", .value = R"({"pedidoId":"p1"})"};
  }
  int64_t Count(const std::string& table) {
    return std::stoll(db_->Scalar("SELECT count(*) FROM " + table));
  }

  // The effect: one row per run, written on the inbox transaction's connection.
  Handler Effect(int* runs) {
    return [runs](pg::Connection& conn, const Message& m) {
      ++*runs;
      return conn.ExecParams("INSERT INTO efeitos VALUES ($1, $2)", {m.id, m.value}).status();
    };
  }

  // The first delivery ran the effect, the second was recognised: one run, one row.
  void ExpectProcessedThenDuplicate(const absl::StatusOr<Outcome>& first,
                                    const absl::StatusOr<Outcome>& second, int runs) {
    ASSERT_TRUE(first.ok()) << first.status();
    ASSERT_TRUE(second.ok()) << second.status();
    EXPECT_EQ(*first, Outcome::kProcessed);
    EXPECT_EQ(*second, Outcome::kDuplicate);
    EXPECT_EQ(runs, 1);
    EXPECT_EQ(Count("efeitos"), 1);
  }

  std::unique_ptr<test::TestDatabase> db_;
};

TEST_F(InboxTest, DuplicateDeliveryIsDiscardedAndTheEffectHappensOnce) {
  pg::Connection conn = db_->Connect();
  int runs = 0;
  absl::StatusOr<Outcome> first = Process(conn, Msg(), Effect(&runs));
  absl::StatusOr<Outcome> second = Process(conn, Msg(), Effect(&runs));
  ExpectProcessedThenDuplicate(first, second, runs);
  EXPECT_EQ(db_->Scalar("SELECT message_id FROM inbox"), kId);
  EXPECT_EQ(PQtransactionStatus(conn.get()), PQTRANS_IDLE);
}

TEST_F(InboxTest, HandlerErrorRollsBackTheMarkSoTheRetrySucceeds) {
  pg::Connection conn = db_->Connect();
  int runs = 0;
  Handler flaky = [&](pg::Connection& c, const Message& m) -> absl::Status {
    absl::Status wrote = Effect(&runs)(c, m);  // the effect is written, then the handler fails
    if (runs == 1) return absl::UnavailableError("invoicing API down");
    return wrote;
  };
  absl::StatusOr<Outcome> failed = Process(conn, Msg(), flaky);
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(failed.status().message(), "handler failed: invoicing API down");
  EXPECT_EQ(Count("inbox"), 0) << "a failed message must not look processed";
  EXPECT_EQ(Count("efeitos"), 0);

  absl::StatusOr<Outcome> retried = Process(conn, Msg(), flaky);
  ASSERT_TRUE(retried.ok()) << retried.status();
  EXPECT_EQ(*retried, Outcome::kProcessed);
  EXPECT_EQ(Count("inbox"), 1);
  EXPECT_EQ(Count("efeitos"), 1);
}

TEST_F(InboxTest, SqlErrorInTheHandlerRollsBackEverything) {
  pg::Connection conn = db_->Connect();
  Handler bad = [](pg::Connection& c, const Message&) {
    return c.Exec("INSERT INTO tabela_que_nao_existe VALUES (1)").status();
  };
  absl::StatusOr<Outcome> outcome = Process(conn, Msg(), bad);
  EXPECT_EQ(outcome.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(pg::SqlStateOf(outcome.status()), "42P01");
  EXPECT_EQ(Count("inbox"), 0);
  EXPECT_EQ(PQtransactionStatus(conn.get()), PQTRANS_IDLE) << "the connection stays usable";
}

// A handler that swallows an SQL error would otherwise reach COMMIT, which PostgreSQL
// answers with "ROLLBACK" and no error: the message would look processed, unmarked.
TEST_F(InboxTest, HandlerThatSwallowsAnSqlErrorIsAFailure) {
  pg::Connection conn = db_->Connect();
  Handler swallowing = [](pg::Connection& c, const Message&) {
    (void)c.Exec("SELECT 1/0");
    return absl::OkStatus();
  };
  absl::StatusOr<Outcome> outcome = Process(conn, Msg(), swallowing);
  EXPECT_EQ(outcome.status().code(), absl::StatusCode::kFailedPrecondition) << outcome.status();
  EXPECT_EQ(Count("inbox"), 0);
}

TEST_F(InboxTest, HandlerThatCommitsItselfIsAFailure) {
  pg::Connection conn = db_->Connect();
  Handler committing = [](pg::Connection& c, const Message&) { return c.Exec("COMMIT").status(); };
  absl::StatusOr<Outcome> outcome = Process(conn, Msg(), committing);
  EXPECT_EQ(outcome.status().code(), absl::StatusCode::kFailedPrecondition) << outcome.status();
}

TEST_F(InboxTest, IdThatIsNotAUuidIsRejectedBeforeAnyTransaction) {
  pg::Connection conn = db_->Connect();
  int runs = 0;
  for (const std::string id : {"", "pedido-1", "0b1f6a52-6d8c-4a39-9c1e-3f1d2a7c9e1"}) {
    absl::StatusOr<Outcome> outcome = Process(conn, Msg(id), Effect(&runs));
    EXPECT_EQ(outcome.status().code(), absl::StatusCode::kInvalidArgument) << id;
  }
  EXPECT_EQ(runs, 0);
  EXPECT_TRUE(IsUuid("0B1F6A52-6D8C-4A39-9C1E-3F1D2A7C9E10"));
}

TEST_F(InboxTest, RefusesAConnectionAlreadyInATransaction) {
  pg::Connection conn = db_->Connect();
  ASSERT_TRUE(conn.Exec("BEGIN").ok());
  int runs = 0;
  EXPECT_EQ(Process(conn, Msg(), Effect(&runs)).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

// Two consumers handed the same message at once (a rebalance mid-processing): the
// second waits on the first's uncommitted mark, then finds it and skips.
TEST_F(InboxTest, ConcurrentDeliveriesOfOneIdRunTheEffectOnce) {
  pg::Connection first_conn = db_->Connect();
  pg::Connection second_conn = db_->Connect();
  const std::string second_pid =
      std::string(second_conn.Exec("SELECT pg_backend_pid()")->Get(0, 0));
  std::atomic<int> runs{0};
  std::atomic<bool> first_inside{false};
  Handler slow = [&](pg::Connection& c, const Message& m) {
    if (++runs == 1) {
      first_inside = true;
      // The second delivery arrives meanwhile and waits on this one's mark.
      EXPECT_TRUE(test::WaitUntil(absl::Seconds(30), [&] {
        return db_->Scalar("SELECT wait_event_type FROM pg_stat_activity WHERE pid = " +
                           second_pid) == "Lock";
      })) << "the second delivery never waited on the first's mark";
    }
    return c.ExecParams("INSERT INTO efeitos VALUES ($1, 'x')", {m.id}).status();
  };
  absl::StatusOr<Outcome> first;
  std::thread t([&] { first = Process(first_conn, Msg(), slow); });
  ASSERT_TRUE(test::WaitUntil(
      absl::Seconds(30), [&] { return first_inside.load(); }, absl::Milliseconds(5)));
  absl::StatusOr<Outcome> second = Process(second_conn, Msg(), slow);
  t.join();
  ExpectProcessedThenDuplicate(first, second, runs);
}

}  // namespace
}  // namespace outboxd::inbox
