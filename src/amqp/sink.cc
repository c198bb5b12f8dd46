// amqp::Sink: the entries the relay produced until each is reported; their per-key
// order (sink/key_order.h: only the first of each key is ever published, the ready
// ones lowest sequence first, never sent or to be sent again); and the reconnect,
// retry and timeout deadlines behind one timerfd, watched with the connection's
// socket by one epoll descriptor (wake_fd()).
#include "amqp/sink.h"

#include <poll.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "base/backoff.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "sink/key_order.h"

namespace outboxd::amqp {
namespace {

// The sink headers (outbox/message_format.h) that become AMQP basic properties
// rather than entries of the header table; created_at becomes the timestamp and
// stays a header too, since the timestamp property holds whole seconds only.
constexpr std::string_view kIdHeader = "id";
constexpr std::string_view kTypeHeader = "type";
constexpr std::string_view kContentTypeHeader = "content-type";
constexpr std::string_view kCreatedAtHeader = "created_at";
// The json format sets no content-type header: its value is the payload itself.
constexpr std::string_view kJsonContentType = "application/json";
// What an entry holds beside its StoredMessage, counted in InFlightBytes() so the
// relay's --max-in-flight-bytes bounds the sink's memory, not only the message text:
// the map node with the Entry (~120 bytes), the two allocations' headers, and what
// KeyOrder holds for it (a ready-set node, or a link behind its key's previous one).
constexpr uint64_t kEntryOverhead = 192;

// created_at as the encoder writes it (ISO-8601 with offset, e.g.
// 2026-12-03T12:00:00.123456+00:00); nullopt for anything else.
std::optional<absl::Time> ParseCreatedAt(std::string_view text) {
  absl::Time t;
  std::string error;
  if (absl::ParseTime("%Y-%m-%dT%H:%M:%E*S%Ez", std::string(text), &t, &error)) return t;
  return std::nullopt;
}

// A produced message's topic, key, value and headers in one allocation: the field
// count n, n + 1 offsets into the text (uint32_t each), then the text: topic, key,
// value, and each header's name and value. Kept as std::strings (a dozen allocations),
// the copy of an event with ~150 bytes of text took ~830 bytes of heap while
// InFlightBytes() counted the 150, and the relay keeps up to --max-in-flight of them
// while RabbitMQ confirms. Measured on a 100,000-event catch-up (1,000 aggregates):
// peak RSS 92 -> 47 MiB with 84,000-90,000 events in flight; with
// --max-in-flight-bytes 8 MiB, 78 -> 24 MiB (the limit now holds), drain time
// unchanged (19.9 -> 19.7 s). tests/amqp/sink_test.cc checks heap against count.
class StoredMessage {
 public:
  StoredMessage() = default;
  explicit StoredMessage(const sink::OutgoingMessage& m) {
    const size_t fields = 3 + 2 * m.headers.size();
    size_t text = m.topic.size() + m.key.size() + m.value.size();
    for (const sink::Header& h : m.headers) text += h.name.size() + h.value.size();
    const size_t head = sizeof(uint32_t) * (fields + 2);
    size_ = head + text;
    data_ = std::make_unique_for_overwrite<char[]>(size_);
    Put(0, static_cast<uint32_t>(fields));
    uint32_t at = 0;
    size_t field = 0;
    auto append = [&](std::string_view v) {
      Put(1 + field++, at);
      std::memcpy(data_.get() + head + at, v.data(), v.size());
      at += static_cast<uint32_t>(v.size());
    };
    append(m.topic);
    append(m.key);
    append(m.value);
    for (const sink::Header& h : m.headers) {
      append(h.name);
      append(h.value);
    }
    Put(1 + field, at);
  }

  std::string_view topic() const { return Field(0); }
  std::string_view key() const { return Field(1); }
  std::string_view value() const { return Field(2); }
  size_t header_count() const { return (Get(0) - 3) / 2; }
  sink::Header header(size_t i) const { return {Field(3 + 2 * i), Field(4 + 2 * i)}; }
  // Bytes allocated for it.
  size_t size() const { return size_; }

 private:
  void Put(size_t slot, uint32_t v) { std::memcpy(data_.get() + slot * sizeof v, &v, sizeof v); }
  uint32_t Get(size_t slot) const {
    uint32_t v;
    std::memcpy(&v, data_.get() + slot * sizeof v, sizeof v);
    return v;
  }
  std::string_view Field(size_t i) const {
    const size_t head = sizeof(uint32_t) * (Get(0) + 2);
    const uint32_t begin = Get(1 + i);
    return std::string_view(data_.get() + head + begin, Get(2 + i) - begin);
  }

  std::unique_ptr<char[]> data_;
  size_t size_ = 0;
};

}  // namespace

struct Sink::Impl {
  // One produced message, owned until its report.
  struct Entry {
    uint64_t tag = 0;
    StoredMessage message;
    absl::Time produced_at;
    uint64_t bytes = 0;  // what it holds in memory (see kEntryOverhead)
    int publishes = 0;
  };
  // A Publisher completion, kept until Step() serves it (its reason copied: the
  // Publisher's view ends with the callback).
  struct Done {
    uint64_t seq = 0;
    Outcome outcome = Outcome::kAcked;
    std::string reason;
  };

  SinkOptions options;
  sink::DeliveryHandler on_delivery;
  absl::Duration delivery_timeout = absl::InfiniteDuration();
  std::string where;  // the redacted URL
  std::unique_ptr<Publisher> publisher;
  bool connected = false;
  bool ever_connected = false;
  bool blocked = false;
  absl::Time reconnect_at = absl::InfinitePast();
  // Set by Create from options.reconnect_* and nack_*: doubling up to the cap, with no
  // jitter (one sink's own retries).
  Backoff reconnect_backoff{absl::ZeroDuration(), absl::ZeroDuration(), Backoff::Jitter::kNone};
  absl::Time retry_at = absl::InfinitePast();  // after a nack
  // Until when a return is published again (options.unroutable_grace after a
  // reconnect), and whether this grace has logged its first return.
  absl::Time grace_until = absl::InfinitePast();
  bool grace_logged = false;
  Backoff nack_backoff{absl::ZeroDuration(), absl::ZeroDuration(), Backoff::Jitter::kNone};
  absl::Status fatal;

  std::map<uint64_t, Entry> entries;  // by sequence = produce order
  sink::KeyOrder order;               // which entries may be published (again) now
  uint64_t next_seq = 1;
  uint64_t bytes = 0;
  std::vector<Done> done;
  SinkCounters counters;

  int epoll_fd = -1;
  int timer_fd = -1;
  int watched_fd = -1;
  std::vector<Header> amqp_headers;  // scratch for ToAmqp

  ~Impl() {
    if (timer_fd >= 0) close(timer_fd);
    if (epoll_fd >= 0) close(epoll_fd);
  }

  absl::Status OpenWakeFds();
  CompletionHandler Handler() {
    return [this](const Completion& c) {
      done.push_back({.seq = c.tag, .outcome = c.outcome, .reason = std::string(c.reason)});
    };
  }
  absl::Status Connect();
  void TryReconnect();
  OutgoingMessage ToAmqp(uint64_t seq, const Entry& e);
  absl::Status PublishOne(uint64_t seq);
  void PublishReady();
  int Step();
  int ServeDone();
  int ExpireTimedOut();
  void NoticeState();
  void Report(std::map<uint64_t, Entry>::iterator it, const absl::Status& status);
  int Fail(std::map<uint64_t, Entry>::iterator it, const absl::Status& status);
  void Remove(std::map<uint64_t, Entry>::iterator it);
  void WatchSocket();
  void ArmTimer();
  void DrainTimer();
  int Wait(int timeout_ms);
};

absl::Status Sink::Impl::OpenWakeFds() {
  epoll_fd = epoll_create1(EPOLL_CLOEXEC);
  timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (epoll_fd < 0 || timer_fd < 0) {
    return absl::InternalError(absl::StrCat("epoll/timerfd: ", std::strerror(errno)));
  }
  epoll_event ev{.events = EPOLLIN, .data = {.fd = timer_fd}};
  if (epoll_ctl(epoll_fd, EPOLL_CTL_ADD, timer_fd, &ev) != 0) {
    return absl::InternalError(absl::StrCat("epoll_ctl: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

// A first connection or a fresh one after a loss (a new channel: the broker numbers
// its confirms from 1 again, which the Publisher handles).
absl::Status Sink::Impl::Connect() {
  if (publisher == nullptr) {
    OUTBOXD_ASSIGN_OR_RETURN(publisher, Publisher::Connect(options.publisher, Handler()));
  } else {
    OUTBOXD_RETURN_IF_ERROR(publisher->Reconnect());
  }
  connected = true;
  watched_fd = -1;  // a new socket, perhaps with the old number: register it again
  return absl::OkStatus();
}

void Sink::Impl::TryReconnect() {
  absl::Status s = Connect();
  if (s.ok()) {
    reconnect_backoff.Reset();
    if (ever_connected) {
      ++counters.reconnects;
      grace_until = absl::Now() + options.unroutable_grace;
      grace_logged = false;
      spdlog::info("reconnected to RabbitMQ at {}; publishing {} waiting messages again, in order",
                   where, order.ready());
    }
    ever_connected = true;
    return;
  }
  const absl::Duration wait = reconnect_backoff.Next();
  reconnect_at = absl::Now() + wait;
  spdlog::warn("RabbitMQ not reachable ({}); {} messages wait; retrying in {} (attempt {})", s,
               entries.size(), absl::FormatDuration(wait), reconnect_backoff.attempts());
}

OutgoingMessage Sink::Impl::ToAmqp(uint64_t seq, const Entry& e) {
  OutgoingMessage m{.routing_key = e.message.topic(), .body = e.message.value(), .tag = seq};
  m.properties.content_type = kJsonContentType;
  amqp_headers.clear();
  for (size_t i = 0; i < e.message.header_count(); ++i) {
    const auto [name, value] = e.message.header(i);
    if (name == kIdHeader) {
      m.properties.message_id = value;
    } else if (name == kTypeHeader) {
      m.properties.type = value;
    } else if (name == kContentTypeHeader) {
      m.properties.content_type = value;
    } else {
      if (name == kCreatedAtHeader) m.properties.timestamp = ParseCreatedAt(value);
      amqp_headers.push_back({name, value});
    }
  }
  m.headers = amqp_headers;
  return m;
}

// Publishes one ready entry. Unavailable: the connection was lost (the Publisher
// completed the unconfirmed ones as lost); ResourceExhausted: blocked; InvalidArgument:
// AMQP cannot carry this message.
absl::Status Sink::Impl::PublishOne(uint64_t seq) {
  Entry& e = entries.at(seq);
  absl::Status s = publisher->Produce(ToAmqp(seq, e));
  if (!s.ok()) return s;
  order.Sent(seq);
  if (e.publishes++ > 0) ++counters.republished;
  return s;
}

void Sink::Impl::PublishReady() {
  while (order.ready() > 0 && connected && publisher->Health().ok() && !publisher->Blocked() &&
         absl::Now() >= retry_at) {
    const uint64_t seq = *order.NextReady();
    absl::Status s = PublishOne(seq);
    if (s.code() == absl::StatusCode::kInvalidArgument) {
      // Reported from Step(), like every outcome: never from inside Produce().
      order.Sent(seq);
      done.push_back(
          {.seq = seq, .outcome = Outcome::kRejected, .reason = std::string(s.message())});
      continue;
    }
    if (!s.ok()) return;
  }
}

// Reports go in key order (a follower is published only after its predecessor's
// report, expiry goes oldest first), so `it` is the first of its key: the next one
// takes its place and may be published.
void Sink::Impl::Remove(std::map<uint64_t, Entry>::iterator it) {
  const Entry& e = it->second;
  const std::string_view key = e.message.key();
  // This abseil's string_view is its own type.
  order.Remove(it->first, absl::string_view(key.data(), key.size()));
  bytes -= e.bytes;
  entries.erase(it);
}

void Sink::Impl::Report(std::map<uint64_t, Entry>::iterator it, const absl::Status& status) {
  const Entry& e = it->second;
  sink::DeliveryReport report{.tag = e.tag, .status = status, .topic = e.message.topic()};
  if (!status.ok()) {
    report.key = e.message.key();
    report.value = e.message.value();
    for (size_t i = 0; i < e.message.header_count(); ++i) {
      report.headers.push_back(e.message.header(i));
    }
  }
  if (on_delivery) on_delivery(report);
  Remove(it);
}

// Reports a failed entry, then every later entry of its key (none was published):
// the relay dead-letters them in order behind it, as its gate does for the events it
// meets after a dead letter. Returns how many were reported.
int Sink::Impl::Fail(std::map<uint64_t, Entry>::iterator it, const absl::Status& status) {
  const std::vector<uint64_t> followers = order.Followers(it->first);
  const absl::Status follows = absl::FailedPreconditionError(
      absl::StrCat("follows an earlier message of its key that failed: ", status.message()));
  Report(it, status);
  int served = 1;
  for (uint64_t seq : followers) {
    auto follower = entries.find(seq);
    if (follower == entries.end()) break;
    Report(follower, follows);
    ++served;
  }
  return served;
}

// Serves the Publisher's completions: acks and failures are reported, lost and
// nacked messages are ready to be published again.
int Sink::Impl::ServeDone() {
  int served = 0;
  std::vector<Done> batch;
  batch.swap(done);
  for (Done& d : batch) {
    auto it = entries.find(d.seq);
    if (it == entries.end()) continue;  // reported already (timed out)
    switch (d.outcome) {
      case Outcome::kAcked:
        nack_backoff.Reset();
        Report(it, absl::OkStatus());
        ++served;
        break;
      case Outcome::kUnroutable: {
        // "no queue bound for routing key X": the dead letter's reason, the fix in it.
        absl::string_view reason = d.reason;
        absl::ConsumePrefix(&reason, "unroutable: ");
        if (absl::Now() < grace_until) {
          ++counters.returned_again;
          order.Resend(d.seq);
          retry_at = absl::Now() + nack_backoff.Next();
          if (!grace_logged) {
            grace_logged = true;
            spdlog::warn(
                "RabbitMQ returned a message right after the reconnect ({}): a restarted "
                "node may still be recovering its queues; publishing returned messages again "
                "for {} more, then dead-lettering what is still unroutable",
                std::string(reason),
                absl::FormatDuration(
                    absl::Trunc(grace_until - absl::Now(), absl::Milliseconds(100))));
          }
          break;
        }
        served += Fail(it, absl::NotFoundError(reason));
        break;
      }
      case Outcome::kRejected:
        served += Fail(it, absl::InvalidArgumentError(d.reason));
        break;
      case Outcome::kNacked: {
        ++counters.nacked;
        order.Resend(d.seq);
        const absl::Duration wait = nack_backoff.Next();
        retry_at = absl::Now() + wait;
        spdlog::warn(
            "RabbitMQ refused a message for now (basic.nack, routing key {}); "
            "publishing it again in {}",
            it->second.message.topic(), absl::FormatDuration(wait));
        break;
      }
      case Outcome::kConnectionLost:
        order.Resend(d.seq);
        break;
    }
  }
  return served;
}

// With a finite delivery timeout (the polling relay's attempts), a message not
// confirmed in time is reported failed; a confirm that comes later is ignored.
int Sink::Impl::ExpireTimedOut() {
  if (delivery_timeout == absl::InfiniteDuration()) return 0;
  int served = 0;
  const absl::Time now = absl::Now();
  while (!entries.empty() && entries.begin()->second.produced_at + delivery_timeout <= now) {
    served +=
        Fail(entries.begin(),
             absl::UnavailableError(absl::StrCat("not confirmed by RabbitMQ at ", where, " within ",
                                                 absl::FormatDuration(delivery_timeout))));
  }
  return served;
}

// Logs the changes the relay cannot see: a lost connection (its messages wait) and
// the broker's flow control.
void Sink::Impl::NoticeState() {
  if (connected && !publisher->Health().ok()) {
    connected = false;
    blocked = false;
    reconnect_at = absl::Now();
    spdlog::warn(
        "RabbitMQ connection lost ({}); {} unconfirmed messages will be published again, "
        "in order, once reconnected",
        publisher->Health(), order.ready());
  }
  const bool now_blocked = connected && publisher->Blocked();
  if (now_blocked && !blocked) {
    spdlog::warn(
        "RabbitMQ blocked the connection ({}): publishing and reading paused until the "
        "broker's alarm clears",
        publisher->BlockedReason());
  } else if (!now_blocked && blocked && connected) {
    spdlog::info("RabbitMQ unblocked the connection: publishing resumes");
  }
  blocked = now_blocked;
}

int Sink::Impl::Step() {
  if (connected) publisher->Poll(absl::ZeroDuration());
  int served = ServeDone();
  NoticeState();
  if (!connected && fatal.ok() && absl::Now() >= reconnect_at) TryReconnect();
  if (connected) PublishReady();
  served += ServeDone();
  NoticeState();
  served += ExpireTimedOut();
  WatchSocket();
  ArmTimer();
  return served;
}

void Sink::Impl::WatchSocket() {
  const int fd = connected ? publisher->socket_fd() : -1;
  if (fd == watched_fd) return;
  // A lost connection's socket left the epoll set when it was closed.
  if (fd >= 0) {
    epoll_event ev{.events = EPOLLIN, .data = {.fd = fd}};
    if (epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev) != 0 && errno == EEXIST) {
      epoll_ctl(epoll_fd, EPOLL_CTL_MOD, fd, &ev);
    }
  }
  watched_fd = fd;
}

// The timer fires at the sink's next deadline, so a select() on wake_fd() wakes for
// it; at once when rabbitmq-c holds frames already read from the socket.
void Sink::Impl::ArmTimer() {
  const absl::Time now = absl::Now();
  absl::Time next = absl::InfiniteFuture();
  if (!connected && fatal.ok()) next = std::min(next, reconnect_at);
  // Blocked, the socket wakes us (connection.unblocked): no timer, or it would spin.
  if (connected && !publisher->Blocked() && order.ready() > 0) next = std::min(next, retry_at);
  if (delivery_timeout != absl::InfiniteDuration() && !entries.empty()) {
    next = std::min(next, entries.begin()->second.produced_at + delivery_timeout);
  }
  if (connected && publisher->HasBufferedFrames()) next = now;
  itimerspec spec{};
  if (next != absl::InfiniteFuture()) {
    // A zero it_value disarms: the earliest is one nanosecond from now.
    spec.it_value = absl::ToTimespec(std::max(next - now, absl::Nanoseconds(1)));
  }
  timerfd_settime(timer_fd, 0, &spec, nullptr);
}

void Sink::Impl::DrainTimer() {
  uint64_t expirations;
  while (read(timer_fd, &expirations, sizeof(expirations)) > 0) {
  }
}

int Sink::Impl::Wait(int timeout_ms) {
  pollfd p{.fd = epoll_fd, .events = POLLIN, .revents = 0};
  return ::poll(&p, 1, timeout_ms);
}

Sink::Sink(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Sink::~Sink() {
  if (impl_ != nullptr) Close(absl::ZeroDuration());
}

absl::StatusOr<std::unique_ptr<Sink>> Sink::Create(const SinkOptions& options,
                                                   const sink::SinkSettings& settings) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->reconnect_backoff =
      Backoff(options.reconnect_base, options.reconnect_cap, Backoff::Jitter::kNone);
  impl->nack_backoff = Backoff(options.nack_base, options.nack_cap, Backoff::Jitter::kNone);
  impl->on_delivery = settings.on_delivery;
  impl->delivery_timeout = settings.delivery_timeout;
  OUTBOXD_ASSIGN_OR_RETURN(impl->where, RedactedUrl(options.publisher.url));
  OUTBOXD_RETURN_IF_ERROR(impl->OpenWakeFds());
  absl::Status connected = impl->Connect();
  if (connected.ok()) {
    impl->ever_connected = true;
  } else if (connected.code() == absl::StatusCode::kUnavailable) {
    // Like a Kafka producer with its brokers down: messages wait, the sink retries.
    spdlog::warn("{}; retrying", connected);
    impl->reconnect_at = absl::Now() + impl->reconnect_backoff.Next();  // reconnect_base
  } else {
    return connected;
  }
  impl->WatchSocket();
  impl->ArmTimer();
  return std::unique_ptr<Sink>(new Sink(std::move(impl)));
}

sink::SinkFactory Sink::Factory(SinkOptions options) {
  return [options = std::move(options)](
             const sink::SinkSettings& settings) -> absl::StatusOr<std::unique_ptr<sink::Sink>> {
    OUTBOXD_ASSIGN_OR_RETURN(std::unique_ptr<Sink> s, Create(options, settings));
    return std::unique_ptr<sink::Sink>(std::move(s));
  };
}

absl::Status Sink::Produce(const sink::OutgoingMessage& message) {
  Impl& m = *impl_;
  if (!m.fatal.ok()) return m.fatal;
  if (m.connected && m.publisher->Blocked()) {
    return absl::ResourceExhaustedError(absl::StrCat("RabbitMQ blocked the connection (",
                                                     std::string(m.publisher->BlockedReason()),
                                                     "); wait until its alarm clears"));
  }
  Impl::Entry e{.tag = message.tag, .message = StoredMessage(message), .produced_at = absl::Now()};
  e.bytes = e.message.size() + kEntryOverhead;
  const uint64_t seq = m.next_seq++;
  auto [it, added] = m.entries.emplace(seq, std::move(e));
  m.bytes += it->second.bytes;
  const std::string_view key = it->second.message.key();
  m.order.Add(seq, absl::string_view(key.data(), key.size()));
  // Nothing waits before it, of its key or any other: publish now, so a message AMQP
  // cannot carry is refused here, as the interface asks. Otherwise it waits its turn.
  if (m.order.ready() == 1 && m.order.NextReady() == seq && m.connected &&
      m.publisher->Health().ok() && absl::Now() >= m.retry_at) {
    absl::Status s = m.PublishOne(seq);
    if (s.code() == absl::StatusCode::kInvalidArgument ||
        s.code() == absl::StatusCode::kResourceExhausted) {
      m.Remove(it);
      return s;
    }
    if (s.ok()) return s;
    // Unavailable: lost meanwhile; it waits with the others for the reconnect.
  }
  m.ArmTimer();  // it waits: wake the caller when it can go
  return absl::OkStatus();
}

int Sink::Poll(int timeout_ms) {
  impl_->DrainTimer();
  int served = impl_->Step();
  if (served > 0 || timeout_ms <= 0) return served;
  if (impl_->Wait(timeout_ms) <= 0) return served;
  impl_->DrainTimer();
  return served + impl_->Step();
}

absl::Status Sink::Flush(absl::Duration timeout) {
  return sink::PollUntilConfirmed(*this, timeout, absl::StrCat("RabbitMQ at ", impl_->where));
}

absl::Status Sink::Health() const { return impl_->fatal; }

int Sink::InFlight() const { return static_cast<int>(impl_->entries.size()); }

uint64_t Sink::InFlightBytes() const { return impl_->bytes; }

int Sink::wake_fd() const { return impl_->epoll_fd; }

int Sink::Close(absl::Duration flush_timeout) {
  if (impl_ == nullptr) return 0;
  if (flush_timeout > absl::ZeroDuration()) Flush(flush_timeout).IgnoreError();
  impl_->on_delivery = nullptr;
  const int dropped = static_cast<int>(impl_->entries.size());
  impl_->entries.clear();
  impl_->order.Clear();
  // connection.close, bounded by the connect timeout; what was unconfirmed completes
  // as lost into `done`, which goes with impl_.
  if (impl_->publisher != nullptr) impl_->publisher->Close();
  impl_.reset();
  return dropped;
}

void Sink::RaiseFatalErrorForTesting(std::string_view reason) {
  impl_->fatal = absl::AbortedError(std::string(reason));
}

const SinkCounters& Sink::counters() const { return impl_->counters; }

}  // namespace outboxd::amqp
