// ReplicationStream against a real walsender: pgoutput messages of outbox
// transactions, keepalives, feedback moving confirmed_flush_lsn, clean End(), and
// the errors for a missing or busy slot and a missing publication.
#include "pg/replication_stream.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>

#include <chrono>
#include <functional>
#include <regex>
#include <string>
#include <thread>
#include <variant>

#include "absl/strings/str_cat.h"
#include "ops/setup.h"
#include "pg/slot.h"
#include "support/fault_proxy.h"
#include "support/pg_fixture.h"
#include "support/wait_until.h"

namespace outboxd::pg {
namespace {

using ::testing::HasSubstr;

static_assert(!std::is_copy_constructible_v<ReplicationStream>);
static_assert(std::is_nothrow_move_constructible_v<ReplicationStream>);

constexpr char kInsertThree[] =
    "BEGIN;"
    "INSERT INTO outbox (aggregate_id, tipo, payload) VALUES ('pedido-1', 'pedido.criado', "
    "'{\"n\": 1}');"
    "INSERT INTO outbox (aggregate_id, tipo, payload) VALUES ('pedido-1', 'pedido.pago', "
    "'{\"n\": 2}'), ('pedido-2', 'pedido.criado', '{\"n\": 3}');"
    "COMMIT";

// Setup with the database's unique name as slot name, then a started stream.
class StreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    db_ = test::TestDatabase::Create();
    Connection conn = db_->Connect();
    absl::Status setup = ops::Setup(conn, {.slot = db_->name()});
    ASSERT_TRUE(setup.ok()) << setup;
  }

  absl::StatusOr<ReplicationStream> Start(std::string_view publication = "outboxd",
                                          std::string_view extra_conninfo = "",
                                          absl::Duration receive_timeout = absl::ZeroDuration()) {
    absl::StatusOr<Connection> conn =
        Connection::Open(db_->ConninfoWith(extra_conninfo), ConnectionKind::kReplication);
    if (!conn.ok()) return conn.status();
    return ReplicationStream::Start(std::move(*conn), {.slot = db_->name(),
                                                       .publication = std::string(publication),
                                                       .receive_timeout = receive_timeout});
  }

  SlotInfo Slot() {
    Connection conn = db_->Connect();
    return std::move(QuerySlot(conn, db_->name())).value();
  }

  std::unique_ptr<test::TestDatabase> db_;
};

// Calls Next() (waiting on the socket in between) until `done` returns true for a
// message, an error occurs or `timeout` passes. Returns the last status.
absl::Status ReadUntil(ReplicationStream& stream,
                       const std::function<bool(const StreamMessage&)>& done,
                       std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  absl::Status last = absl::DeadlineExceededError("no matching message in time");
  test::WaitUntil(
      absl::FromChrono(timeout),
      [&] {
        absl::StatusOr<StreamMessage> message = stream.Next();
        if (!message.ok()) {
          last = message.status();
          return true;
        }
        if (std::holds_alternative<NoMessage>(*message)) {
          pollfd fd{stream.socket(), POLLIN, 0};
          ::poll(&fd, 1, 100);
          return false;
        }
        if (!done(*message)) return false;
        last = absl::OkStatus();
        return true;
      },
      absl::ZeroDuration());
  return last;
}

// Commit: Byte1('C') Int8 flags, Int64 commit_lsn, Int64 end_lsn, Int64 time.
Lsn CommitEndLsn(std::string_view commit) {
  Lsn lsn = 0;
  for (size_t i = 10; i < 18 && i < commit.size(); ++i) {
    lsn = lsn << 8 | static_cast<uint8_t>(commit[i]);
  }
  return lsn;
}

TEST_F(StreamTest, StreamsAnOutboxTransactionAndConfirmsItsEndLsn) {
  db_->Exec(kInsertThree);
  // wal_sender_timeout is per connection: 2 s makes the server ask for a reply soon.
  absl::StatusOr<ReplicationStream> stream = Start("outboxd", "options='-c wal_sender_timeout=2s'");
  ASSERT_TRUE(stream.ok()) << stream.status();

  std::string kinds;
  Lsn commit_end = 0;
  Lsn commit_wal_start = 0;
  std::string inserts;
  absl::Status read = ReadUntil(*stream, [&](const StreamMessage& m) {
    const auto* x = std::get_if<XLogData>(&m);
    if (x == nullptr || x->data.empty()) return false;
    kinds += x->data[0];
    if (x->data[0] == 'I') inserts.append(x->data);
    if (x->data[0] == 'C') {
      commit_end = CommitEndLsn(x->data);
      commit_wal_start = x->wal_start;
    }
    return x->data[0] == 'C';
  });
  ASSERT_TRUE(read.ok()) << read;
  EXPECT_EQ(kinds, "BRIIIC");
  EXPECT_EQ(commit_wal_start, commit_end) << "XLogData of a Commit starts at the end LSN";
  // criado_em as the relay expects it, whatever the server's TimeZone.
  EXPECT_TRUE(
      std::regex_search(inserts, std::regex(R"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d{1,6})?\+00)")))
      << inserts;

  // Nothing else arrives; after wal_sender_timeout / 2 the server asks for a reply.
  bool answered = false;
  read = ReadUntil(
      *stream,
      [&](const StreamMessage& m) {
        const auto* k = std::get_if<Keepalive>(&m);
        if (k == nullptr || !k->reply_requested) return false;
        EXPECT_GE(k->wal_end, commit_end);
        answered = stream->SendFeedback(k->wal_end, commit_end).ok();
        return true;
      },
      std::chrono::seconds(10));
  ASSERT_TRUE(read.ok()) << read;
  EXPECT_TRUE(answered);

  test::WaitUntil(
      absl::Seconds(5),
      [&] {
        EXPECT_TRUE(stream->Next().ok());
        return Slot().confirmed_flush_lsn >= commit_end;
      },
      absl::Milliseconds(20));
  EXPECT_EQ(Slot().confirmed_flush_lsn, commit_end);
  EXPECT_TRUE(Slot().active);

  absl::Status ended = stream->End();
  ASSERT_TRUE(ended.ok()) << ended;
  EXPECT_TRUE(std::holds_alternative<StreamEnd>(stream->Next().value()));
  EXPECT_EQ(stream->SendFeedback(commit_end, commit_end).code(),
            absl::StatusCode::kFailedPrecondition);
}

// An idle walsender with the default wal_sender_timeout (60 s) sends nothing of its
// own for 30 s: the ping at half the receive timeout is what it answers.
TEST_F(StreamTest, IdleStreamAnswersThePingAndOutlivesTheReceiveTimeout) {
  absl::StatusOr<ReplicationStream> stream = Start("outboxd", "", absl::Seconds(1));
  ASSERT_TRUE(stream.ok()) << stream.status();
  const absl::Status idle = ReadUntil(
      *stream, [](const StreamMessage&) { return false; }, std::chrono::seconds(4));
  EXPECT_EQ(idle.code(), absl::StatusCode::kDeadlineExceeded) << idle;
}

// Both sockets open, nothing arriving (test::FaultProxy's blackhole): Next() gives the
// stream up once it has been silent for the receive timeout, a reply asked for.
TEST_F(StreamTest, SilenceLongerThanTheReceiveTimeoutIsUnavailable) {
  test::FaultProxy proxy("127.0.0.1", std::stoi(db_->Scalar("SELECT current_setting('port')")));
  ASSERT_TRUE(proxy.Start().ok());
  absl::StatusOr<ReplicationStream> stream =
      Start("outboxd", absl::StrCat("host=127.0.0.1 port=", proxy.port()), absl::Seconds(1));
  ASSERT_TRUE(stream.ok()) << stream.status();
  db_->Exec(kInsertThree);
  ASSERT_TRUE(ReadUntil(*stream, [](const StreamMessage& m) {
                return std::holds_alternative<XLogData>(m);
              }).ok());
  proxy.Blackhole();
  const absl::Time blackholed = absl::Now();
  const absl::Status lost = ReadUntil(
      *stream, [](const StreamMessage&) { return false; }, std::chrono::seconds(10));
  EXPECT_EQ(lost.code(), absl::StatusCode::kUnavailable) << lost;
  EXPECT_THAT(std::string(lost.message()), HasSubstr("no message from PostgreSQL"));
  EXPECT_LT(absl::Now() - blackholed, absl::Seconds(5));
}

TEST_F(StreamTest, FeedbackNeverGoesBackwards) {
  absl::StatusOr<ReplicationStream> stream = Start();
  ASSERT_TRUE(stream.ok()) << stream.status();
  const Lsn start = Slot().confirmed_flush_lsn;
  ASSERT_TRUE(stream->SendFeedback(start, start).ok());
  ASSERT_TRUE(stream->SendFeedback(start - 1, start - 1).ok());
  EXPECT_EQ(stream->last_confirmed(), start);
  EXPECT_EQ(stream->last_received(), start);
  EXPECT_TRUE(stream->End().ok());
}

TEST_F(StreamTest, MovedStreamKeepsReading) {
  db_->Exec(kInsertThree);
  absl::StatusOr<ReplicationStream> started = Start();
  ASSERT_TRUE(started.ok()) << started.status();
  ReplicationStream stream = std::move(*started);
  std::string kinds;
  auto collect = [&](const StreamMessage& m) {
    if (const auto* x = std::get_if<XLogData>(&m)) kinds += x->data.substr(0, 1);
    return kinds.size() >= 2;
  };
  ASSERT_TRUE(ReadUntil(stream, collect).ok());
  // Move while a PQgetCopyData buffer is held: the new owner frees it, once.
  ReplicationStream moved(std::move(stream));
  // Move-assign over a live stream (on a second slot): that one is closed.
  const std::string other_slot = db_->name() + "_b";
  db_->Exec("SELECT pg_create_logical_replication_slot('" + other_slot + "', 'pgoutput')");
  ReplicationStream assigned =
      std::move(ReplicationStream::Start(db_->Connect(ConnectionKind::kReplication),
                                         {.slot = other_slot, .publication = "outboxd"}))
          .value();
  assigned = std::move(moved);
  auto rest = [&](const StreamMessage& m) {
    if (const auto* x = std::get_if<XLogData>(&m)) kinds += x->data.substr(0, 1);
    return !kinds.empty() && kinds.back() == 'C';
  };
  ASSERT_TRUE(ReadUntil(assigned, rest).ok());
  EXPECT_EQ(kinds, "BRIIIC");
  EXPECT_TRUE(assigned.End().ok());
}

TEST_F(StreamTest, EndsCleanlyInTheMiddleOfALargeTransaction) {
  db_->Exec(
      "INSERT INTO outbox (aggregate_id, tipo, payload) "
      "SELECT 'a' || i, 't', jsonb_build_object('i', i) FROM generate_series(1, 50000) i");
  absl::StatusOr<ReplicationStream> stream = Start();
  ASSERT_TRUE(stream.ok()) << stream.status();
  int inserts = 0;
  ASSERT_TRUE(ReadUntil(*stream, [&](const StreamMessage& m) {
                const auto* x = std::get_if<XLogData>(&m);
                return x != nullptr && x->data[0] == 'I' && ++inserts == 10;
              }).ok());
  absl::Status ended = stream->End();  // without reading the other 49,990 inserts
  EXPECT_TRUE(ended.ok()) << ended;
  EXPECT_TRUE(test::WaitUntil(
      absl::Seconds(30), [&] { return !Slot().active; }, absl::Milliseconds(20)))
      << "the walsender released the slot";
}

TEST_F(StreamTest, MissingSlotIsNotFound) {
  absl::StatusOr<Connection> conn = Connection::Open(db_->conninfo(), ConnectionKind::kReplication);
  ASSERT_TRUE(conn.ok()) << conn.status();
  const std::string slot = db_->name() + "_missing";
  absl::StatusOr<ReplicationStream> stream =
      ReplicationStream::Start(std::move(*conn), {.slot = slot, .publication = "outboxd"});
  EXPECT_EQ(stream.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(stream.status().message(),
            "replication slot " + slot + " does not exist; run outboxd setup");
}

TEST_F(StreamTest, SlotHeldByAnotherStreamIsUnavailable) {
  absl::StatusOr<ReplicationStream> first = Start();
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<ReplicationStream> second = Start();
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(second.status().message()),
              HasSubstr("replication slot " + db_->name() + " is in use by another process (PID " +
                        std::to_string(Slot().active_pid) + ")"));
  EXPECT_TRUE(first->End().ok());
}

// PG15's pgoutput looks publications up only when it decodes the first change, so
// START_REPLICATION succeeds and the error arrives in the stream.
TEST_F(StreamTest, MissingPublicationSurfacesFromNextAsFailedPrecondition) {
  absl::StatusOr<ReplicationStream> stream = Start("nope");
  ASSERT_TRUE(stream.ok()) << stream.status();
  db_->Exec(kInsertThree);
  absl::Status read = ReadUntil(
      *stream, [](const StreamMessage& m) { return std::holds_alternative<StreamEnd>(m); });
  EXPECT_EQ(read.code(), absl::StatusCode::kFailedPrecondition) << read;
  EXPECT_EQ(read.message(),
            "publication nope does not exist in database " + db_->name() + "; run outboxd setup");
}

// PG15 skips transactions with no published change (no Begin/Commit pair for them);
// only keepalives say that WAL moved on.
TEST_F(StreamTest, TransactionsWithoutOutboxRowsAreNotSent) {
  db_->Exec("CREATE TABLE other (a int)");
  db_->Exec("INSERT INTO other VALUES (1)");
  db_->Exec(kInsertThree);
  absl::StatusOr<ReplicationStream> stream = Start();
  ASSERT_TRUE(stream.ok()) << stream.status();
  std::string kinds;
  ASSERT_TRUE(ReadUntil(*stream, [&](const StreamMessage& m) {
                if (const auto* x = std::get_if<XLogData>(&m)) kinds += x->data.substr(0, 1);
                return !kinds.empty() && kinds.back() == 'C';
              }).ok());
  EXPECT_EQ(kinds, "BRIIIC");
  EXPECT_TRUE(stream->End().ok());
}

}  // namespace
}  // namespace outboxd::pg
