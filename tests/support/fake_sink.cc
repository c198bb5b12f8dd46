#include "support/fake_sink.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#include "absl/time/clock.h"

namespace outboxd::test {

sink::SinkFactory FakeSink::Handle::Factory() {
  return [this](const sink::SinkSettings& settings)
             -> absl::StatusOr<std::unique_ptr<sink::Sink>> {
    auto fake = std::make_unique<FakeSink>(settings, answer_);
    current_ = fake.get();
    ++created_;
    return std::unique_ptr<sink::Sink>(std::move(fake));
  };
}

FakeSink::FakeSink(sink::SinkSettings settings, Answer answer)
    : settings_(std::move(settings)), answer_(std::move(answer)) {
  int fds[2];
  if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) == 0) {
    wake_read_ = fds[0];
    wake_write_ = fds[1];
  }
}

FakeSink::~FakeSink() {
  close(wake_read_);
  close(wake_write_);
}

absl::Status FakeSink::Produce(const sink::OutgoingMessage& message) {
  if (!health_.ok()) return health_;
  if (!refuse_.ok()) return refuse_;
  ProducedMessage copy{.topic = std::string(message.topic),
                       .key = std::string(message.key),
                       .value = std::string(message.value),
                       .tag = message.tag};
  for (const sink::Header& h : message.headers) copy.headers.emplace_back(h.name, h.value);
  produced_.push_back(std::move(copy));
  outstanding_.push_back(message.tag);
  if (answer_) {
    if (std::optional<absl::Status> outcome = answer_(produced_.back())) {
      Fail(message.tag, *std::move(outcome));
    }
  }
  return absl::OkStatus();
}

void FakeSink::Fail(uint64_t tag, absl::Status status) {
  ready_.emplace_back(tag, std::move(status));
  Wake();
}

void FakeSink::AckAll() {
  for (uint64_t tag : outstanding_) {
    const bool queued = std::any_of(ready_.begin(), ready_.end(),
                                    [tag](const auto& r) { return r.first == tag; });
    if (!queued) Ack(tag);
  }
}

int FakeSink::Poll(int timeout_ms) {
  if (ready_.empty() && timeout_ms > 0) {
    // Nothing to report and nobody else can make a report appear meanwhile: a real
    // sink would wait here, so wait (briefly) too.
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(timeout_ms, 5)));
  }
  char drain[64];
  while (read(wake_read_, drain, sizeof drain) > 0) {
  }
  int served = 0;
  while (!ready_.empty()) {
    auto [tag, status] = std::move(ready_.front());
    ready_.pop_front();
    auto it = std::find(outstanding_.begin(), outstanding_.end(), tag);
    if (it == outstanding_.end()) continue;  // reported already
    outstanding_.erase(it);
    const ProducedMessage* m = Find(tag);
    sink::DeliveryReport report{.tag = tag, .status = status, .topic = m->topic};
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
  const absl::Time deadline = absl::Now() + timeout;
  do {
    Poll(0);
    if (outstanding_.empty()) return absl::OkStatus();
    if (!ready_.empty()) continue;
    Poll(1);
  } while (absl::Now() < deadline);
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
  for (uint64_t tag : outstanding_) {
    const ProducedMessage* m = Find(tag);
    bytes += m->key.size() + m->value.size();
    for (const auto& [name, value] : m->headers) bytes += name.size() + value.size();
  }
  return bytes;
}

void FakeSink::RaiseFatalErrorForTesting(std::string_view reason) {
  health_ = absl::AbortedError(std::string(reason));
}

void FakeSink::Wake() {
  const char byte = 1;
  (void)!write(wake_write_, &byte, 1);
}

const ProducedMessage* FakeSink::Find(uint64_t tag) const {
  // Newest first: after a re-send the same tag may appear twice.
  for (auto it = produced_.rbegin(); it != produced_.rend(); ++it) {
    if (it->tag == tag) return &*it;
  }
  return nullptr;
}

}  // namespace outboxd::test
