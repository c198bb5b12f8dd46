#include "support/fake_sink.h"

#include <algorithm>
#include <thread>

#include "absl/time/clock.h"
#include "support/wait_until.h"

namespace outboxd::test {

sink::SinkFactory FakeSink::Handle::Factory() {
  return [this](const sink::SinkSettings& settings) -> absl::StatusOr<std::unique_ptr<sink::Sink>> {
    auto fake = std::make_unique<FakeSink>(settings, answer_);
    current_ = fake.get();
    ++created_;
    return std::unique_ptr<sink::Sink>(std::move(fake));
  };
}

FakeSink::FakeSink(sink::SinkSettings settings, Answer answer)
    : settings_(std::move(settings)), answer_(std::move(answer)) {}

FakeSink::~FakeSink() = default;

absl::Status FakeSink::Produce(const sink::OutgoingMessage& message) {
  if (!health_.ok()) return health_;
  if (!refuse_.ok()) return refuse_;
  ProducedMessage copy{.topic = std::string(message.topic),
                       .key = std::string(message.key),
                       .value = std::string(message.value),
                       .tag = message.tag};
  for (const sink::Header& h : message.headers) copy.headers.emplace_back(h.name, h.value);
  produced_.push_back(std::move(copy));
  const size_t index = produced_.size() - 1;
  outstanding_.push_back(index);
  if (answer_) {
    if (std::optional<absl::Status> outcome = answer_(produced_.back())) {
      ready_.emplace_back(index, *std::move(outcome));
      Wake();
    }
  }
  return absl::OkStatus();
}

bool FakeSink::Queued(size_t index) const {
  return std::any_of(ready_.begin(), ready_.end(),
                     [index](const auto& r) { return r.first == index; });
}

void FakeSink::Fail(uint64_t tag, absl::Status status) {
  // Several messages may share a tag (the CDC relay tags by transaction): the oldest
  // outstanding one without an outcome yet gets this one.
  for (size_t index : outstanding_) {
    if (produced_[index].tag == tag && !Queued(index)) {
      ready_.emplace_back(index, std::move(status));
      Wake();
      return;
    }
  }
}

void FakeSink::AckAll() {
  for (size_t index : outstanding_) {
    if (!Queued(index)) ready_.emplace_back(index, absl::OkStatus());
  }
  Wake();
}

int FakeSink::Poll(int timeout_ms) {
  if (timeout_ms > 0) ++waits_;
  return Serve(timeout_ms);
}

int FakeSink::Serve(int timeout_ms) {
  if (ready_.empty() && timeout_ms > 0) {
    // Nothing to report and nobody else can make a report appear meanwhile: a real
    // sink would wait here, so wait (briefly) too.
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(timeout_ms, 5)));
  }
  wake_.Drain();
  int served = 0;
  while (!ready_.empty()) {
    auto [index, status] = std::move(ready_.front());
    ready_.pop_front();
    auto it = std::find(outstanding_.begin(), outstanding_.end(), index);
    if (it == outstanding_.end()) continue;  // reported already
    outstanding_.erase(it);
    const ProducedMessage* m = &produced_[index];
    sink::DeliveryReport report{.tag = m->tag, .status = status, .topic = m->topic};
    if (!status.ok()) {
      report.key = m->key;
      report.value = m->value;
      for (const auto& [name, value] : m->headers) report.headers.push_back({name, value});
    }
    if (settings_.on_delivery) settings_.on_delivery(report);
    ++served;
  }
  return served;
}

absl::Status FakeSink::Flush(absl::Duration timeout) {
  ++flushes_;
  ++waits_;
  const bool drained = WaitUntil(
      timeout,
      [&] {
        Serve(0);
        if (!outstanding_.empty() && ready_.empty()) Serve(1);
        return outstanding_.empty();
      },
      absl::ZeroDuration());
  if (drained) {
    return absl::OkStatus();
  }
  return absl::DeadlineExceededError("fake sink: messages still outstanding");
}

int FakeSink::Close(absl::Duration flush_timeout) {
  (void)Flush(flush_timeout);
  const int dropped = static_cast<int>(outstanding_.size());
  outstanding_.clear();
  ready_.clear();
  return dropped;
}

uint64_t FakeSink::InFlightBytes() const {
  uint64_t bytes = 0;
  for (size_t index : outstanding_) {
    const ProducedMessage* m = &produced_[index];
    bytes += m->key.size() + m->value.size();
    for (const auto& [name, value] : m->headers) bytes += name.size() + value.size();
  }
  return bytes;
}

void FakeSink::RaiseFatalErrorForTesting(std::string_view reason) {
  health_ = absl::AbortedError(std::string(reason));
}

void FakeSink::Wake() { wake_.Signal(); }

void FakeSink::SetHeld(std::vector<HeldMessage> messages,
                       std::vector<std::pair<std::string, std::string>> fallbacks) {
  held_ = std::move(messages);
  held_fallbacks_ = std::move(fallbacks);
}

absl::StatusOr<sink::HeldAnswer> FakeSink::Held(const sink::HeldQuery& query) {
  if (!held_) return sink::Sink::Held(query);
  held_asked_.emplace_back(query.id);
  held_not_before_.push_back(query.not_before_ms);
  auto copy = std::find_if(held_->begin(), held_->end(), [&](const HeldMessage& m) {
    return m.id == query.id && m.key == query.key;
  });
  const bool held = copy != held_->end();
  if (held) held_->erase(copy);
  return sink::HeldAnswer{.held = held, .fallbacks = held_fallbacks_};
}

}  // namespace outboxd::test
