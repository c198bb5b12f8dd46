// BulkChangeStream (relay/bulk_stream.h) in process against a real PostgreSQL: the rows
// it yields are the pgoutput messages, in order, with the walsender's positions; the
// slot moves only to what SendFeedback confirmed, chunk by chunk; the lock keeps a
// second reader out; caught up, it streams.
#include "relay/bulk_stream.h"

#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "outbox/emitted_event.h"
#include "pg/lsn.h"
#include "pgoutput/decoder.h"
#include "relay/catch_up_plan.h"
#include "support/pg_fixture.h"
#include "support/private_cluster.h"
#include "support/wait_until.h"

namespace outboxd::relay {
namespace {

class BulkStreamTest : public ::testing::Test {
 protected:
  void SetUp() override { Prepare(test::TestDatabase::Create()); }
  // The test's database on a cluster of its own, for a test that counts WAL: what
  // other tests write meanwhile on the shared one lands in its span.
  void UsePrivateCluster() {
    replication_.reset();
    db_.reset();
    cluster_ = std::make_unique<test::PrivateCluster>();
    Prepare(test::TestDatabase::Create(cluster_->conninfo()));
  }
  void Prepare(std::unique_ptr<test::TestDatabase> db) {
    db_ = std::move(db);
    db_->Exec("CREATE TABLE outbox (id serial PRIMARY KEY, v text)");
    db_->Exec("CREATE PUBLICATION pub FOR TABLE outbox");
    db_->Exec(
        absl::StrCat("SELECT pg_create_logical_replication_slot('", db_->name(), "', 'pgoutput')"));
  }

  // `n` single-row transactions.
  void Write(int n) {
    db_->Exec(absl::StrCat("DO $$ BEGIN FOR i IN 1..", n,
                           " LOOP INSERT INTO outbox (v) VALUES ('x' || i); COMMIT; END LOOP; "
                           "END $$"));
  }

  pg::Lsn Lsn(const std::string& sql) { return pg::ParseLsn(db_->Scalar(sql)).value(); }
  pg::Lsn Confirmed() {
    return Lsn(
        absl::StrCat("SELECT confirmed_flush_lsn::text FROM pg_replication_slots "
                     "WHERE slot_name = '",
                     db_->name(), "'"));
  }

  absl::StatusOr<std::unique_ptr<BulkChangeStream>> Start(int64_t chunk, bool messages = false) {
    replication_.emplace(db_->Connect(pg::ConnectionKind::kReplication));
    return BulkChangeStream::Start(db_->Connect(), replication_,
                                   {.slot = db_->name(),
                                    .publication = "pub",
                                    .messages = messages,
                                    .start = Confirmed(),
                                    .target = Lsn("SELECT pg_current_wal_lsn()::text"),
                                    .chunk_changes = chunk,
                                    .fetch_rows = 7});
  }

  // Reads until the stream has nothing more without a confirmation (a few NoMessage
  // in a row, the server given time to answer); returns each message's type and
  // position.
  std::vector<std::pair<char, pg::Lsn>> ReadAvailable(ChangeStream& stream) {
    std::vector<std::pair<char, pg::Lsn>> read;
    int idle = 0;
    ReadUntil(
        stream,
        [&](const pg::StreamMessage& m) {
          auto* x = std::get_if<pg::XLogData>(&m);
          if (x == nullptr) return ++idle >= 20;
          read.emplace_back(x->data.empty() ? '?' : x->data[0], x->wal_start);
          idle = 0;
          return false;
        },
        absl::Milliseconds(25));
    return read;
  }

  // Calls Next() until `take` returns true for a message, Next() fails (a test
  // failure) or 30 s pass; after a NoMessage, waits `idle` first. Whether `take` did.
  static bool ReadUntil(ChangeStream& stream,
                        const std::function<bool(const pg::StreamMessage&)>& take,
                        absl::Duration idle = absl::Milliseconds(10)) {
    bool failed = false;
    bool nothing = false;
    test::WaitUntil(
        absl::Seconds(30),
        [&] {
          absl::StatusOr<pg::StreamMessage> m = stream.Next();
          EXPECT_TRUE(m.ok()) << m.status();
          failed = !m.ok();
          nothing = !failed && std::holds_alternative<pg::NoMessage>(*m);
          return failed || take(*m);
        },
        [&] {
          if (nothing) absl::SleepFor(idle);
        });
    return !failed;
  }

  std::unique_ptr<test::PrivateCluster> cluster_;  // outlives the database on it
  std::unique_ptr<test::TestDatabase> db_;
  std::optional<pg::Connection> replication_;
};

TEST_F(BulkStreamTest, YieldsThePgoutputMessagesAndAdvancesOnlyToWhatWasConfirmed) {
  // WAL other tests write counts in the chunk's span, and with less than an eighth of
  // that span left after it the stream rightly switches to streaming instead of
  // peeking again: under the full suite it did (bulk() false at the second chunk). A
  // cluster of its own, and the slot starting right before the writes.
  UsePrivateCluster();
  db_->Exec(absl::StrCat("SELECT pg_replication_slot_advance('", db_->name(),
                         "', pg_current_wal_lsn())"));
  Write(30);
  const pg::Lsn before = Confirmed();
  // 30 transactions of Begin, Insert, Commit (and one Relation): chunks of 40 changes
  // end at whole transactions (the first takes the Relation too).
  absl::StatusOr<std::unique_ptr<BulkChangeStream>> stream = Start(40);
  ASSERT_TRUE(stream.ok()) << stream.status();
  std::vector<std::pair<char, pg::Lsn>> first = ReadAvailable(**stream);
  ASSERT_GE(first.size(), 40u);
  EXPECT_EQ(first[0].first, 'B');
  EXPECT_EQ(first[1].first, 'R');
  EXPECT_EQ(first[2].first, 'I');
  EXPECT_EQ(first.back().first, 'C');
  for (size_t i = 1; i < first.size(); ++i) EXPECT_LE(first[i - 1].second, first[i].second);
  // Nothing confirmed: the slot stays, and no second chunk comes.
  EXPECT_EQ(Confirmed(), before);
  EXPECT_TRUE(ReadAvailable(**stream).empty());
  // Half of it confirmed: still the chunk's not all acknowledged, the slot stays.
  const pg::Lsn middle = first[first.size() / 2].second;
  ASSERT_TRUE((*stream)->SendFeedback(first.back().second, middle, Reply::kNotNeeded).ok());
  EXPECT_TRUE(ReadAvailable(**stream).empty());
  EXPECT_EQ(Confirmed(), before);
  // The whole chunk: the slot moves to its end, and the next chunk starts right after.
  ASSERT_TRUE(
      (*stream)->SendFeedback(first.back().second, first.back().second, Reply::kNotNeeded).ok());
  std::vector<std::pair<char, pg::Lsn>> second = ReadAvailable(**stream);
  EXPECT_EQ(Confirmed(), first.back().second);
  ASSERT_FALSE(second.empty());
  EXPECT_EQ(second[0].first, 'B');
  EXPECT_GE(second[0].second, first.back().second);  // the next transaction starts there
  EXPECT_TRUE((*stream)->bulk());
  // Every chunk confirmed in turn: caught up, it streams (START_REPLICATION).
  std::vector<std::pair<char, pg::Lsn>> chunk = second;
  size_t commits = 0;
  for (const auto& [type, lsn] : first) commits += type == 'C';
  pg::Lsn end = 0;
  for (int round = 0; round < 10 && (*stream)->bulk(); ++round) {
    for (const auto& [type, lsn] : chunk) commits += type == 'C';
    end = chunk.empty() ? Confirmed() : chunk.back().second;
    ASSERT_TRUE((*stream)->SendFeedback(end, end, Reply::kNotNeeded).ok());
    chunk = ReadAvailable(**stream);
  }
  EXPECT_FALSE((*stream)->bulk());
  // The last chunk's advance holds, though its transaction was never committed.
  EXPECT_EQ(Confirmed(), end);
  for (const auto& [type, lsn] : chunk) commits += type == 'C';  // streamed, if any
  EXPECT_EQ(commits, 30u) << "every transaction once";
  EXPECT_EQ(db_->Scalar(absl::StrCat("SELECT active FROM pg_replication_slots WHERE slot_name = '",
                                     db_->name(), "'")),
            "t");
  // Live now: a new transaction arrives through the walsender.
  Write(1);
  // Bounded by time, not by a count of messages: on a busy shared cluster the walsender
  // sends keepalives while it decodes other databases' WAL, and a client answers those
  // that ask for a reply.
  bool streamed = false;
  bool ended = false;
  std::string seen;
  ASSERT_TRUE(ReadUntil(
      **stream,
      [&](const pg::StreamMessage& m) {
        ended = std::holds_alternative<pg::StreamEnd>(m);
        if (auto* x = std::get_if<pg::XLogData>(&m)) {
          if (!x->data.empty()) seen.push_back(x->data[0]);
          streamed = !x->data.empty() && x->data[0] == 'I';
        } else if (auto* k = std::get_if<pg::Keepalive>(&m)) {
          seen.push_back('k');
          if (k->reply_requested) {
            const pg::Lsn at = chunk.empty() ? first.back().second : chunk.back().second;
            EXPECT_TRUE((*stream)->SendFeedback(k->wal_end, at, Reply::kRequested).ok());
          }
        }
        return ended || streamed;
      },
      absl::Milliseconds(25)));
  ASSERT_FALSE(ended) << "the walsender ended; saw " << seen;
  EXPECT_TRUE(streamed) << "saw " << seen;
  EXPECT_TRUE((*stream)->End().ok());
}

// The peek's query leaves out what the relay would skip: a logical message under
// another prefix arrives without its content, one of outboxd's over 1 MiB as the
// marker the relay counts as too_large; neither reaches the relay's memory.
TEST_F(BulkStreamTest, TheServerLeavesOutMessagesTheRelayWouldSkip) {
  db_->Exec(
      "SELECT pg_logical_emit_message(true, 'other', convert_to(repeat('y', 4 << 20), 'UTF8'))");
  db_->Exec(
      "SELECT pg_logical_emit_message(true, 'outboxd', convert_to(repeat('x', 4 << 20), 'UTF8'))");
  db_->Exec("SELECT pg_logical_emit_message(true, 'outboxd', 'small'::bytea)");
  absl::StatusOr<std::unique_ptr<BulkChangeStream>> stream = Start(1000, /*messages=*/true);
  ASSERT_TRUE(stream.ok()) << stream.status();
  std::vector<std::pair<std::string, std::string>> messages;  // prefix, content
  size_t largest = 0;
  ASSERT_TRUE(ReadUntil(**stream, [&](const pg::StreamMessage& m) {
    auto* x = std::get_if<pg::XLogData>(&m);
    if (x == nullptr || x->data.empty() || x->data[0] != 'M') return false;
    largest = std::max(largest, x->data.size());
    absl::StatusOr<pgoutput::Message> decoded = pgoutput::Decode(x->data);
    EXPECT_TRUE(decoded.ok()) << decoded.status();
    if (!decoded.ok()) return true;
    const auto& message = std::get<pgoutput::LogicalMessage>(*decoded);
    messages.emplace_back(message.prefix, message.content.size() > 64
                                              ? absl::StrCat(message.content.size(), " bytes")
                                              : std::string(message.content));
    return messages.size() >= 3;
  }));
  ASSERT_EQ(messages.size(), 3u);
  EXPECT_EQ(messages[0], std::make_pair(std::string(""), std::string("")));
  EXPECT_EQ(messages[1],
            std::make_pair(std::string("outboxd"), std::string(outbox::kEmitCutByServer)));
  EXPECT_EQ(messages[2], std::make_pair(std::string("outboxd"), std::string("small")));
  EXPECT_LT(largest, 64u);
}

TEST_F(BulkStreamTest, ASecondReaderFindsTheSlotLocked) {
  Write(5);
  absl::StatusOr<std::unique_ptr<BulkChangeStream>> first = Start(0);
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<std::unique_ptr<BulkChangeStream>> second = Start(0);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(pg::SqlStateOf(second.status()), "55006") << second.status();
  pg::Connection other = db_->Connect();
  absl::StatusOr<bool> mine = TryLockSlot(other, db_->name());
  ASSERT_TRUE(mine.ok()) << mine.status();
  EXPECT_FALSE(*mine) << "a streaming relay must wait too";
}

// A peek failing for a reason a retry will not fix (here: the server's
// temp_file_limit, too small for the materialised chunk) says so, and the relay streams from then
// on (relay/catch_up_plan.h); a slot held by another reader is no such failure.
TEST_F(BulkStreamTest, AnErrorARetryWillNotFixIsMarkedSo) {
  Write(2000);
  absl::StatusOr<std::unique_ptr<BulkChangeStream>> first = Start(0);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_FALSE(GivesUpBulk(Start(0).status())) << "the slot locked: stand by and retry";
  first->reset();
  // For the connections Start() opens from now on: the peek's result spills to a file.
  db_->Exec(absl::StrCat("ALTER DATABASE ", db_->name(), " SET work_mem = '64kB'"));
  db_->Exec(absl::StrCat("ALTER DATABASE ", db_->name(), " SET temp_file_limit = '1kB'"));
  // The first reader's lock goes with its connection, once the server has seen it close.
  absl::StatusOr<std::unique_ptr<BulkChangeStream>> stream;
  ASSERT_TRUE(test::WaitUntil(absl::Seconds(30), [&] {
    stream = Start(0);
    return pg::SqlStateOf(stream.status()) != "55006";
  })) << stream.status();
  ASSERT_TRUE(stream.ok()) << stream.status();
  absl::Status failed;
  ASSERT_TRUE(test::WaitUntil(
      absl::Seconds(30),
      [&] {
        failed = (*stream)->Next().status();
        return !failed.ok();
      },
      absl::Milliseconds(25)));
  EXPECT_TRUE(GivesUpBulk(failed)) << failed;
}

TEST_F(BulkStreamTest, EndAdvancesTheSlotToTheConfirmedPositionMidChunk) {
  Write(20);
  absl::StatusOr<std::unique_ptr<BulkChangeStream>> stream = Start(0);
  ASSERT_TRUE(stream.ok()) << stream.status();
  std::vector<std::pair<char, pg::Lsn>> read = ReadAvailable(**stream);
  ASSERT_GE(read.size(), 60u);
  pg::Lsn tenth_commit = 0;
  int commits = 0;
  for (const auto& [type, lsn] : read) {
    if (type == 'C' && ++commits == 10) tenth_commit = lsn;
  }
  ASSERT_TRUE((*stream)->SendFeedback(read.back().second, tenth_commit, Reply::kNotNeeded).ok());
  EXPECT_TRUE((*stream)->End().ok());
  EXPECT_EQ(Confirmed(), tenth_commit);
}

// Inside a chunk (one peek of the whole backlog here) the slot follows the confirmed
// position every few seconds, so a crash sends again only what came after it.
TEST_F(BulkStreamTest, AdvancesWithinAChunkToWhatWasConfirmed) {
  Write(20);
  const pg::Lsn before = Confirmed();
  absl::StatusOr<std::unique_ptr<BulkChangeStream>> stream = Start(0);
  ASSERT_TRUE(stream.ok()) << stream.status();
  // The first few rows only: the cursor still holds most of the chunk.
  std::vector<pg::Lsn> commits;
  ASSERT_TRUE(ReadUntil(**stream, [&](const pg::StreamMessage& m) {
    if (auto* x = std::get_if<pg::XLogData>(&m); x && !x->data.empty() && x->data[0] == 'C') {
      commits.push_back(x->wal_start);
    }
    return commits.size() >= 3;
  }));
  ASSERT_EQ(commits.size(), 3u);
  // Confirmed up to the second transaction; the feedback timer goes on.
  test::WaitUntil(absl::Seconds(20), [&] {
    EXPECT_TRUE((*stream)->SendFeedback(commits[2], commits[1], Reply::kNotNeeded).ok());
    return Confirmed() != before;
  });
  EXPECT_EQ(Confirmed(), commits[1]) << "never past what was confirmed";
  EXPECT_TRUE((*stream)->bulk());
}

}  // namespace
}  // namespace outboxd::relay
