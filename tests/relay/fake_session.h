// FakeSession: a scripted relay::ReplicationSession, so Relay's state machine
// (reconnect, standing by, failover detection, the bulk switch) runs in process in
// milliseconds. Each Open() takes the next SessionScript: what Open returns, the
// server's history, the slot's position, the server's WAL position, how starting the
// stream ends, and what the stream then sends (it ends after that, as a lost stream
// does). Once the scripts run out, Open() stops the relay.
//
//   std::deque<test::SessionScript> scripts = {{.slot_confirmed = 0x100}, ...};
//   test::FakeSession* session = nullptr;
//   Relay relay(options, &stats, &stop, test::FakeSession::Factory(scripts, &stop, &session));
//   ASSERT_TRUE(relay.Run().ok());
//   EXPECT_EQ(session->starts().size(), 2u);
#ifndef OUTBOXD_TESTS_RELAY_FAKE_SESSION_H_
#define OUTBOXD_TESTS_RELAY_FAKE_SESSION_H_

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "relay/relay.h"
#include "relay/replication_session.h"
#include "support/scripted_stream.h"

namespace outboxd::test {

struct SessionScript {
  absl::Status open;                              // Open()'s result
  std::string history = "7000000000000000001/1";  // "<system id>/<timeline>"
  pg::Lsn slot_confirmed = 0x100;
  absl::StatusOr<pg::Lsn> server = absl::UnavailableError("not asked");  // ServerPosition
  absl::Status start;  // StartStream / StartBulkStream's result
  // What the stream sends before it ends (ScriptedStream::PushKeepalive, PushData).
  std::function<void(ScriptedStream&)> send;
  absl::Status stream_error;  // instead: the stream's first read fails with this
};

// A stream whose every read fails (a bulk peek's error, a lost connection).
class FailingStream final : public relay::ChangeStream {
 public:
  explicit FailingStream(absl::Status error) : error_(std::move(error)) {}
  absl::StatusOr<pg::StreamMessage> Next() override { return error_; }
  absl::Status SendFeedback(pg::Lsn, pg::Lsn, relay::Reply) override { return absl::OkStatus(); }
  bool wants_write() const override { return false; }
  absl::Status Flush() override { return absl::OkStatus(); }
  absl::Status End() override { return absl::OkStatus(); }
  int socket() const override { return -1; }

 private:
  absl::Status error_;
};

// The dead-letter table, empty and in memory.
class NoDeadLetters final : public relay::DeadLetterTable {
 public:
  absl::Status Insert(const outbox::DeadLetter&) override { return absl::OkStatus(); }
  absl::StatusOr<absl::flat_hash_map<std::string, outbox::FirstDeadLetter>> Aggregates() override {
    return absl::flat_hash_map<std::string, outbox::FirstDeadLetter>();
  }
  absl::StatusOr<absl::Time> Now() override { return absl::Now(); }
  std::string_view name() const override { return "outbox_dead_letter"; }
};

class FakeSession final : public relay::ReplicationSession {
 public:
  struct Start {
    pg::Lsn at = 0;
    bool bulk = false;
    bool ok = true;
  };

  FakeSession(std::deque<SessionScript> scripts, StopSignal* stop)
      : scripts_(std::move(scripts)), stop_(stop) {}

  // For Relay's constructor; `*made` is the session it made (owned by the relay).
  static relay::Relay::SessionFactory Factory(std::deque<SessionScript> scripts, StopSignal* stop,
                                              FakeSession** made) {
    return [=](const relay::RelayOptions&, relay::RelayStats*) {
      auto session = std::make_unique<FakeSession>(scripts, stop);
      *made = session.get();
      return session;
    };
  }

  // Runs at each Open(), before the script is taken: how a test looks at the relay
  // between sessions.
  void set_on_open(std::function<void()> f) { on_open_ = std::move(f); }

  void Adopt(pg::Connection) override {}
  absl::Status Open() override {
    if (on_open_) on_open_();
    ++opens_;
    if (scripts_.empty()) {
      stop_->Notify();
      return absl::CancelledError("the test's scripts ran out");
    }
    current_ = std::move(scripts_.front());
    scripts_.pop_front();
    history_ = current_.history;
    return current_.open;
  }
  const std::string& history() const override { return history_; }
  std::string endpoint() const override { return "10.0.0.1:5432"; }
  absl::StatusOr<outbox::EmitKey> ReadEmitKey() override { return outbox::EmitKey(); }
  absl::StatusOr<relay::SlotState> InspectSlot() override {
    relay::SlotState state{.feedback_interval = absl::Milliseconds(20)};
    state.slot.exists = true;
    state.slot.confirmed_flush_lsn = current_.slot_confirmed;
    return state;
  }
  absl::StatusOr<pg::Lsn> RunBackfill(relay::Pipeline&, const pg::SlotInfo&,
                                      const outbox::BackfillRequest&, StopSignal&) override {
    return absl::UnimplementedError("no backfill in FakeSession");
  }
  absl::Status CheckSlotForStreaming(const pg::SlotInfo&) override { return absl::OkStatus(); }
  absl::StatusOr<pg::Lsn> ServerPosition() override { return current_.server; }
  absl::StatusOr<std::string> BulkRefusal() override { return std::string(); }
  absl::StatusOr<std::unique_ptr<relay::ChangeStream>> StartStream(pg::Lsn start) override {
    return Started(start, /*bulk=*/false);
  }
  absl::StatusOr<std::unique_ptr<relay::ChangeStream>> StartBulkStream(pg::Lsn start,
                                                                       pg::Lsn) override {
    return Started(start, /*bulk=*/true);
  }
  absl::Status Upkeep(pg::Lsn) override { return absl::OkStatus(); }
  const relay::StandbyFlushes& standby_flushes() const override { return standbys_; }
  void ForgetPositions() override { ++forgotten_; }
  void Close() override {}
  relay::DeadLetterTable* dead_letter_table() override { return &dead_letters_; }

  const std::vector<Start>& starts() const { return starts_; }
  int opens() const { return opens_; }
  int forgotten() const { return forgotten_; }

 private:
  absl::StatusOr<std::unique_ptr<relay::ChangeStream>> Started(pg::Lsn start, bool bulk) {
    starts_.push_back({.at = start, .bulk = bulk, .ok = current_.start.ok()});
    if (!current_.start.ok()) return current_.start;
    if (!current_.stream_error.ok()) return std::make_unique<FailingStream>(current_.stream_error);
    auto stream = std::make_unique<ScriptedStream>();
    stream->set_batched(bulk);
    if (current_.send) current_.send(*stream);
    stream->PushEnd();
    return stream;
  }

  std::deque<SessionScript> scripts_;
  StopSignal* stop_;
  SessionScript current_;
  std::string history_;
  std::function<void()> on_open_;
  relay::StandbyFlushes standbys_;
  NoDeadLetters dead_letters_;
  std::vector<Start> starts_;
  int opens_ = 0;
  int forgotten_ = 0;
};

}  // namespace outboxd::test

#endif  // OUTBOXD_TESTS_RELAY_FAKE_SESSION_H_
