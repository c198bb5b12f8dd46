// The CDC relay's rules in process: relay::Pipeline against a scripted replication
// stream (tests/support/scripted_stream.h), the in-memory FakeSink and an in-memory
// dead-letter table, on a clock the test moves. No PostgreSQL, no broker, no sleeps:
// each Step() is one turn of Relay's loop. The end-to-end tests (tests/integration/)
// remain the proof against the real services.
#include "relay/pipeline.h"

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "observe/health.h"
#include "outbox/emitted_event.h"
#include "outbox/stored_letter.h"
#include "relay/dead_letter_gate.h"
#include "relay/session.h"
#include "support/allocation_counter.h"
#include "support/captured_log.h"
#include "support/fake_sink.h"
#include "support/scripted_stream.h"

namespace outboxd::relay {
namespace {

using test::OutboxRow;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

// The dead-letter table, in memory.
class MemoryDeadLetters final : public DeadLetterTable {
 public:
  absl::Status Insert(const outbox::DeadLetter& letter) override {
    letters.push_back(letter);
    return absl::OkStatus();
  }
  // By stored key and id, as PostgreSQL's table answers (outbox/stored_letter.h).
  absl::StatusOr<absl::flat_hash_map<std::string, outbox::FirstDeadLetter>> Aggregates() override {
    ++reads;
    absl::flat_hash_map<std::string, outbox::FirstDeadLetter> first;
    for (const outbox::DeadLetter& l : letters) {
      first.try_emplace(outbox::StoredKey(l.aggregate_id),
                        outbox::FirstDeadLetter{.lsn = l.lsn, .id = outbox::StoredKey(l.id)});
    }
    return first;
  }
  absl::StatusOr<absl::Time> Now() override { return *server_clock; }
  std::string_view name() const override { return "outbox_dead_letter"; }

  std::vector<std::string> ids() const {
    std::vector<std::string> out;
    for (const outbox::DeadLetter& l : letters) out.push_back(l.id);
    return out;
  }

  std::vector<outbox::DeadLetter> letters;
  const absl::Time* server_clock = nullptr;  // the server's time is the test's clock
  int reads = 0;
};

std::string Header(const test::ProducedMessage& m, std::string_view name) {
  for (const auto& [n, v] : m.headers) {
    if (n == name) return v;
  }
  return "";
}

std::vector<std::string> Ids(const std::vector<test::ProducedMessage>& produced) {
  std::vector<std::string> out;
  for (const test::ProducedMessage& m : produced) out.push_back(Header(m, "id"));
  return out;
}

class RelayPipelineTest : public ::testing::Test {
 protected:
  RelayPipelineTest() {
    options_.make_sink = fake_.Factory();
    options_.feedback_interval = absl::Seconds(10);
    dead_letters_.server_clock = &now_;
  }

  Pipeline::Clock Clock() {
    return [this] {
      if (on_clock_) on_clock_();
      return now_;
    };
  }
  void Advance(absl::Duration d) { now_ += d; }

  // The pipeline and its first session, as Relay::Run and Relay::Connect make them.
  void Start(pg::Lsn slot_confirmed = 0) {
    gate_ = std::make_unique<DeadLetterGate>(&dead_letters_);
    pipeline_ = std::make_unique<Pipeline>(options_, gate_.get(), &stats_, &stop_, Clock(),
                                           [this](absl::Duration nap) { naps_.push_back(nap); });
    ASSERT_TRUE(pipeline_->Start().ok());
    Connect(slot_confirmed);
  }
  // A new session on a slot confirmed at `slot_confirmed`: the stream starts where
  // Pipeline::ResumeFrom says, and the slot sends the transactions ending after it.
  pg::Lsn Connect(pg::Lsn slot_confirmed) {
    auto stream = std::make_unique<test::ScriptedStream>(Clock());
    stream_ = stream.get();
    const pg::Lsn start = pipeline_->ResumeFrom(slot_confirmed);
    wal_.Attach(stream_, start);
    pipeline_->Stream(std::move(stream), start, options_.feedback_interval);
    return start;
  }
  // One turn of the relay's loop; the clock moves first by `after`.
  void Step(absl::Duration after = absl::ZeroDuration()) {
    Advance(after);
    absl::StatusOr<Pipeline::Turn> turn = pipeline_->Step();
    ASSERT_TRUE(turn.ok()) << turn.status();
  }
  // Enough clock for a moved watermark to be reported (feedback is coalesced to one
  // message per 10 ms).
  static constexpr absl::Duration kCoalesce = absl::Milliseconds(10);

  uint64_t TagOf(size_t produced_index) { return fake_->produced().at(produced_index).tag; }

  absl::Time now_ = absl::FromUnixSeconds(1796299200);
  // Runs at each reading of the clock: how a test acts while the pipeline is inside
  // one of its own waits.
  std::function<void()> on_clock_;
  std::vector<absl::Duration> naps_;  // the pipeline's backlog naps (the clock stays)
  RelayOptions options_;
  RelayStats stats_;
  StopSignal stop_;
  test::FakeSink::Handle fake_;
  MemoryDeadLetters dead_letters_;
  test::OutboxWal wal_;
  std::unique_ptr<DeadLetterGate> gate_;
  std::unique_ptr<Pipeline> pipeline_;
  test::ScriptedStream* stream_ = nullptr;  // owned by the pipeline
};

// A transaction is confirmed only once every one of its events is acknowledged, and
// nothing after an unacknowledged event is confirmed either.
TEST_F(RelayPipelineTest, NeverConfirmsPastAnUnacknowledgedEvent) {
  wal_.Commit({{.id = "e1", .aggregate_id = "A"}, {.id = "e2", .aggregate_id = "B"}});
  const pg::Lsn second = wal_.Commit({{.id = "e3", .aggregate_id = "C"}});
  Start();
  wal_.Send();
  Step();
  ASSERT_EQ(fake_->produced().size(), 3u);

  fake_->Ack(TagOf(0));  // e1; e2 of the same transaction is not acknowledged
  fake_->Ack(TagOf(2));  // e3, the whole second transaction
  Step(kCoalesce);
  Step(kCoalesce);
  EXPECT_EQ(pipeline_->watermark(), 0u);
  EXPECT_EQ(stream_->last_confirmed(), 0u);

  fake_->Ack(TagOf(1));
  Step(kCoalesce);
  EXPECT_EQ(stream_->last_confirmed(), second);
}

// The value of one series in Prometheus text, or -1 when it is missing.
double Gauge(const std::string& text, const std::string& series) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    double value = 0;
    if (absl::ConsumePrefix(&line, series + " ") && absl::SimpleAtod(line, &value)) return value;
  }
  return -1;
}

// --source both (the WAL-only outbox, outbox/emitted_event.h): an outboxd_emit message
// is an event of its transaction like a row, produced where it stands among the rows
// and confirmed only with them; other prefixes and non-transactional messages are
// not events. With --source table the same stream publishes the rows alone.
class WalOnlyPipelineTest : public RelayPipelineTest,
                            public ::testing::WithParamInterface<Source> {};

const outbox::EmitKey kEmitKey = outbox::KeyFromSecret("the key outboxd setup made");

TEST_P(WalOnlyPipelineTest, MessagesAreEventsOfTheirTransactionInPlace) {
  namespace bytes = test::pgoutput_bytes;
  options_.source = GetParam();
  Start();
  pipeline_->SetEmitKey(kEmitKey);
  const pg::Lsn commit = 0x2000000, end = 0x2000100;
  auto row = [](const std::string& id) {
    return bytes::Insert(test::OutboxWal::kRelationId,
                         {id, "A", "pedido.confirmado", "{}", "2026-12-03 15:40:00+00"});
  };
  const std::string m2 = "00000000-0000-4000-8000-000000000002";
  const std::string emitted = outbox::SignedContent({.id = m2,
                                                     .aggregate_id = "A",
                                                     .type = "pedido.confirmado",
                                                     .payload = "[2]",
                                                     .created_at = "2026-12-03 15:40:00.5+00"},
                                                    kEmitKey);
  stream_->PushData(0x1FFFF00, bytes::LogicalMessage(0x1FFFF00, false, "outboxd", emitted));
  stream_->PushData(commit, bytes::Begin(commit, 0, 900));
  stream_->PushData(commit, bytes::OutboxRelation(test::OutboxWal::kRelationId));
  stream_->PushData(commit, row("r1"));
  stream_->PushData(commit, bytes::LogicalMessage(commit - 0x80, true, "outboxd", emitted));
  stream_->PushData(commit, bytes::LogicalMessage(commit - 0x40, true, "other", emitted));
  stream_->PushData(commit, row("r3"));
  stream_->PushData(end, bytes::Commit(commit, end, 0));
  Step();
  if (GetParam() == Source::kTable) {
    EXPECT_THAT(Ids(fake_->produced()), ElementsAre("r1", "r3"));
    return;
  }
  ASSERT_THAT(Ids(fake_->produced()), ElementsAre("r1", m2, "r3"));
  const test::ProducedMessage& m = fake_->produced()[1];
  EXPECT_EQ(m.key, "A");
  EXPECT_EQ(m.value, "[2]");
  EXPECT_EQ(Header(m, "created_at"), "2026-12-03T15:40:00.5+00:00");
  fake_->Ack(TagOf(0));
  fake_->Ack(TagOf(2));
  Step(kCoalesce);
  EXPECT_EQ(stream_->last_confirmed(), 0u) << "the message is not acknowledged yet";
  fake_->Ack(TagOf(1));
  Step(kCoalesce);
  EXPECT_EQ(stream_->last_confirmed(), end);
}

// Every role may call pg_logical_emit_message: a message with outboxd's prefix that
// outboxd_emit did not sign (or signed with fields that break their rules) is counted
// by reason and logged once per 10 s, never produced and never dead-lettered (it would
// park the real aggregate it names); the signed events around it flow in order and the
// slot is confirmed past it.
TEST_F(RelayPipelineTest, ForgedMessagesAreCountedAndSkippedWhileSignedOnesFlowInOrder) {
  namespace bytes = test::pgoutput_bytes;
  options_.source = Source::kMessages;
  Start();
  pipeline_->SetEmitKey(kEmitKey);
  test::CapturedLog log;
  auto event = [](const std::string& id, std::string_view created_at) {
    return outbox::OutboxEvent{.id = id,
                               .aggregate_id = "A",
                               .type = "pedido.confirmado",
                               .payload = "{}",
                               .created_at = created_at};
  };
  auto id = [](int n) { return absl::StrCat("00000000-0000-4000-8000-0000000000", n); };
  const std::string forged[] = {
      outbox::EmittedContent(event(id(90), "2020-01-01 00:00:00+00")),  // unsigned
      outbox::SignedContent(event(id(91), "2020-01-01 00:00:00+00"),    // another key
                            outbox::KeyFromSecret("guessed")),
      outbox::SignedContent(event("not-a-uuid", "2026-12-03 15:40:00+00"), kEmitKey),
      outbox::SignedContent(event(id(92), "garbage"), kEmitKey),
      std::string(outbox::kMaxEmittedContent + 1, 'x'),
  };
  pg::Lsn lsn = 0x3000000;
  auto transaction = [&](const std::vector<std::string>& contents) {
    const pg::Lsn commit = lsn += 0x1000;
    stream_->PushData(commit, bytes::Begin(commit, 0, 900));
    for (const std::string& c : contents) {
      stream_->PushData(commit, bytes::LogicalMessage(commit - 0x80, true, "outboxd", c));
    }
    stream_->PushData(commit + 0x10, bytes::Commit(commit, commit + 0x10, 0));
    return commit + 0x10;
  };
  transaction({outbox::SignedContent(event(id(10), "2026-12-03 15:40:00+00"), kEmitKey)});
  for (const std::string& f : forged) transaction({f});
  transaction({forged[0], outbox::SignedContent(event(id(11), "2026-12-03 15:40:01+00"), kEmitKey),
               forged[1]});
  stream_->PushData(lsn, bytes::LogicalMessage(lsn, false, "outboxd",
                                               outbox::SignedContent(event(id(93), ""), kEmitKey)));
  const pg::Lsn last =
      transaction({outbox::SignedContent(event(id(12), "2026-12-03 15:40:02+00"), kEmitKey)});
  // The 1 MiB message ends a turn (kReadBytes).
  for (int turn = 0; turn < 3; ++turn) Step();
  ASSERT_THAT(Ids(fake_->produced()), ElementsAre(id(10), id(11), id(12)));
  EXPECT_TRUE(dead_letters_.letters.empty());
  for (size_t i = 0; i < fake_->produced().size(); ++i) fake_->Ack(TagOf(i));
  Step(kCoalesce);
  EXPECT_EQ(stream_->last_confirmed(), last);
  const std::string metrics = stats_.metrics.Render();
  auto rejected = [&](const char* reason) {
    return Gauge(metrics, absl::StrCat("outboxd_messages_rejected_total{reason=\"", reason, "\"}"));
  };
  EXPECT_EQ(rejected("unsigned"), 2);
  EXPECT_EQ(rejected("bad_signature"), 2);
  EXPECT_EQ(rejected("invalid_field"), 2);
  EXPECT_EQ(rejected("too_large"), 1);
  EXPECT_EQ(rejected("non_transactional"), 1);
  // One line at once, the other seven counted in one line 10 s later.
  std::string text = log.Take();
  EXPECT_THAT(text, HasSubstr("outboxd message at 0/3001F80 rejected (unsigned), not published"));
  EXPECT_THAT(text, Not(HasSubstr("more outboxd message(s) rejected")));
  Step(absl::Seconds(10));
  text = log.Take();
  EXPECT_THAT(text, HasSubstr("7 more outboxd message(s) rejected")) << text;
}

INSTANTIATE_TEST_SUITE_P(Sources, WalOnlyPipelineTest,
                         ::testing::Values(Source::kTable, Source::kBoth));

// Acknowledgements may come in any order (partitions, brokers); the confirmed position
// moves in commit order only.
TEST_F(RelayPipelineTest, ConfirmsInCommitOrderAcrossTransactionsAckedOutOfOrder) {
  const pg::Lsn first = wal_.Commit({{.id = "e1", .aggregate_id = "A"}});
  wal_.Commit({{.id = "e2", .aggregate_id = "B"}});
  const pg::Lsn third = wal_.Commit({{.id = "e3", .aggregate_id = "C"}});
  Start();
  wal_.Send();
  Step();
  ASSERT_EQ(fake_->produced().size(), 3u);

  fake_->Ack(TagOf(2));
  Step(kCoalesce);
  EXPECT_EQ(stream_->last_confirmed(), 0u) << "the third transaction's ack alone";
  fake_->Ack(TagOf(0));
  Step(kCoalesce);
  EXPECT_EQ(stream_->last_confirmed(), first);
  fake_->Ack(TagOf(1));
  Step(kCoalesce);
  EXPECT_EQ(stream_->last_confirmed(), third);
}

// With nothing in flight, a keepalive's position is confirmed (an idle outbox must
// not pin WAL); with an event in flight it is not.
TEST_F(RelayPipelineTest, ConfirmsAnIdleKeepaliveOnlyWhenNothingIsInFlight) {
  Start();
  stream_->PushKeepalive(0x800000, /*reply_requested=*/false);
  Step(kCoalesce);
  EXPECT_EQ(stream_->last_confirmed(), 0x800000u);

  const pg::Lsn tx = wal_.Commit({{.id = "e1", .aggregate_id = "A"}});
  wal_.Send();
  stream_->PushKeepalive(tx + 0x1000, /*reply_requested=*/false);
  Step(kCoalesce);
  Step(kCoalesce);
  EXPECT_EQ(stream_->last_confirmed(), 0x800000u) << "confirmed past an event in flight";

  fake_->AckAll();
  Step(kCoalesce);
  EXPECT_EQ(stream_->last_confirmed(), tx);
  stream_->PushKeepalive(tx + 0x2000, /*reply_requested=*/false);
  Step(kCoalesce);
  EXPECT_EQ(stream_->last_confirmed(), tx + 0x2000);
}

// An event the broker refuses for good goes to the dead-letter table; its aggregate's
// later events follow it there in order, while other aggregates are published, and
// the confirmed position moves past all of them.
TEST_F(RelayPipelineTest, DeadLetterParksItsAggregatesFollowersInOrderWhileOthersFlow) {
  fake_.set_answer([](const test::ProducedMessage& m) -> std::optional<absl::Status> {
    if (m.key == "A") return absl::InvalidArgumentError("message too large");
    return absl::OkStatus();
  });
  wal_.Commit({{.id = "a1", .aggregate_id = "A"}, {.id = "b1", .aggregate_id = "B"}});
  Start();
  wal_.Send();
  Step();
  ASSERT_THAT(dead_letters_.ids(), ElementsAre("a1"));
  EXPECT_EQ(dead_letters_.letters[0].error, "message too large");

  wal_.Commit({{.id = "a2", .aggregate_id = "A"}, {.id = "b2", .aggregate_id = "B"}});
  const pg::Lsn last = wal_.Commit({{.id = "a3", .aggregate_id = "A"}});
  wal_.Send();
  Step();
  Step(kCoalesce);

  EXPECT_THAT(dead_letters_.ids(), ElementsAre("a1", "a2", "a3"));
  EXPECT_THAT(Ids(fake_->produced()), ElementsAre("a1", "b1", "b2"))
      << "a2 and a3 must not be published after a1 failed";
  EXPECT_EQ(stream_->last_confirmed(), last);
}

// Issue 27 point 6: a NULL in a mapped column (an adopted table allowing it) made the
// relay exit, and meet the row again on every restart. Now it is a dead letter with
// the reason: a NULL aggregate parks no other event, a NULL payload parks its own
// aggregate's followers, and every other aggregate flows.
TEST_F(RelayPipelineTest, ARowWithANullInAMappedColumnIsADeadLetterAndOthersFlow) {
  fake_.set_answer(
      [](const test::ProducedMessage&) -> std::optional<absl::Status> { return absl::OkStatus(); });
  const pg::Lsn last = wal_.Commit({{.id = "n1", .aggregate_id = test::kNullValue},
                                    {.id = "a1", .aggregate_id = "A", .payload = test::kNullValue},
                                    {.id = "b1", .aggregate_id = "B"},
                                    {.id = test::kNullValue, .aggregate_id = test::kNullValue},
                                    {.id = "a2", .aggregate_id = "A"},
                                    {.id = "e1", .aggregate_id = ""}});
  Start();
  wal_.Send();
  Step();
  Step(kCoalesce);
  ASSERT_EQ(dead_letters_.letters.size(), 4u);
  const outbox::DeadLetter& null_aggregate = dead_letters_.letters[0];
  EXPECT_EQ(null_aggregate.id, "n1");
  EXPECT_THAT(null_aggregate.aggregate_id, ::testing::StartsWith("null@"));
  EXPECT_THAT(null_aggregate.error, HasSubstr("column aggregate_id is NULL"));
  EXPECT_THAT(null_aggregate.error, ::testing::StartsWith(outbox::kNullKeyError));
  EXPECT_TRUE(outbox::HasNullKey(null_aggregate));
  EXPECT_EQ(dead_letters_.letters[1].id, "a1");
  EXPECT_THAT(dead_letters_.letters[1].error, HasSubstr("column payload is NULL"));
  EXPECT_FALSE(outbox::HasNullKey(dead_letters_.letters[1]));
  EXPECT_THAT(dead_letters_.letters[2].id, ::testing::StartsWith("null@"));
  EXPECT_NE(dead_letters_.letters[0].aggregate_id, dead_letters_.letters[2].aggregate_id);
  EXPECT_EQ(dead_letters_.letters[3].id, "a2") << "follows a1";
  EXPECT_THAT(Ids(fake_->produced()), ElementsAre("b1", "e1"))
      << "the aggregate '' is not parked by a NULL one";
  EXPECT_EQ(stream_->last_confirmed(), last);
}

// What RepeatedFailure records when a session fails: the confirmed position and the
// commit time of the oldest transaction not confirmed; stuck, the metrics count one
// event in flight since then.
TEST_F(RelayPipelineTest, AStuckRelayShowsTheStuckTransactionsAgeAndAnEventInFlight) {
  fake_.set_answer([](const test::ProducedMessage&) -> std::optional<absl::Status> {
    return std::nullopt;  // no report yet
  });
  wal_.Commit({{.id = "a1", .aggregate_id = "A"}});
  Start();
  wal_.Send();
  Step();
  const FailurePoint at = pipeline_->failure_point();
  ASSERT_TRUE(at.commit_us.has_value());
  EXPECT_EQ(at.position, pipeline_->watermark());
  pipeline_->EndSession();
  std::string metrics = stats_.metrics.Render();
  EXPECT_THAT(metrics, HasSubstr("outboxd_events_in_flight 0\n"));
  pipeline_->SetStuck(at.commit_us);
  metrics = stats_.metrics.Render();
  EXPECT_THAT(metrics, HasSubstr("outboxd_events_in_flight 1\n"));
  EXPECT_THAT(metrics, ::testing::Not(HasSubstr("outboxd_oldest_unacked_age_seconds 0\n")));
  pipeline_->SetStuck(std::nullopt);
  EXPECT_THAT(stats_.metrics.Render(), HasSubstr("outboxd_events_in_flight 0\n"));
}

// A refused key dead-letters every event of its aggregate (a RabbitMQ exchange without
// a queue for it refuses them all): one error per parked aggregate, and the events that
// follow it summed up at most every 10 s, not an error line for each.
TEST_F(RelayPipelineTest, DeadLetteredFollowersAreCountedNotLoggedOneByOne) {
  fake_.set_answer([](const test::ProducedMessage& m) -> std::optional<absl::Status> {
    if (m.key == "C") return absl::OkStatus();
    return absl::InvalidArgumentError("no queue bound for routing key");
  });
  auto events = [](const std::string& aggregate, int from, int to) {
    std::vector<test::OutboxRow> rows;
    for (int i = from; i <= to; ++i) {
      rows.push_back({.id = absl::StrCat(aggregate, i), .aggregate_id = aggregate});
    }
    return rows;
  };
  test::CapturedLog log;
  wal_.Commit(events("A", 1, 200));
  wal_.Commit(events("B", 1, 50));
  wal_.Commit(events("C", 1, 10));
  Start();
  wal_.Send();
  Step();
  Step(kCoalesce);
  ASSERT_EQ(dead_letters_.letters.size(), 250u);
  std::string text = log.Take();
  auto count = [](const std::string& text, const std::string& what) {
    int n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count(text, "error event "), 2) << text;
  EXPECT_THAT(text, HasSubstr("error event A1 of aggregate A dead-lettered"));
  EXPECT_THAT(text, HasSubstr("error event B1 of aggregate B dead-lettered"));
  EXPECT_THAT(text, HasSubstr("error 248 more event(s) dead-lettered to"));

  // More followers: summed up once the interval has passed, not before.
  wal_.Commit(events("A", 201, 300));
  wal_.Send();
  Step();
  EXPECT_EQ(count(log.Take(), "dead-lettered"), 0);
  Step(absl::Seconds(10));
  text = log.Take();
  EXPECT_EQ(count(text, "dead-lettered"), 1) << text;
  EXPECT_THAT(text, HasSubstr("100 more event(s) dead-lettered to"));
  EXPECT_EQ(dead_letters_.letters.size(), 350u);
}

// Once `outboxd dead-letter replay` has emptied an aggregate's letters, the next event
// of that aggregate committed after the replay is published: the gate reads the table
// again for an event committed after its last read, not on a timer.
TEST_F(RelayPipelineTest, AReplayedAggregateIsFreeForItsVeryNextEvent) {
  fake_.set_answer([](const test::ProducedMessage& m) -> std::optional<absl::Status> {
    if (Header(m, "id") == "a1") return absl::InvalidArgumentError("message too large");
    return absl::OkStatus();
  });
  wal_.Commit({{.id = "a1", .aggregate_id = "A"}});
  Start();
  wal_.Send();
  Step();
  wal_.Commit({{.id = "a2", .aggregate_id = "A"}});
  wal_.Send();
  Step();
  ASSERT_THAT(dead_letters_.ids(), ElementsAre("a1", "a2"));

  Advance(absl::Milliseconds(1));
  dead_letters_.letters.clear();  // the replay published and deleted them, and returned
  Advance(absl::Milliseconds(1));
  const pg::Lsn last = wal_.Commit({{.id = "a3", .aggregate_id = "A"}}, now_);
  wal_.Send();
  Step();
  Step(kCoalesce);

  EXPECT_TRUE(dead_letters_.letters.empty());
  EXPECT_THAT(Ids(fake_->produced()), ElementsAre("a1", "a3"));
  EXPECT_EQ(stream_->last_confirmed(), last);
}

// A backlog of a parked aggregate, committed before the gate's last read, follows its
// dead letter on what was read: one read of the table for the whole backlog.
TEST_F(RelayPipelineTest, ABacklogOfAParkedAggregateIsDecidedOnOneRead) {
  wal_.Commit({{.id = "a0", .aggregate_id = "A", .payload = "42"}});  // a JSON scalar
  for (int i = 1; i < 100; ++i) {
    wal_.Commit({{.id = absl::StrCat("a", i), .aggregate_id = "A"}});
  }
  Start();
  const int reads_before = dead_letters_.reads;
  Advance(absl::Milliseconds(1));
  wal_.Send();
  Step();
  Step(kCoalesce);

  EXPECT_EQ(dead_letters_.letters.size(), 100u);
  EXPECT_LE(dead_letters_.reads - reads_before, 1);
}

// Issue 27 point 3: the table keeps a 6.4 kB or non-UTF-8 aggregate as a stand-in, and
// the gate parks and looks it up by that stored key, across a refresh too; its own
// first letter's transaction is told apart by the stored id.
TEST_F(RelayPipelineTest, AnAggregateStoredAsAStandInStaysParkedAcrossARefresh) {
  const std::string huge(outbox::kMaxStoredKeyBytes + 1, 'k');  // past what is kept as is
  const std::string bytes = "agg-\xff\xfe";
  fake_.set_answer([&](const test::ProducedMessage& m) -> std::optional<absl::Status> {
    if (m.key == huge) return absl::InvalidArgumentError("message too large");
    return absl::OkStatus();
  });
  wal_.Commit({{.id = "h1", .aggregate_id = huge}, {.id = "x1", .aggregate_id = bytes}});
  Start();
  wal_.Send();
  Step();
  wal_.Commit({{.id = "h2", .aggregate_id = huge}});
  wal_.Send();
  Step();
  ASSERT_THAT(dead_letters_.ids(), ElementsAre("h1", "h2"));
  // Committed after the gate's last read: it reads the table again, whose keys are
  // stand-ins.
  Advance(absl::Seconds(3));
  const int reads = dead_letters_.reads;
  const pg::Lsn last = wal_.Commit(
      {{.id = "h3", .aggregate_id = huge}, {.id = "x2", .aggregate_id = bytes}}, now_);
  wal_.Send();
  Step();
  Step(kCoalesce);
  EXPECT_THAT(dead_letters_.ids(), ElementsAre("h1", "h2", "h3"));
  EXPECT_THAT(Ids(fake_->produced()), ElementsAre("h1", "x1", "x2"));
  EXPECT_EQ(stream_->last_confirmed(), last);
  EXPECT_GT(dead_letters_.reads, reads);
}

// Reading pauses while the events in flight reach --max-in-flight, and resumes as
// acknowledgements make room.
TEST_F(RelayPipelineTest, FlowControlPausesAtTheEventLimitAndResumes) {
  options_.max_in_flight = 2;
  for (const char* id : {"e1", "e2", "e3", "e4"}) wal_.Commit({{.id = id, .aggregate_id = id}});
  Start();
  wal_.Send();
  Step();
  Step();
  EXPECT_EQ(fake_->produced().size(), 2u);
  EXPECT_GT(stream_->unread(), 0u) << "the stream must be left unread while full";

  fake_->Ack(TagOf(0));
  Step();  // serves the ack
  Step();  // reads again
  EXPECT_EQ(fake_->produced().size(), 3u);
  fake_->AckAll();
  Step();
  Step();
  EXPECT_EQ(fake_->produced().size(), 4u);
}

// The same for --max-in-flight-bytes: whatever the events' size, memory stays bounded.
TEST_F(RelayPipelineTest, FlowControlPausesAtTheByteLimitAndResumes) {
  options_.max_in_flight_bytes = 1;  // one event of any size fills it
  for (const char* id : {"e1", "e2", "e3"}) wal_.Commit({{.id = id, .aggregate_id = id}});
  Start();
  wal_.Send();
  Step();
  Step();
  EXPECT_EQ(fake_->produced().size(), 1u);
  EXPECT_GT(stream_->unread(), 0u);

  fake_->AckAll();
  Step();
  Step();
  EXPECT_EQ(fake_->produced().size(), 2u);
}

// Acknowledgements close together make one feedback message, not one each; a
// keepalive that asks for a reply gets one at once.
TEST_F(RelayPipelineTest, FeedbackIsCoalesced) {
  wal_.Commit({{.id = "e1", .aggregate_id = "A"}});
  const pg::Lsn second = wal_.Commit({{.id = "e2", .aggregate_id = "B"}});
  Start();
  wal_.Send();
  Step();  // the session's first feedback
  const size_t sent = stream_->feedback().size();

  fake_->Ack(TagOf(0));
  Step(absl::Milliseconds(4));
  fake_->Ack(TagOf(1));
  Step(absl::Milliseconds(4));
  EXPECT_EQ(stream_->feedback().size(), sent) << "feedback within 10 ms of the last one";
  Step(absl::Milliseconds(2));
  ASSERT_EQ(stream_->feedback().size(), sent + 1);
  EXPECT_EQ(stream_->last_confirmed(), second);

  stream_->PushKeepalive(second, /*reply_requested=*/true);
  Step();
  EXPECT_EQ(stream_->feedback().size(), sent + 2) << "a requested reply waits for nothing";
}

// A stop waits for the acknowledgements in flight, confirms them in a last feedback
// message, and only then ends the stream; what is still unacknowledged when the
// shutdown timeout passes is counted as abandoned (sent again on the next start).
TEST_F(RelayPipelineTest, ShutdownConfirmsTheAcknowledgedBeforeEndingTheStream) {
  const pg::Lsn first = wal_.Commit({{.id = "e1", .aggregate_id = "A"}});
  wal_.Commit({{.id = "e2", .aggregate_id = "B"}});
  options_.shutdown_timeout = absl::Milliseconds(50);
  Start();
  wal_.Send();
  Step();
  ASSERT_EQ(fake_->produced().size(), 2u);

  fake_->Ack(TagOf(0));  // arrives during the shutdown's wait; e2 never does
  ASSERT_TRUE(pipeline_->Shutdown().ok());

  EXPECT_TRUE(stream_->ended());
  EXPECT_EQ(stream_->feedback_before_end(), stream_->feedback().size())
      << "feedback after the stream ended";
  EXPECT_EQ(stream_->last_confirmed(), first);
  EXPECT_EQ(stats_.events_abandoned, 1u);
}

// A sink that refuses for now (RabbitMQ's connection.blocked under a memory alarm,
// a full librdkafka queue) holds the pipeline inside Produce for as long as it
// lasts. /metrics and /healthz must follow meanwhile: the events read show in flight,
// their age grows, and the wait turns into a stall /healthz reports.
TEST_F(RelayPipelineTest, StatsKeepMovingWhileTheSinkRefusesForNow) {
  wal_.Commit({{.id = "e1", .aggregate_id = "A"}, {.id = "e2", .aggregate_id = "B"}});
  fake_.set_answer([this](const test::ProducedMessage&) -> std::optional<absl::Status> {
    // e1 is taken (and never acknowledged); the broker blocks before e2.
    fake_->RefuseProduce(absl::ResourceExhaustedError("the broker blocked the connection"));
    return std::nullopt;
  });
  Start();
  const absl::Time started = now_;
  std::vector<observe::HealthInputs> seen;
  on_clock_ = [&] {
    if (fake_->produced().empty()) return;
    now_ += absl::Seconds(1);
    seen.push_back(stats_.health.Snapshot());
    if (now_ - started > absl::Seconds(60)) stop_.Notify();
  };
  wal_.Send();
  absl::StatusOr<Pipeline::Turn> turn = pipeline_->Step();
  on_clock_ = nullptr;
  ASSERT_EQ(turn.status().code(), absl::StatusCode::kCancelled) << turn.status();
  ASSERT_EQ(fake_->produced().size(), 1u);
  ASSERT_FALSE(seen.empty());
  // e1 at the broker, e2 waiting for room: both read, neither acknowledged.
  EXPECT_EQ(seen.back().in_flight, 2u) << "/healthz froze on the figures before the wait";
  const observe::HealthVerdict verdict =
      observe::CheckHealth(stats_.health.Snapshot(), absl::Seconds(30), now_);
  EXPECT_FALSE(verdict.healthy) << "a minute blocked with an event in flight: " << verdict.reason;
  const std::string metrics = stats_.metrics.Render();
  EXPECT_EQ(Gauge(metrics, "outboxd_events_in_flight"), 2);
  // Rendered against the real clock: the scripted commit is hours old.
  EXPECT_GT(Gauge(metrics, "outboxd_oldest_unacked_age_seconds"), 0);
  EXPECT_EQ(pipeline_->watermark(), 0u);
}

// The feedback interval is a third of wal_sender_timeout when that is shorter than
// the configured one.
TEST(RelayFeedbackInterval, IsAThirdOfTheWalSenderTimeoutWhenShorter) {
  EXPECT_EQ(ChooseFeedbackInterval(absl::Seconds(10), absl::Seconds(60)), absl::Seconds(10));
  EXPECT_EQ(ChooseFeedbackInterval(absl::Seconds(10), absl::Seconds(6)), absl::Seconds(2));
  EXPECT_EQ(ChooseFeedbackInterval(absl::Seconds(10), absl::ZeroDuration()), absl::Seconds(10))
      << "wal_sender_timeout 0 disables the server's timeout";
}

// A walsender decoding a large transaction of other tables reads reply requests only
// every wal_sender_timeout / 2: the stream's receive timeout is never shorter than
// wal_sender_timeout, or such a transaction would look like a dead path for ever.
TEST(RelayReceiveTimeout, IsAtLeastTheWalSenderTimeoutAndZeroStaysOff) {
  EXPECT_EQ(ChooseReceiveTimeout(absl::Seconds(30), absl::Seconds(60)), absl::Seconds(60));
  EXPECT_EQ(ChooseReceiveTimeout(absl::Seconds(30), absl::Seconds(5)), absl::Seconds(30));
  EXPECT_EQ(ChooseReceiveTimeout(absl::ZeroDuration(), absl::Seconds(60)), absl::ZeroDuration());
  EXPECT_EQ(ChooseReceiveTimeout(absl::Seconds(2), absl::ZeroDuration()), absl::Seconds(2));
}

// While flow control holds the stream unread and nothing is acknowledged, the relay
// still speaks within every feedback interval (a third of wal_sender_timeout): the
// walsender never takes it for dead. Timer feedback asks for a reply.
TEST_F(RelayPipelineTest, FeedbackIsSentBeforeTheWalSenderTimeoutWhilePaused) {
  const absl::Duration wal_sender_timeout = absl::Seconds(6);
  options_.feedback_interval = ChooseFeedbackInterval(absl::Seconds(10), wal_sender_timeout);
  options_.max_in_flight = 1;
  wal_.Commit({{.id = "e1", .aggregate_id = "A"}});
  wal_.Commit({{.id = "e2", .aggregate_id = "B"}});
  Start();
  wal_.Send();
  for (int turn = 0; turn < 300; ++turn) Step(absl::Milliseconds(100));  // 30 s paused

  ASSERT_EQ(fake_->produced().size(), 1u) << "still paused";
  const std::vector<test::ScriptedStream::SentFeedback>& sent = stream_->feedback();
  ASSERT_GE(sent.size(), 10u);
  for (size_t i = 1; i < sent.size(); ++i) {
    EXPECT_LE(sent[i].at - sent[i - 1].at, options_.feedback_interval) << "gap before #" << i;
    EXPECT_LT(sent[i].at - sent[i - 1].at, wal_sender_timeout) << "gap before #" << i;
    EXPECT_TRUE(sent[i].reply_requested) << "timer feedback #" << i;
  }
  EXPECT_LT(now_ - sent.back().at, wal_sender_timeout);
}

// A sink that fails for good in the middle of a transaction (its second event): the
// session ends, a new sink is made, and the stream starts again from the confirmed
// position, so the whole transaction is sent again and nothing before it.
TEST_F(RelayPipelineTest, SinkFailureMidTransactionResendsFromTheConfirmedPosition) {
  bool broken = true;
  fake_.set_answer([&](const test::ProducedMessage& m) -> std::optional<absl::Status> {
    if (broken && Header(m, "id") == "e3") {
      fake_->RaiseFatalErrorForTesting("fenced");
      return absl::AbortedError("fatal: fenced");
    }
    return absl::OkStatus();
  });
  const pg::Lsn first = wal_.Commit({{.id = "e1", .aggregate_id = "A"}});
  const pg::Lsn second =
      wal_.Commit({{.id = "e2", .aggregate_id = "B"}, {.id = "e3", .aggregate_id = "C"}});
  Start();
  wal_.Send();
  absl::StatusOr<Pipeline::Turn> turn = pipeline_->Step();
  ASSERT_EQ(turn.status().code(), absl::StatusCode::kAborted) << turn.status();
  EXPECT_EQ(pipeline_->watermark(), first) << "e2 acknowledged, e3 not: tx 2 unconfirmed";

  // What Relay::Run does on Aborted: end the session, new sink, reconnect.
  pipeline_->EndSession();
  ASSERT_TRUE(pipeline_->RecreateSink().ok());
  broken = false;
  const pg::Lsn start = Connect(/*slot_confirmed=*/0);  // the slot lags: feedback was lost
  EXPECT_EQ(start, first);
  wal_.Send();
  Step();
  Step(kCoalesce);

  EXPECT_EQ(fake_.created(), 2);
  EXPECT_THAT(Ids(fake_->produced()), ElementsAre("e2", "e3"));
  EXPECT_EQ(stream_->last_confirmed(), second);
}

// --standby-slot: a transaction reaches the sink only once the named standbys have
// flushed past its commit (issue 16); until then the stream is not read further.
TEST_F(RelayPipelineTest, StandbySlotHoldsEachTransactionUntilTheStandbysFlushedItsCommit) {
  options_.standby_slots = {"node_b"};
  const pg::Lsn first = wal_.Commit({{.id = "e1", .aggregate_id = "A"}});
  const pg::Lsn second = wal_.Commit({{.id = "e2", .aggregate_id = "A"}});
  Start();
  wal_.Send();
  Step();
  EXPECT_TRUE(fake_->produced().empty());
  EXPECT_TRUE(pipeline_->holding());
  pipeline_->SetStandbys({{.slot = "standby", .flush = first - 1}});
  Step();
  EXPECT_TRUE(fake_->produced().empty());
  pipeline_->SetStandbys({{.slot = "standby", .flush = first}});
  Step();
  EXPECT_THAT(Ids(fake_->produced()), ElementsAre("e1"));
  pipeline_->SetStandbys({{.slot = "standby", .flush = second}});
  Step();
  EXPECT_THAT(Ids(fake_->produced()), ElementsAre("e1", "e2"));
  EXPECT_FALSE(pipeline_->holding());
}

// Issue 27 point 5: a transaction held for the standbys keeps at most
// --max-in-flight-bytes in memory (the rest waits in a file), and once the standbys
// have it flows out in order under the same flow control as a stream.
TEST_F(RelayPipelineTest, AHeldTransactionLargerThanTheByteLimitFlowsOutInOrder) {
  options_.standby_slots = {"node_b"};
  options_.max_in_flight_bytes = 4096;
  options_.max_in_flight = 50;
  std::vector<test::OutboxRow> rows;
  for (int i = 0; i < 300; ++i) {
    rows.push_back({.id = absl::StrCat("e", i),
                    .aggregate_id = "A",
                    .payload = absl::StrCat(R"({"pad": ")", std::string(200, 'x'), R"("})")});
  }
  const pg::Lsn end = wal_.Commit(rows);
  Start();
  wal_.Send();
  Step();
  ASSERT_TRUE(pipeline_->holding());
  EXPECT_TRUE(fake_->produced().empty());
  EXPECT_EQ(Gauge(stats_.metrics.Render(), "outboxd_events_in_flight"), 300);

  pipeline_->SetStandbys({{.slot = "standby", .flush = end}});
  for (int turn = 0; turn < 100 && pipeline_->holding(); ++turn) {
    Step();
    EXPECT_LE(pipeline_->events_in_flight(), 50u) << "flow control while the hold drains";
    for (size_t i = 0; i < fake_->produced().size(); ++i) fake_->Ack(TagOf(i));
  }
  EXPECT_FALSE(pipeline_->holding());
  std::vector<std::string> expected;
  for (const test::OutboxRow& row : rows) expected.push_back(row.id);
  EXPECT_EQ(Ids(fake_->produced()), expected);
}

// Issue 28 point 8: events held for the standbys are unacknowledged too. A stop while
// three are held counted 0 ("stopped cleanly") and /metrics one in flight.
TEST_F(RelayPipelineTest, HeldEventsCountAsInFlightAndAtTheStop) {
  options_.standby_slots = {"node_b"};
  options_.shutdown_timeout = absl::Milliseconds(50);
  wal_.Commit({{.id = "e1", .aggregate_id = "A"},
               {.id = "e2", .aggregate_id = "B"},
               {.id = "e3", .aggregate_id = "C"}});
  Start();
  wal_.Send();
  Step();
  ASSERT_TRUE(pipeline_->holding());
  EXPECT_EQ(Gauge(stats_.metrics.Render(), "outboxd_events_in_flight"), 3);
  EXPECT_EQ(stats_.health.Snapshot().in_flight, 3u);

  test::CapturedLog log;
  ASSERT_TRUE(pipeline_->Shutdown().ok());
  EXPECT_TRUE(fake_->produced().empty());
  EXPECT_EQ(stats_.events_abandoned, 3u);
  EXPECT_THAT(log.Take(), HasSubstr("3 events still unacknowledged (3 held for the standbys)"));
}

// --standby-slot keeps a copy of each message of a held transaction, but none of a
// logical message it would skip (another prefix) or refuse for its size: a role that
// writes a large one makes the relay hold no more memory for it.
TEST_F(RelayPipelineTest, StandbySlotHoldsNoCopyOfAMessageItWillNotPublish) {
  namespace bytes = test::pgoutput_bytes;
  options_.standby_slots = {"node_b"};
  options_.source = Source::kMessages;
  Start();
  pipeline_->SetEmitKey(kEmitKey);
  const pg::Lsn commit = 0x4000000, end = 0x4000100;
  const std::string id = "00000000-0000-4000-8000-000000000040";
  stream_->PushData(commit, bytes::Begin(commit, 0, 900));
  stream_->PushData(commit,
                    bytes::LogicalMessage(commit - 0x90, true, "other", std::string(4 << 20, 'y')));
  stream_->PushData(
      commit, bytes::LogicalMessage(commit - 0x80, true, "outboxd", std::string(2 << 20, 'x')));
  stream_->PushData(
      commit, bytes::LogicalMessage(commit - 0x40, true, "outboxd",
                                    outbox::SignedContent({.id = id,
                                                           .aggregate_id = "A",
                                                           .type = "pedido.confirmado",
                                                           .payload = "{}",
                                                           .created_at = "2026-12-03 15:40:00+00"},
                                                          kEmitKey)));
  stream_->PushData(end, bytes::Commit(commit, end, 0));
  size_t largest = 0;
  for (int turn = 0; turn < 4 && !pipeline_->holding(); ++turn) {
    largest = std::max(largest, outboxd::testing::LargestAllocationDuring([&] { Step(); }));
  }
  ASSERT_TRUE(pipeline_->holding());
  EXPECT_LT(largest, 64u << 10) << "a copy of the 4 or 2 MiB message was held";
  pipeline_->SetStandbys({{.slot = "standby", .flush = end}});
  Step();
  EXPECT_THAT(Ids(fake_->produced()), ElementsAre(id));
  EXPECT_EQ(
      Gauge(stats_.metrics.Render(), R"(outboxd_messages_rejected_total{reason="too_large"})"), 1);
}

// Issue 17 point 2: nothing in the loop holds a message that has arrived. Several
// transactions read in one turn, committed just now, are live traffic (5,000 events/s
// reads them so): the sink is told to send at once, with no backlog nap first.
TEST_F(RelayPipelineTest, ALiveBurstIsSentAtOnceNotNappedOn) {
  for (const char* id : {"e1", "e2", "e3", "e4"}) wal_.Commit({{.id = id, .aggregate_id = id}});
  Start();
  wal_.Send();  // 13 messages: over the backlog batch of 8
  Step();
  EXPECT_EQ(fake_->produced().size(), 4u);
  EXPECT_EQ(fake_->send_nows(), 1);
  EXPECT_TRUE(naps_.empty());
}

// The same read of transactions committed a second ago is a backlog: the relay naps
// to let it gather (CPU per event in a catch-up), and leaves the batching to the sink.
TEST_F(RelayPipelineTest, AnOldBacklogIsNappedOnNotSentAtOnce) {
  for (const char* id : {"e1", "e2", "e3", "e4"}) wal_.Commit({{.id = id, .aggregate_id = id}});
  Start();
  wal_.Send();
  Step(absl::Seconds(1));
  EXPECT_EQ(fake_->produced().size(), 4u);
  EXPECT_EQ(naps_.size(), 1u);
  EXPECT_EQ(fake_->send_nows(), 0);
}

// The bulk catch-up reads in FETCH batches: a turn that ends short there is a chunk's
// tail (or a slow server), not a trickle to let gather. Its last events go at once and
// their acknowledgements, which the slot's advance and the next chunk wait for, are
// not held behind a 50 ms nap.
TEST_F(RelayPipelineTest, ABatchedStreamsTailIsNotNappedOnNorItsConfirmationsCoalesced) {
  pg::Lsn end = 0;
  for (const char* id : {"e1", "e2", "e3", "e4"}) {
    end = wal_.Commit({{.id = id, .aggregate_id = id}});
  }
  Start();
  stream_->set_batched(true);
  pipeline_->CatchUpTo(end + 1000);
  wal_.Send();
  Step(absl::Seconds(1));  // an old backlog, below the catch-up position
  EXPECT_EQ(fake_->produced().size(), 4u);
  EXPECT_TRUE(naps_.empty());
  EXPECT_EQ(fake_->send_nows(), 1);
  // Its confirmations are not coalesced either: each acknowledgement is passed on in
  // the same instant (a walsender's would wait 10 ms for the next).
  const size_t before = stream_->feedback().size();
  fake_->Ack(TagOf(0));
  Step();
  fake_->Ack(TagOf(1));
  Step();
  ASSERT_EQ(stream_->feedback().size(), before + 2);
  const auto& first = stream_->feedback()[before];
  const auto& second = stream_->feedback()[before + 1];
  EXPECT_LT(first.confirmed, second.confirmed);
  EXPECT_EQ(first.at, second.at);
}

// Live, each turn hands what it read to the sink and returns to the stream without
// waiting on the sink: a transaction that commits while the earlier ones are still
// unacknowledged is read and produced on the next turn. (A blocking flush after each
// live read held such a transaction until the acknowledgement or 1 ms.)
TEST_F(RelayPipelineTest, LiveTurnsNeverWaitOnTheSink) {
  Start();
  for (int i = 0; i < 5; ++i) {
    wal_.Commit({{.id = absl::StrCat("e", i), .aggregate_id = "A"}});
    wal_.Send();
    Step(absl::Milliseconds(1));
    EXPECT_EQ(fake_->produced().size(), static_cast<size_t>(i + 1));
  }
  EXPECT_EQ(pipeline_->events_in_flight(), 5u);  // no acknowledgement came meanwhile
  EXPECT_EQ(fake_->waits(), 0);
  EXPECT_EQ(fake_->send_nows(), 5);
}

TEST(BacklogNapTest, NapsLongerOnlyBelowThePositionTheSessionCatchesUpTo) {
  constexpr ReadEnd kIdle = ReadEnd::kStreamIdle;
  const absl::Duration usual = BacklogNap(kIdle, /*received=*/500, /*catch_up_to=*/0);
  EXPECT_GT(usual, absl::ZeroDuration());
  // Behind the server's position at connect: a longer nap, so bursts fill requests.
  EXPECT_GT(BacklogNap(kIdle, 500, 1000), usual);
  // Read that far: back to the usual nap (writers keep the stream busy, not a backlog).
  EXPECT_EQ(BacklogNap(kIdle, 1000, 1000), usual);
  EXPECT_EQ(BacklogNap(kIdle, 1500, 1000), usual);
  // A read that stopped at the turn's limit has more waiting: no nap at all.
  EXPECT_EQ(BacklogNap(ReadEnd::kTurnLimit, 500, 1000), absl::ZeroDuration());
}

// A catch-up turn reads up to 20,000 messages, and produces what it reads before any
// delivery report is served; large events would make that turn's memory unbounded
// but for the in-flight limits. A turn stops at its byte cap (512 KiB) instead, and
// the next turn, at once, reads on.
TEST_F(RelayPipelineTest, ACatchUpTurnStopsReadingAtItsByteCap) {
  const std::string payload = absl::StrCat("{\"blob\": \"", std::string(200 << 10, 'x'), "\"}");
  pg::Lsn end = 0;
  for (const char* id : {"e1", "e2", "e3", "e4", "e5", "e6"}) {
    end = wal_.Commit({{.id = id, .aggregate_id = id, .payload = payload}});
  }
  Start();
  pipeline_->CatchUpTo(end);
  wal_.Send();             // 1.2 MiB of rows, 19 messages
  Step(absl::Seconds(1));  // an old backlog
  EXPECT_EQ(fake_->produced().size(), 3u) << "the third 200 KiB row passes 512 KiB";
  EXPECT_GT(stream_->unread(), 0u);
  Step(absl::Seconds(1));
  Step(absl::Seconds(1));
  EXPECT_EQ(fake_->produced().size(), 6u);
  EXPECT_EQ(stream_->unread(), 0u);
}

// --dedupe (relay/resume_dedupe.h): in the window a restart re-reads (up to the
// server's position at connect), an event is skipped only when the broker holds that
// very id: e2 is missing though e3 after it is there (a gap: a dead letter, a message
// too large), so e2 is sent again and e3 is not. Past the window nothing is asked.
TEST_F(RelayPipelineTest, AResumedWindowSkipsExactlyTheEventsTheBrokerHoldsById) {
  wal_.Commit({{.id = "e1", .aggregate_id = "A"}});
  const pg::Lsn second =
      wal_.Commit({{.id = "e2", .aggregate_id = "B"}, {.id = "e3", .aggregate_id = "C"}});
  const pg::Lsn third = wal_.Commit({{.id = "e4", .aggregate_id = "A"}});
  Start();
  fake_->SetHeld({{"e1", "A"}, {"e3", "C"}, {"e4", "A"}});
  pipeline_->SetSlotMark("app/outboxd");
  pipeline_->ResumeWindow(/*start=*/0, /*server=*/second);
  wal_.Send();
  Step();
  EXPECT_THAT(Ids(fake_->produced()), ElementsAre("e2", "e4"));
  EXPECT_THAT(fake_->held_asked(), ElementsAre("e1", "e2", "e3")) << "e4 is past the window";
  EXPECT_EQ(Header(fake_->produced()[0], "outboxd_slot"), "app/outboxd");
  fake_->AckAll();
  Step(kCoalesce);
  EXPECT_EQ(stream_->last_confirmed(), third) << "a skipped event counts as acknowledged";
  EXPECT_EQ(Gauge(stats_.metrics.Render(), "outboxd_dedupe_skipped_total"), 2);
}

// Two rows with one id on two aggregates, the first's message at the broker: the
// second is sent, never skipped for the first's (the broker is asked about the very
// message, id and key, sink::HeldQuery).
TEST_F(RelayPipelineTest, ASecondRowWithTheSameIdIsNeverSkippedForTheFirstsMessage) {
  wal_.Commit({{.id = "dup", .aggregate_id = "A"}});
  const pg::Lsn end = wal_.Commit({{.id = "dup", .aggregate_id = "B"}});
  Start();
  fake_->SetHeld({{"dup", "A"}});
  pipeline_->SetSlotMark("app/outboxd");
  pipeline_->ResumeWindow(/*start=*/0, /*server=*/end);
  wal_.Send();
  Step();
  ASSERT_EQ(fake_->produced().size(), 1u);
  EXPECT_EQ(fake_->produced()[0].key, "B");
  EXPECT_THAT(fake_->held_asked(), ElementsAre("dup", "dup"));
}

// A window's event was committed at its transaction's commit time, so its message was
// made after that: the question says so, less a margin for the relay's and the
// server's clocks, and the read-back can stop at older messages (kafka/read_back.h).
TEST_F(RelayPipelineTest, AResumedEventsQuestionBoundsTheReadBackByItsCommitTime) {
  const absl::Time committed = absl::FromUnixSeconds(1800000000);
  const pg::Lsn end = wal_.Commit({{.id = "e1", .aggregate_id = "A"}}, committed);
  Start();
  fake_->SetHeld({});
  pipeline_->SetSlotMark("app/outboxd");
  pipeline_->ResumeWindow(/*start=*/0, /*server=*/end);
  wal_.Send();
  Step();
  EXPECT_THAT(fake_->held_not_before(), ElementsAre(absl::ToUnixMillis(committed) - 5000));
}

// A topic the sink could not read back whole: said once and counted per reason, and
// its events are sent as before (at least once).
TEST_F(RelayPipelineTest, AReadBackFallbackIsCountedOnceAndItsEventsAreSent) {
  const pg::Lsn end =
      wal_.Commit({{.id = "e1", .aggregate_id = "A"}, {.id = "e2", .aggregate_id = "B"}});
  Start();
  fake_->SetHeld({}, {{"retention", "partition 0: deleted"}});
  pipeline_->SetSlotMark("app/outboxd");
  pipeline_->ResumeWindow(/*start=*/0, /*server=*/end);
  wal_.Send();
  Step();
  EXPECT_THAT(Ids(fake_->produced()), ElementsAre("e1", "e2"));
  EXPECT_EQ(Gauge(stats_.metrics.Render(), "outboxd_dedupe_fallbacks_total{reason=\"retention\"}"),
            1);
}

// --dedupe off, a sink that cannot be read back (RabbitMQ), or messages without this
// relay's mark: every event of the window is sent again, nothing asked.
TEST_F(RelayPipelineTest, WithoutAWindowEveryEventIsSentAgain) {
  options_.dedupe = Dedupe::kOff;
  const pg::Lsn end = wal_.Commit({{.id = "e1", .aggregate_id = "A"}});
  Start();
  fake_->SetHeld({{"e1", "A"}});
  pipeline_->SetSlotMark("app/outboxd");
  pipeline_->ResumeWindow(/*start=*/0, /*server=*/end);
  wal_.Send();
  Step();
  EXPECT_THAT(Ids(fake_->produced()), ElementsAre("e1"));
  EXPECT_THAT(fake_->held_asked(), ElementsAre());
}

TEST_F(RelayPipelineTest, ASinkThatCannotBeReadBackGetsEveryEventAgain) {
  wal_.Commit({{.id = "e1", .aggregate_id = "A"}});
  const pg::Lsn end = wal_.Commit({{.id = "e2", .aggregate_id = "A"}});
  Start();
  pipeline_->SetSlotMark("app/outboxd");
  pipeline_->ResumeWindow(/*start=*/0, /*server=*/end);
  wal_.Send();
  Step();
  EXPECT_THAT(Ids(fake_->produced()), ElementsAre("e1", "e2"));
}

}  // namespace
}  // namespace outboxd::relay
