// amqp::NewSink: the Publisher's connection, its reconnects and nack retries, its
// completions turned into reports, and the broker's flow control; what every
// confirming sink does (the entries until each is reported, their per-key order: only
// the first of each key is ever published, the ready ones lowest sequence first; the
// timer and wake_fd()) is sink::ConfirmingSink's (sink/confirming_sink.h). The
// connection's socket and the reconnect and retry deadlines are this file's part of
// wake_fd().
#include "amqp/sink.h"

#include <algorithm>
#include <memory>
#include <optional>
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

// created_at as the encoder writes it (ISO-8601 with offset, e.g.
// 2026-12-03T12:00:00.123456+00:00); nullopt for anything else.
std::optional<absl::Time> ParseCreatedAt(std::string_view text) {
  absl::Time t;
  std::string error;
  if (absl::ParseTime("%Y-%m-%dT%H:%M:%E*S%Ez", std::string(text), &t, &error)) return t;
  return std::nullopt;
}

struct Impl final : public Sink {
  // For NewSink, which sets it up.
  using ConfirmingSink::ArmTimer;
  using ConfirmingSink::OpenWakeFd;

  // A Publisher completion, kept until Serve() handles it (its reason copied: the
  // Publisher's view ends with the callback).
  struct Done {
    uint64_t seq = 0;
    Outcome outcome = Outcome::kAcked;
    std::string reason;
  };

  Impl(const SinkOptions& options, const sink::SinkSettings& settings, std::string where)
      : BrokerSink(settings, absl::StrCat("RabbitMQ at ", where)),
        options(options),
        where(std::move(where)),
        reconnect_backoff(options.reconnect_base, options.reconnect_cap, Backoff::Jitter::kNone),
        nack_backoff(options.nack_base, options.nack_cap, Backoff::Jitter::kNone) {}
  ~Impl() override { Close(absl::ZeroDuration()); }

  absl::Status Produce(const sink::OutgoingMessage& message) override;
  int Serve() override;
  absl::Time NextWake(absl::Time now) const override;
  void Disconnect() override;

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
  absl::Duration PublishAgainLater(uint64_t seq);
  bool ReturnedInGrace(uint64_t seq, absl::string_view reason);
  int ServeDone();
  void NoticeState();
  void WatchCurrentSocket();

  SinkOptions options;
  std::string where;  // the redacted URL
  std::unique_ptr<Publisher> publisher;
  bool connected = false;
  bool ever_connected = false;
  bool blocked = false;
  absl::Time reconnect_at = absl::InfinitePast();
  // From options.reconnect_* and nack_*: doubling up to the cap, with no jitter (one
  // sink's own retries).
  Backoff reconnect_backoff;
  absl::Time retry_at = absl::InfinitePast();  // after a nack
  // Until when a return is published again (options.unroutable_grace after a
  // reconnect), and whether this grace has logged its first return.
  absl::Time grace_until = absl::InfinitePast();
  bool grace_logged = false;
  Backoff nack_backoff;
  std::vector<Done> done;
  int watched_fd = -1;
  std::vector<Header> amqp_headers;  // scratch for ToAmqp
};

}  // namespace

// A first connection or a fresh one after a loss (a new channel: the broker numbers
// its confirms from 1 again, which the Publisher handles).
absl::Status Impl::Connect() {
  if (publisher == nullptr) {
    OUTBOXD_ASSIGN_OR_RETURN(publisher, Publisher::Connect(options.publisher, Handler()));
  } else {
    OUTBOXD_RETURN_IF_ERROR(publisher->Reconnect());
  }
  connected = true;
  watched_fd = -1;  // a new socket, perhaps with the old number: register it again
  return absl::OkStatus();
}

void Impl::TryReconnect() {
  absl::Status s = Connect();
  if (s.ok()) {
    reconnect_backoff.Reset();
    if (ever_connected) {
      ++counters_.reconnects;
      grace_until = absl::Now() + options.unroutable_grace;
      grace_logged = false;
      spdlog::info("reconnected to RabbitMQ at {}; publishing {} waiting messages again, in order",
                   where, order().ready());
    }
    ever_connected = true;
    return;
  }
  const absl::Duration wait = reconnect_backoff.Next();
  reconnect_at = absl::Now() + wait;
  spdlog::warn("RabbitMQ not reachable ({}); {} messages wait; retrying in {} (attempt {})", s,
               entries().size(), absl::FormatDuration(wait), reconnect_backoff.attempts());
}

OutgoingMessage Impl::ToAmqp(uint64_t seq, const Entry& e) {
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
absl::Status Impl::PublishOne(uint64_t seq) {
  Entry& e = entries().at(seq);
  absl::Status s = publisher->Produce(ToAmqp(seq, e));
  if (!s.ok()) return s;
  order().Sent(seq);
  if (e.publishes++ > 0) ++counters_.republished;
  return s;
}

void Impl::PublishReady() {
  while (order().ready() > 0 && connected && publisher->Health().ok() && !publisher->Blocked() &&
         absl::Now() >= retry_at) {
    const uint64_t seq = *order().NextReady();
    absl::Status s = PublishOne(seq);
    if (s.code() == absl::StatusCode::kInvalidArgument) {
      // Reported from Serve(), like every outcome: never from inside Produce().
      order().Sent(seq);
      done.push_back(
          {.seq = seq, .outcome = Outcome::kRejected, .reason = std::string(s.message())});
      continue;
    }
    if (!s.ok()) return;
  }
}

// A nacked or (in the grace) returned message goes out again after the nack backoff,
// which an ack resets; returns the wait.
absl::Duration Impl::PublishAgainLater(uint64_t seq) {
  order().Resend(seq);
  const absl::Duration wait = nack_backoff.Next();
  retry_at = absl::Now() + wait;
  return wait;
}

// Right after a reconnect (options.unroutable_grace) a return is not final: a node
// restarted after a crash routes nothing to a queue it is still recovering. The
// message is published again after the nack backoff; the first such return is
// logged. Returns false once the grace is over: the return is reported failed.
bool Impl::ReturnedInGrace(uint64_t seq, absl::string_view reason) {
  if (absl::Now() >= grace_until) return false;
  ++counters_.returned_again;
  PublishAgainLater(seq);
  if (!grace_logged) {
    grace_logged = true;
    spdlog::warn(
        "RabbitMQ returned a message right after the reconnect ({}): a restarted "
        "node may still be recovering its queues; publishing returned messages again "
        "for {} more, then dead-lettering what is still unroutable",
        std::string(reason),
        absl::FormatDuration(absl::Trunc(grace_until - absl::Now(), absl::Milliseconds(100))));
  }
  return true;
}

// Serves the Publisher's completions: acks and failures are reported, lost and
// nacked messages are ready to be published again.
int Impl::ServeDone() {
  int served = 0;
  std::vector<Done> batch;
  batch.swap(done);
  for (Done& d : batch) {
    auto it = entries().find(d.seq);
    if (it == entries().end()) continue;  // reported already (timed out)
    switch (d.outcome) {
      case Outcome::kAcked:
        nack_backoff.Reset();
        Acknowledge(it);
        ++served;
        break;
      case Outcome::kUnroutable: {
        // "no queue bound for routing key X": the dead letter's reason, the fix in it.
        absl::string_view reason = d.reason;
        absl::ConsumePrefix(&reason, "unroutable: ");
        if (ReturnedInGrace(d.seq, reason)) break;
        served += Fail(it, absl::NotFoundError(reason));
        break;
      }
      case Outcome::kRejected:
        served += Fail(it, absl::InvalidArgumentError(d.reason));
        break;
      case Outcome::kNacked: {
        ++counters_.nacked;
        const absl::Duration wait = PublishAgainLater(d.seq);
        spdlog::warn(
            "RabbitMQ refused a message for now (basic.nack, routing key {}); "
            "publishing it again in {}",
            it->second.message.topic(), absl::FormatDuration(wait));
        break;
      }
      case Outcome::kConnectionLost:
        order().Resend(d.seq);
        break;
    }
  }
  return served;
}

// Logs the changes the relay cannot see: a lost connection (its messages wait) and
// the broker's flow control.
void Impl::NoticeState() {
  if (connected && !publisher->Health().ok()) {
    connected = false;
    blocked = false;
    reconnect_at = absl::Now();
    spdlog::warn(
        "RabbitMQ connection lost ({}); {} unconfirmed messages will be published again, "
        "in order, once reconnected",
        publisher->Health(), order().ready());
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

int Impl::Serve() {
  if (connected) publisher->Poll(absl::ZeroDuration());
  int served = ServeDone();
  NoticeState();
  if (!connected && fatal().ok() && absl::Now() >= reconnect_at) TryReconnect();
  if (connected) PublishReady();
  served += ServeDone();
  NoticeState();
  WatchCurrentSocket();
  return served;
}

void Impl::WatchCurrentSocket() {
  const int fd = connected ? publisher->socket_fd() : -1;
  if (fd == watched_fd) return;
  // A lost connection's socket left the epoll set when it was closed.
  if (fd >= 0) WatchSocket(fd);
  watched_fd = fd;
}

// The reconnect or the retry after a nack; at once when rabbitmq-c holds frames
// already read from the socket.
absl::Time Impl::NextWake(absl::Time now) const {
  absl::Time next = absl::InfiniteFuture();
  if (!connected && fatal().ok()) next = std::min(next, reconnect_at);
  // Blocked, the socket wakes us (connection.unblocked): no timer, or it would spin.
  if (connected && !publisher->Blocked() && order().ready() > 0) next = std::min(next, retry_at);
  if (connected && publisher->HasBufferedFrames()) next = now;
  return next;
}

// connection.close, bounded by the connect timeout; what was unconfirmed completes as
// lost into `done`, never served.
void Impl::Disconnect() {
  if (publisher != nullptr) publisher->Close();
}

absl::StatusOr<std::unique_ptr<Sink>> NewSink(const SinkOptions& options,
                                              const sink::SinkSettings& settings) {
  OUTBOXD_ASSIGN_OR_RETURN(std::string where, RedactedUrl(options.publisher.url));
  auto sink = std::make_unique<Impl>(options, settings, std::move(where));
  OUTBOXD_RETURN_IF_ERROR(sink->OpenWakeFd());
  absl::Status connected = sink->Connect();
  if (connected.ok()) {
    sink->ever_connected = true;
  } else if (connected.code() == absl::StatusCode::kUnavailable) {
    // Like a Kafka producer with its brokers down: messages wait, the sink retries.
    spdlog::warn("{}; retrying", connected);
    sink->reconnect_at = absl::Now() + sink->reconnect_backoff.Next();  // reconnect_base
  } else {
    return connected;
  }
  sink->WatchCurrentSocket();
  sink->ArmTimer();
  return std::unique_ptr<Sink>(std::move(sink));
}

absl::Status Impl::Produce(const sink::OutgoingMessage& message) {
  if (!fatal().ok()) return fatal();
  if (connected && publisher->Blocked()) {
    return absl::ResourceExhaustedError(absl::StrCat("RabbitMQ blocked the connection (",
                                                     std::string(publisher->BlockedReason()),
                                                     "); wait until its alarm clears"));
  }
  const auto it = Add(message);
  const uint64_t seq = it->first;
  // Nothing waits before it, of its key or any other: publish now, so a message AMQP
  // cannot carry is refused here, as the interface asks. Otherwise it waits its turn.
  if (order().ready() == 1 && order().NextReady() == seq && connected && publisher->Health().ok() &&
      absl::Now() >= retry_at) {
    absl::Status s = PublishOne(seq);
    if (s.code() == absl::StatusCode::kInvalidArgument ||
        s.code() == absl::StatusCode::kResourceExhausted) {
      Remove(it);
      return s;
    }
    if (s.ok()) return s;
    // Unavailable: lost meanwhile; it waits with the others for the reconnect.
  }
  ArmTimer();  // it waits: wake the caller when it can go
  return absl::OkStatus();
}

}  // namespace outboxd::amqp
