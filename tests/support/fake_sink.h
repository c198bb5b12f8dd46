// FakeSink: an in-memory sink::Sink for in-process tests of the relays' rules. It
// keeps every produced message (copied). How each one ends is the test's choice:
// an answer function decides at produce time (OK: acknowledged, an error: failed,
// nullopt: no answer yet), or the test calls Ack(tag), Fail(tag, status), AckAll()
// later. Reports are handed out by Poll()/Flush() on the caller's thread, as a real
// sink does, and wake_fd() turns readable while any wait.
//
//   test::FakeSink::Handle fake;
//   fake.set_answer([](const test::ProducedMessage& m) -> std::optional<absl::Status> {
//     if (m.key == "B") return absl::InvalidArgumentError("too large");
//     return absl::OkStatus();
//   });
//   options.make_sink = fake.Factory();        // PollOptions, ReplayOptions, ...
#ifndef OUTBOXD_TESTS_SUPPORT_FAKE_SINK_H_
#define OUTBOXD_TESTS_SUPPORT_FAKE_SINK_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "sink/sink.h"
#include "support/wake_pipe.h"

namespace outboxd::test {

struct ProducedMessage {
  std::string topic;
  std::string key;
  std::string value;
  std::vector<std::pair<std::string, std::string>> headers;
  uint64_t tag = 0;
};

class FakeSink final : public sink::Sink {
 public:
  using Answer = std::function<std::optional<absl::Status>(const ProducedMessage&)>;

  // The test's view of the sinks a factory made: the newest one, and how many.
  class Handle {
   public:
    sink::SinkFactory Factory();
    FakeSink* operator->() const { return current_; }
    int created() const { return created_; }
    // How every later sink answers each message as it is produced.
    void set_answer(Answer answer) { answer_ = std::move(answer); }

   private:
    FakeSink* current_ = nullptr;
    int created_ = 0;
    Answer answer_;
  };

  FakeSink(sink::SinkSettings settings, Answer answer);
  ~FakeSink() override;

  absl::Status Produce(const sink::OutgoingMessage& message) override;
  int Poll(int timeout_ms) override;
  absl::Status Flush(absl::Duration timeout) override;
  void SendNow() override { ++send_nows_; }
  absl::Status Health() const override { return health_; }
  int InFlight() const override { return static_cast<int>(outstanding_.size()); }
  uint64_t InFlightBytes() const override;
  int wake_fd() const override { return wake_.fd(); }
  // Serves what is ready within the timeout; the rest is dropped unreported.
  int Close(absl::Duration flush_timeout) override;
  void RaiseFatalErrorForTesting(std::string_view reason) override;

  // Every message produced so far, in order.
  const std::vector<ProducedMessage>& produced() const { return produced_; }
  // Queue the outcome of an outstanding message with this tag, the oldest without one
  // yet (served by the next Poll()).
  void Ack(uint64_t tag) { Fail(tag, absl::OkStatus()); }
  void Fail(uint64_t tag, absl::Status status);
  void AckAll();
  // Produce() answers with this status (OK again: accepts).
  void RefuseProduce(absl::Status status) { refuse_ = std::move(status); }
  // How many times Flush() was called.
  int flushes() const { return flushes_; }
  // How many times the caller blocked on this sink: Flush(), and Poll() with a timeout.
  int waits() const { return waits_; }
  // How many times SendNow() was called: the relay's "send now" for live traffic.
  int send_nows() const { return send_nows_; }
  // --dedupe: from now on Held() answers as a broker holding these messages (their id
  // and key; any lsn) would, each copy answering one question, adding `fallbacks` to
  // every answer ({reason, detail}), and records each id asked about. Until then it is
  // Unimplemented, as for a broker that cannot be read back.
  struct HeldMessage {
    std::string id;
    std::string key;
  };
  void SetHeld(std::vector<HeldMessage> messages,
               std::vector<std::pair<std::string, std::string>> fallbacks = {});
  absl::StatusOr<sink::HeldAnswer> Held(const sink::HeldQuery& query) override;
  const std::vector<std::string>& held_asked() const { return held_asked_; }
  // The HeldQuery::not_before_ms of each question, in order.
  const std::vector<int64_t>& held_not_before() const { return held_not_before_; }

 private:
  void Wake();
  // Poll() without counting a wait: Flush() waits once, however often it serves.
  int Serve(int timeout_ms);
  bool Queued(size_t index) const;  // has an outcome waiting in ready_

  sink::SinkSettings settings_;
  Answer answer_;
  absl::Status health_;
  absl::Status refuse_;
  std::vector<ProducedMessage> produced_;
  std::vector<size_t> outstanding_;  // indexes into produced_, in produce order
  std::deque<std::pair<size_t, absl::Status>> ready_;
  WakePipe wake_;
  int flushes_ = 0;
  int waits_ = 0;
  int send_nows_ = 0;
  std::optional<std::vector<HeldMessage>> held_;  // SetHeld; each taken once
  std::vector<std::pair<std::string, std::string>> held_fallbacks_;
  std::vector<std::string> held_asked_;
  std::vector<int64_t> held_not_before_;
};

}  // namespace outboxd::test

#endif  // OUTBOXD_TESTS_SUPPORT_FAKE_SINK_H_
