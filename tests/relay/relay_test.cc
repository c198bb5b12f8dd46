// Relay (relay/relay.h) in process, on a scripted PostgreSQL side
// (tests/relay/fake_session.h) and the fake sink: a lost stream reconnects, an error
// before the slot was ever reached is the configuration's, a slot held by another
// relay means standing by, a new server history (a failover) resumes from the slot's
// position, and a bulk catch-up that failed for good makes the next session stream.
#include "relay/relay.h"

#include <deque>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "pg/connection.h"
#include "relay/catch_up_plan.h"
#include "relay/fake_session.h"
#include "support/fake_sink.h"

namespace outboxd::relay {
namespace {

using test::SessionScript;

// The stream sends a keepalive at `lsn`: with nothing in flight, it is confirmed.
std::function<void(test::ScriptedStream&)> KeepaliveAt(pg::Lsn lsn) {
  return [lsn](test::ScriptedStream& s) { s.PushKeepalive(lsn, /*reply_requested=*/false); };
}

// A counter of the relay's /metrics, 0 when absent.
double Counter(const RelayStats& stats, const std::string& name) {
  const std::string text = stats.metrics.Render();
  const size_t at = text.find("\n" + name + " ");
  if (at == std::string::npos) return 0;
  return std::stod(text.substr(at + name.size() + 2));
}

class RelayTest : public ::testing::Test {
 protected:
  RelayTest() {
    options_.make_sink = fake_.Factory();
    options_.reconnect_base = absl::Milliseconds(1);
    options_.reconnect_cap = absl::Milliseconds(1);
    options_.standby_poll = absl::Milliseconds(1);
    options_.shutdown_timeout = absl::ZeroDuration();
  }
  // Runs a new relay over `scripts` until they run out.
  absl::Status Run(std::deque<SessionScript> scripts, std::function<void()> on_open = nullptr) {
    relay_.reset();
    stop_ = std::make_unique<StopSignal>();
    stats_ = std::make_unique<RelayStats>();
    relay_ = std::make_unique<Relay>(options_, stats_.get(), stop_.get(),
                                     test::FakeSession::Factory(scripts, stop_.get(), &session_));
    if (on_open) session_->set_on_open(std::move(on_open));
    return relay_->Run();
  }

  RelayOptions options_;
  std::unique_ptr<StopSignal> stop_;
  std::unique_ptr<RelayStats> stats_;
  test::FakeSink::Handle fake_;
  test::FakeSession* session_ = nullptr;  // owned by relay_
  std::unique_ptr<Relay> relay_;
};

TEST_F(RelayTest, ALostStreamReconnectsAndResumesFromTheConfirmedPosition) {
  const absl::Status refused = absl::UnavailableError("connection refused");
  ASSERT_TRUE(
      Run({{.send = KeepaliveAt(0x500)}, {.open = refused}, {.slot_confirmed = 0x100}}).ok());
  ASSERT_EQ(session_->starts().size(), 2u);
  EXPECT_EQ(session_->starts()[0].at, 0x100u);
  EXPECT_EQ(session_->starts()[1].at, 0x500u)
      << "the slot lags what this process confirmed: the watermark never goes back";
  EXPECT_EQ(Counter(*stats_, "outboxd_reconnects_total"), 3)
      << "each stream's end (the script's last one too) and the refusal";
}

TEST_F(RelayTest, AnErrorBeforeTheSlotWasReachedIsReturnedButLaterOnesAreRetried) {
  const absl::Status odd = absl::InternalError("unexpected answer to IDENTIFY_SYSTEM");
  EXPECT_EQ(Run({{.open = odd}}).code(), absl::StatusCode::kInternal);

  ASSERT_TRUE(Run({{}, {.open = odd}, {}}).ok());
  EXPECT_EQ(session_->starts().size(), 2u) << "streamed once: the environment works";
}

TEST_F(RelayTest, ASlotHeldByAnotherRelayMeansStandingByUntilItIsFree) {
  std::vector<bool> standing_by;  // at each Open
  const absl::Status in_use =
      pg::WithSqlState(absl::UnavailableError("replication slot is active"), "55006");
  ASSERT_TRUE(Run({{.start = in_use}, {.start = in_use}, {}}, [&] {
                standing_by.push_back(stats_->health.Snapshot().standing_by);
              }).ok());
  EXPECT_EQ(standing_by, (std::vector<bool>{false, true, true, false}));
  EXPECT_EQ(session_->starts().size(), 3u);
  EXPECT_EQ(Counter(*stats_, "outboxd_reconnects_total"), 1)
      << "standing by is no reconnect; only the stream's end after taking over is";
}

TEST_F(RelayTest, ANewServerHistoryResumesFromTheSlotNotFromTheOldTimeline) {
  ASSERT_TRUE(Run({{.history = "7000000000000000001/1", .send = KeepaliveAt(0x500)},
                   {.history = "7000000000000000001/2", .slot_confirmed = 0x300}})
                  .ok());
  ASSERT_EQ(session_->starts().size(), 2u);
  EXPECT_EQ(session_->starts()[1].at, 0x300u) << "0x500 names nothing on timeline 2";
  EXPECT_EQ(session_->forgotten(), 1);

  // The same history: this process's confirmed position stands.
  ASSERT_TRUE(Run({{.send = KeepaliveAt(0x500)}, {.slot_confirmed = 0x300}}).ok());
  EXPECT_EQ(session_->starts()[1].at, 0x500u);
  EXPECT_EQ(session_->forgotten(), 0);
}

TEST_F(RelayTest, ABulkCatchUpThatFailedForGoodMakesTheNextSessionsStream) {
  const pg::Lsn far = 0x100 + options_.bulk_catch_up_threshold;
  const absl::Status lost = absl::UnavailableError("bulk catch-up: connection lost");
  const absl::Status temp_file = GiveUpBulk(absl::InternalError("temp_file_limit"));
  ASSERT_TRUE(Run({{.server = far, .stream_error = lost},
                   {.server = far, .stream_error = temp_file},
                   {.server = far},
                   {.server = 0x101}})
                  .ok());
  ASSERT_EQ(session_->starts().size(), 4u);
  EXPECT_TRUE(session_->starts()[0].bulk);
  EXPECT_TRUE(session_->starts()[1].bulk) << "a lost connection is retried in bulk";
  EXPECT_FALSE(session_->starts()[2].bulk) << "after temp_file_limit: streamed";
  EXPECT_FALSE(session_->starts()[3].bulk);
}

// Issue 30, found by the chaos run (seed 2983776942): a relay whose stream ended with
// events still held by its producer for a broker that was down sent them once it came
// back, after the relay that had taken the slot meanwhile had read the broker back
// and sent them too. Now a session's end waits for reports only while they come, then
// drops what is unreported with the sink itself (a new one replaces it, as after a
// kill -9); nothing was acknowledged, so the next session sends it again.
TEST_F(RelayTest, ASessionsEndDropsTheSinkThatStillHoldsUnreportedEvents) {
  fake_.set_answer([](const test::ProducedMessage&) { return std::nullopt; });  // broker down
  test::OutboxWal wal;
  wal.Commit({{.id = "e1", .aggregate_id = "A"}, {.id = "e2", .aggregate_id = "B"}});
  auto stream_wal = [&wal](test::ScriptedStream& s) {
    wal.Attach(&s, 0);
    wal.Send();
  };
  const absl::Time began = absl::Now();
  ASSERT_TRUE(Run({{.send = stream_wal}, {.send = stream_wal}}).ok());
  EXPECT_LT(absl::Now() - began, absl::Seconds(2)) << "no 2 s wait for a broker that is silent";
  EXPECT_EQ(fake_.created(), 3) << "the first sink, and a new one at each session's end";
  ASSERT_EQ(session_->starts().size(), 2u);
  EXPECT_EQ(session_->starts()[1].at, 0x100u) << "nothing was acknowledged: the slot stays";
}

// A broker that answers: the session's end waits for the reports, keeps the sink, and
// the next session resumes after what was acknowledged.
TEST_F(RelayTest, ASessionsEndKeepsTheSinkWhenTheBrokerAnswers) {
  fake_.set_answer([](const test::ProducedMessage&) { return absl::OkStatus(); });
  test::OutboxWal wal;
  const pg::Lsn end = wal.Commit({{.id = "e1", .aggregate_id = "A"}});
  auto stream_wal = [&wal](test::ScriptedStream& s) {
    wal.Attach(&s, 0);
    wal.Send();
  };
  ASSERT_TRUE(Run({{.send = stream_wal}, {}}).ok());
  EXPECT_EQ(fake_.created(), 1);
  ASSERT_EQ(session_->starts().size(), 2u);
  EXPECT_EQ(session_->starts()[1].at, end);
}

}  // namespace
}  // namespace outboxd::relay
