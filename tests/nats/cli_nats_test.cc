// `outboxd run|poll|dead-letter replay --sink nats`, the real binary, against the real
// PostgreSQL (OUTBOXD_TEST_PG) and nats-server (OUTBOXD_TEST_NATS): the stream `run`
// and `poll` create from the --topic template, read back with the tests' own
// JetStream client; what six kill -9s of the relay leave in it, and a kill -9 of the
// server leading an R3 stream on a cluster of three (scripts/nats start-cluster, the
// test's own); dead letters (no stream for the subject, a full stream, a message over
// max_payload) in order while others flow, each replayed once its cause is fixed; a
// missing stream's error per command.
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "support/child_process.h"
#include "support/jetstream_client.h"
#include "support/nats_test.h"
#include "support/outbox_load.h"
#include "support/pg_fixture.h"
#include "support/wait_until.h"

namespace outboxd::test {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// A database with `outboxd setup` done, and (NatsTest) a stream and subject prefix of
// its own on the shared server.
class NatsCliTest : public NatsTest {
 protected:
  void SetUpWithServer() override {
    db_ = TestDatabase::Create();
    std::string output;
    ASSERT_EQ(Outboxd({"setup", "--pg", db_->conninfo(), "--slot", db_->name()}, &output), 0)
        << output;
  }

  void TearDown() override {
    if (relay_ && relay_->Running()) {
      relay_->Signal(SIGTERM);
      relay_->Wait(absl::Seconds(60));
    }
  }

  int Outboxd(std::vector<std::string> args, std::string* output) {
    args.insert(args.begin(), BinPath("outboxd"));
    std::unique_ptr<ChildProcess> child = ChildProcess::Start(args);
    std::optional<int> code = child->Wait(absl::Seconds(120));
    *output = child->Log();
    return code.value_or(-1);
  }

  // `outboxd run --sink nats` on this database, publishing to <prefix>.{type}: the
  // stream it creates when missing takes <prefix>.>. `url_flag`: --nats-url or
  // --nats-url-file, with `url` its value (default: the server's URL).
  void StartRelay(const std::string& url_flag = "--nats-url", const std::string& url = "") {
    relay_ = ChildProcess::Start({BinPath("outboxd"), "run", "--pg", db_->conninfo(), "--slot",
                                  db_->name(), "--metrics", "127.0.0.1:0", "--sink", "nats",
                                  url_flag, url.empty() ? url_ : url, "--stream", stream_,
                                  "--topic", prefix_ + ".{type}"});
    ASSERT_TRUE(relay_->WaitForAnyLog(kRelayReadsSlot, absl::Seconds(60))) << relay_->Log();
  }

  uint64_t Count(JetStreamClient& reader, const std::string& stream) {
    std::optional<StreamSummary> summary = reader.Stream(stream);
    return summary.has_value() ? summary->messages : 0;
  }

  std::string Scalar(const std::string& sql) { return db_->Scalar(sql); }

  // The dead letters of `aggregate`, oldest first ("<payload n> <error>" each), once
  // there are `n` of them; another count after a minute fails the test.
  std::vector<std::string> WaitForLetters(const std::string& aggregate, size_t n) {
    std::vector<std::string> out;
    EXPECT_TRUE(WaitUntil(
        absl::Seconds(60),
        [&] {
          out.clear();
          pg::Result rows = db_->Exec(
              "SELECT (payload::jsonb->>'n') || ' ' || error FROM outbox_dead_letter "
              "WHERE aggregate_id = '" +
              aggregate + "' ORDER BY seq");
          for (int i = 0; i < rows.rows(); ++i) out.emplace_back(rows.Get(i, 0));
          return out.size() == n;
        },
        absl::Milliseconds(100)))
        << relay_->Log();
    out.resize(n);  // a test reads letters [0, n) either way
    return out;
  }

  // `outboxd dead-letter replay --sink nats` to the test's stream: it exits 0 with
  // every letter delivered.
  void ReplayEveryLetter() {
    std::string output;
    EXPECT_EQ(Outboxd({"dead-letter", "replay", "--pg", db_->conninfo(), "--slot", db_->name(),
                       "--sink", "nats", "--nats-url", url_, "--stream", stream_},
                      &output),
              0)
        << output;
    EXPECT_EQ(Scalar("SELECT count(*) FROM outbox_dead_letter"), "0");
  }

  // What the stream holds against the outbox table, read back once it holds as many
  // messages as the table rows (or a minute passed): each message an outbox row's,
  // with its Nats-Msg-Id; each aggregate's first occurrences in commit order (a repeat
  // is counted, as a consumer dropping repeated ids would see it, never as disorder).
  struct Stored {
    size_t rows = 0;
    size_t messages = 0;
    size_t missing = 0;  // rows with no message: lost
    int duplicates = 0;
  };
  Stored CheckStream(JetStreamClient& reader) {
    std::map<std::string, int64_t> seq_of;
    pg::Result rows = db_->Exec("SELECT id::text, seq FROM outbox");
    for (int i = 0; i < rows.rows(); ++i) {
      EXPECT_TRUE(
          absl::SimpleAtoi(std::string(rows.Get(i, 1)), &seq_of[std::string(rows.Get(i, 0))]));
    }
    EXPECT_TRUE(WaitUntil(
        absl::Seconds(60), [&] { return Count(reader, stream_) >= seq_of.size(); },
        absl::Milliseconds(100)))
        << Count(reader, stream_) << " of " << seq_of.size() << "\n"
        << relay_->Log();
    Stored result{.rows = seq_of.size()};
    std::set<std::string> ids;
    std::map<std::string, int64_t> last_seq;
    for (const StoredMessage& m : reader.ReadAll(stream_, prefix_ + ".>")) {
      ++result.messages;
      const std::string id = m.Header("id");
      EXPECT_EQ(m.subject, prefix_ + ".pedido.confirmado");
      EXPECT_EQ(m.Header("Nats-Msg-Id"), id);
      EXPECT_EQ(seq_of.count(id), 1u) << "not an outbox row: " << id;
      if (!ids.insert(id).second) {
        ++result.duplicates;
        continue;
      }
      const std::string aggregate = m.Header("aggregate_id");
      EXPECT_LT(last_seq[aggregate], seq_of[id]) << "aggregate " << aggregate << " out of order";
      last_seq[aggregate] = seq_of[id];
    }
    for (const auto& [id, seq] : seq_of) result.missing += ids.count(id) == 0 ? 1 : 0;
    EXPECT_EQ(Scalar("SELECT count(*) FROM outbox_dead_letter"), "0");
    return result;
  }

  std::unique_ptr<TestDatabase> db_;
  std::unique_ptr<ChildProcess> relay_;
};

// Events written continuously while the relay is killed -9 five times, each time
// while it publishes, and started again from its slot; then once more in the middle
// of one large transaction (confirmed only once all its messages are acknowledged, so
// the next relay publishes all of it again): the stream `run` created (file storage)
// holds every committed event once (the repeats dropped by Nats-Msg-Id within the
// duplicate window), in commit order per aggregate.
TEST_F(NatsCliTest, RunCreatesTheStreamAndKillNineOfTheRelayLosesAndDuplicatesNothing) {
  StartRelay();
  Load load(db_->conninfo());
  JetStreamClient reader(url_);
  for (int k = 0; k < 5; ++k) {
    // This relay has published, and the load has run on a while.
    const uint64_t stored = Count(reader, stream_);
    ASSERT_TRUE(WaitUntil(
        absl::Seconds(60), [&] { return Count(reader, stream_) > stored; }, absl::Milliseconds(10)))
        << relay_->Log();
    ASSERT_TRUE(load.WaitForMore(150));
    relay_->Signal(SIGKILL);
    ASSERT_EQ(relay_->Wait(absl::Seconds(10)), 128 + SIGKILL);
    StartRelay();
  }
  ASSERT_TRUE(load.WaitForMore(100));
  load.Stop();

  const uint64_t before = Count(reader, stream_);
  constexpr int kLarge = 10000;
  db_->Exec(
      absl::StrCat("INSERT INTO outbox (aggregate_id, tipo, payload) SELECT 'big' || (g % 500), "
                   "'pedido.confirmado', jsonb_build_object('g', g) FROM generate_series(1, ",
                   kLarge, ") g"));
  ASSERT_TRUE(WaitUntil(
      absl::Seconds(60), [&] { return Count(reader, stream_) >= before + 1000; },
      absl::Milliseconds(5)));
  relay_->Signal(SIGKILL);
  ASSERT_EQ(relay_->Wait(absl::Seconds(10)), 128 + SIGKILL);
  const uint64_t at_kill = Count(reader, stream_);
  ASSERT_LT(at_kill, before + kLarge) << "the kill came after the whole transaction was stored";
  StartRelay();

  const Stored stored = CheckStream(reader);
  EXPECT_EQ(stored.missing, 0u) << "lost";
  EXPECT_EQ(stored.duplicates, 0) << "stored twice";
  EXPECT_EQ(stored.messages, stored.rows) << "every committed event once";
  std::optional<StreamSummary> summary = reader.Stream(stream_);
  ASSERT_TRUE(summary.has_value());
  EXPECT_TRUE(summary->file_storage);
  std::printf("%d transactions, %zu events, %zu stored, %llu of the large one's at the kill\n",
              load.transactions(), stored.rows, stored.messages,
              static_cast<unsigned long long>(at_kill - before));
}

// An R3 stream on a JetStream cluster of three servers (the test's own), the relay
// given all three URLs, events written continuously: kill -9 of the server leading
// the stream loses nothing and stores nothing twice. The two left elect a new leader;
// the relay's connection, wherever it was, goes on (libnats moves to another URL);
// what was unacknowledged at the kill, and what met no responders while the stream had
// no leader (the sink asks: its stream takes the subject, so it is no dead letter), is
// published again once the stream answers, the repeats dropped by Nats-Msg-Id.
TEST_F(NatsCliTest, AnR3StreamLosesNothingWhenItsLeadersServerIsKilled) {
  NatsCluster cluster;
  ASSERT_FALSE(cluster.urls().empty());
  JetStreamClient client(cluster.urls());
  client.AddStream(stream_, prefix_ + ".>", {.replicas = 3});
  StartRelay("--nats-url", cluster.urls());
  Load load(db_->conninfo());
  ASSERT_TRUE(WaitUntil(
      absl::Seconds(60), [&] { return Count(client, stream_) >= 300; }, absl::Milliseconds(10)))
      << relay_->Log();

  const std::optional<StreamSummary> before = client.Stream(stream_);
  ASSERT_TRUE(before.has_value());
  const std::string leader = before->leader;
  ASSERT_TRUE(cluster.Kill(leader));
  const absl::Time killed = absl::Now();
  std::string new_leader;
  EXPECT_TRUE(WaitUntil(absl::Seconds(60), [&] {
    std::optional<StreamSummary> s = client.Stream(stream_);
    new_leader = s.has_value() ? s->leader : "";
    return !new_leader.empty() && new_leader != leader;
  }));
  // An upper bound: the test's own requests to the killed server time out meanwhile.
  const absl::Duration election = absl::Now() - killed;
  // The relay publishes to the new leader while the load goes on.
  const uint64_t at_election = Count(client, stream_);
  ASSERT_TRUE(load.WaitForMore(300));
  EXPECT_TRUE(WaitUntil(
      absl::Seconds(60), [&] { return Count(client, stream_) > at_election + 300; },
      absl::Milliseconds(10)))
      << relay_->Log();
  load.Stop();

  const Stored stored = CheckStream(client);
  EXPECT_EQ(stored.missing, 0u) << "lost";
  EXPECT_EQ(stored.duplicates, 0) << "stored twice";
  EXPECT_EQ(stored.messages, stored.rows) << "every committed event once";
  std::printf(
      "R3 stream, leader %s killed, %s seen leading within %s: %zu events, %zu stored, "
      "%zu lost, %d duplicates\n",
      leader.c_str(), new_leader.c_str(), absl::FormatDuration(election).c_str(), stored.rows,
      stored.messages, stored.missing, stored.duplicates);
}

// An event whose subject no stream takes is dead-lettered with the server's reason
// while its neighbours flow; once a stream takes the subject, `dead-letter replay
// --sink nats` delivers it. Both read the URL, with a password, from --nats-url-file,
// which no line of their output shows.
TEST_F(NatsCliTest, ADeadLetterWithoutAStreamReplaysOnceAStreamTakesItsSubject) {
  char path[] = "/tmp/outboxd-nats-url.XXXXXX";
  const int fd = mkstemp(path);  // 0600: no warning about its mode
  ASSERT_GE(fd, 0);
  const std::string with_password = "nats://outboxd:s3cr3t-nats@" + url_.substr(7);
  ASSERT_EQ(write(fd, with_password.data(), with_password.size()),
            static_cast<ssize_t>(with_password.size()));
  close(fd);
  JetStreamClient client(url_);
  client.AddStream(stream_, prefix_ + ".pedido.>");  // exists: run leaves it as it is
  StartRelay("--nats-url-file", path);
  db_->Exec(
      "INSERT INTO outbox (aggregate_id, tipo, payload) VALUES "
      "('u', 'fatura.paga', '{\"n\":1}'), ('ok', 'pedido.confirmado', '{\"n\":2}')");
  ASSERT_TRUE(WaitUntil(
      absl::Seconds(60), [&] { return Scalar("SELECT count(*) FROM outbox_dead_letter") == "1"; },
      absl::Milliseconds(200)))
      << relay_->Log();
  EXPECT_EQ(Scalar("SELECT aggregate_id FROM outbox_dead_letter"), "u");
  EXPECT_THAT(Scalar("SELECT error FROM outbox_dead_letter"),
              HasSubstr("no JetStream stream takes subject " + prefix_ + ".fatura.paga"));
  EXPECT_TRUE(WaitUntil(
      absl::Seconds(60), [&] { return Count(client, stream_) == 1; }, absl::Milliseconds(100)));
  EXPECT_THAT(relay_->Log(), Not(HasSubstr("s3cr3t-nats")));

  // The fix: a stream of its own for invoices.
  const std::string invoices = "F_" + prefix_;
  client.AddStream(invoices, prefix_ + ".fatura.>");
  std::string output;
  const int code = Outboxd({"dead-letter", "replay", "--pg", db_->conninfo(), "--slot", db_->name(),
                            "--sink", "nats", "--nats-url-file", path, "--stream", invoices},
                           &output);
  unlink(path);
  EXPECT_EQ(code, 0) << output;
  EXPECT_THAT(output, Not(HasSubstr("s3cr3t-nats")));
  EXPECT_EQ(Scalar("SELECT count(*) FROM outbox_dead_letter"), "0");
  std::vector<StoredMessage> replayed = client.ReadAll(invoices, prefix_ + ".fatura.>");
  ASSERT_EQ(replayed.size(), 1u);
  EXPECT_EQ(replayed[0].value, R"({"n": 1})");
  EXPECT_EQ(replayed[0].Header("Nats-Msg-Id"),
            Scalar("SELECT id::text FROM outbox WHERE aggregate_id = 'u'"));
}

// The "n" of each message's payload on `subject` (all: ""), in stream order. Read whole:
// a filtered reader would wait out a fetch's timeout for the stream's other messages.
std::vector<std::string> Numbers(const std::vector<StoredMessage>& stream,
                                 const std::string& subject = "") {
  std::vector<std::string> out;
  for (const StoredMessage& m : stream) {
    if (!subject.empty() && m.subject != subject) continue;
    const size_t at = m.value.find("\"n\": ");
    out.push_back(at == std::string::npos ? m.value : m.value.substr(at + 5, 1));
  }
  return out;
}

// A subject of the stream at its limit with discard new refuses the next message: a
// dead letter with the server's reason, its aggregate's later event a dead letter right
// behind it, while events on the stream's other subjects keep flowing. Once the limit
// is raised, `dead-letter replay --sink nats` (the relay still running) delivers both,
// in order, after the two the subject held.
TEST_F(NatsCliTest, AFullStreamDeadLettersInOrderWhileOthersFlowAndReplayDeliversOnceRaised) {
  JetStreamClient client(url_);
  client.AddStream(stream_, prefix_ + ".>", {.max_msgs_per_subject = 2});
  StartRelay();
  db_->Exec(
      "INSERT INTO outbox (aggregate_id, tipo, payload) VALUES "
      "('s', 'estoque.reservado', '{\"n\":1}'), ('s', 'estoque.reservado', '{\"n\":2}'), "
      "('s', 'estoque.reservado', '{\"n\":3}'), ('p', 'pedido.confirmado', '{\"n\":4}'), "
      "('s', 'estoque.reservado', '{\"n\":5}'), ('p', 'pedido.confirmado', '{\"n\":6}')");
  const std::vector<std::string> letters = WaitForLetters("s", 2);
  EXPECT_THAT(letters[0], HasSubstr("3 JetStream stream " + stream_ +
                                    " refused the message: maximum messages per subject exceeded"));
  EXPECT_THAT(letters[1], ::testing::StartsWith("5 "));
  EXPECT_TRUE(WaitUntil(
      absl::Seconds(60), [&] { return Count(client, stream_) == 4; }, absl::Milliseconds(100)));
  EXPECT_THAT(Numbers(client.ReadAll(stream_, prefix_ + ".>"), prefix_ + ".pedido.confirmado"),
              ::testing::ElementsAre("4", "6"));

  client.UpdateStream(stream_, prefix_ + ".>", {.max_msgs_per_subject = 100});
  ReplayEveryLetter();
  EXPECT_THAT(Numbers(client.ReadAll(stream_, prefix_ + ".>"), prefix_ + ".estoque.reservado"),
              ::testing::ElementsAre("1", "2", "3", "5"));
}

// A message over the server's max_payload (4 KiB on this server) never leaves the
// relay: a dead letter saying so, its aggregate's next event right behind it, while
// another aggregate's events flow. Once the server takes larger messages (max_payload
// raised, server restarted), `dead-letter replay --sink nats` delivers both in order.
TEST_F(NatsCliTest, AMessageOverMaxPayloadDeadLettersInOrderAndReplayDeliversOnceItFits) {
  PrivateNatsServer server("max_payload:4096");
  url_ = server.url();
  StartRelay();
  db_->Exec(
      "INSERT INTO outbox (aggregate_id, tipo, payload) VALUES "
      "('b', 'pedido.confirmado', jsonb_build_object('n', 1, 'pad', repeat('x', 5000))), "
      "('c', 'pedido.confirmado', '{\"n\":2}'), ('b', 'pedido.confirmado', '{\"n\":3}'), "
      "('c', 'pedido.confirmado', '{\"n\":4}')");
  const std::vector<std::string> letters = WaitForLetters("b", 2);
  EXPECT_THAT(letters[0], HasSubstr("over the NATS server's max_payload of 4096 bytes"));
  EXPECT_THAT(letters[1], ::testing::StartsWith("3 "));
  JetStreamClient client(url_);
  EXPECT_TRUE(WaitUntil(
      absl::Seconds(60), [&] { return Count(client, stream_) == 2; }, absl::Milliseconds(100)));
  EXPECT_THAT(Numbers(client.ReadAll(stream_, prefix_ + ".>")), ::testing::ElementsAre("2", "4"));

  ASSERT_TRUE(server.RestartWith("max_payload: 1048576"));
  ReplayEveryLetter();
  JetStreamClient after(url_);  // the first one may still be reconnecting
  EXPECT_THAT(Numbers(after.ReadAll(stream_, prefix_ + ".>")),
              ::testing::ElementsAre("2", "4", "1", "3"));
}

// A missing stream's error names the fix that fits the command: `run --no-declare`
// would create it without the flag; `dead-letter replay` never creates one, with or
// without --no-declare, so it names the relay's stream instead.
TEST_F(NatsCliTest, AMissingStreamsErrorNamesTheFixThatFitsTheCommand) {
  std::string output;
  EXPECT_EQ(Outboxd({"run", "--pg", db_->conninfo(), "--slot", db_->name(), "--sink", "nats",
                     "--nats-url", url_, "--stream", stream_, "--no-declare"},
                    &output),
            2);
  EXPECT_THAT(output, HasSubstr("JetStream stream " + stream_ + " does not exist at " + url_ +
                                "; create it, or leave out --no-declare"));
  for (const bool no_declare : {false, true}) {
    std::vector<std::string> replay = {"dead-letter", "replay",    "--pg",     db_->conninfo(),
                                       "--slot",      db_->name(), "--sink",   "nats",
                                       "--nats-url",  url_,        "--stream", stream_};
    if (no_declare) replay.push_back("--no-declare");
    EXPECT_EQ(Outboxd(replay, &output), 2);
    EXPECT_THAT(output, HasSubstr("does not exist at " + url_ +
                                  "; outboxd dead-letter replay publishes only to an existing "
                                  "stream: pass --stream with the stream the relay publishes to"));
    EXPECT_THAT(output, Not(HasSubstr("leave out --no-declare")));
  }
  EXPECT_FALSE(JetStreamClient(url_).Stream(stream_).has_value());
}

// `outboxd poll --sink nats` creates the stream from its --topic template too, and
// marks each row published once its PubAck came.
TEST_F(NatsCliTest, PollCreatesTheStreamAndMarksEachEventPublished) {
  db_->Exec(
      "INSERT INTO outbox (aggregate_id, tipo, payload) SELECT 'p' || (g % 3), "
      "'pedido.confirmado', jsonb_build_object('n', g) FROM generate_series(1, 50) g");
  std::unique_ptr<ChildProcess> poll = ChildProcess::Start(
      {BinPath("outboxd"), "poll", "--pg", db_->conninfo(), "--interval", "100ms", "--sink", "nats",
       "--nats-url", url_, "--stream", stream_, "--topic", prefix_ + ".{type}"});
  const auto pending = [&] {
    return Scalar("SELECT count(*) FROM outbox WHERE publicado_em IS NULL");
  };
  EXPECT_TRUE(WaitUntil(absl::Seconds(60), [&] { return pending() == "0"; }))
      << pending() << " pending\n"
      << poll->Log();
  JetStreamClient reader(url_);
  std::vector<StoredMessage> stored = reader.ReadAll(stream_, prefix_ + ".>");
  ASSERT_EQ(stored.size(), 50u) << poll->Log();
  std::set<std::string> ids;
  for (const StoredMessage& m : stored) {
    EXPECT_EQ(m.Header("Nats-Msg-Id"), m.Header("id"));
    ids.insert(m.Header("id"));
  }
  EXPECT_EQ(ids.size(), 50u);
  poll->Signal(SIGTERM);
  EXPECT_EQ(poll->Wait(absl::Seconds(60)), 0) << poll->Log();
}

}  // namespace
}  // namespace outboxd::test
