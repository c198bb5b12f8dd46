// nats::NewSink: the ready entries (never sent, or to be sent again) published
// lowest first up to max_pending at the server; the PubAcks libnats hands its own
// thread, queued in Shared and served on the caller's thread; the retry deadline, and
// Shared's eventfd in wake_fd(). What every confirming sink does (the entries until
// each is reported, in per-key lines so that only the first of each key is ever
// published; the timer and wake_fd()) is sink::ConfirmingSink's
// (sink/confirming_sink.h).
#include "nats/sink.h"

#include <nats/nats.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "base/backoff.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "nats/connection.h"
#include "nats/internal/stream.h"

namespace outboxd::nats {
namespace {

// The relay's header whose value becomes Nats-Msg-Id (outbox/message_format.h).
constexpr std::string_view kIdHeader = "id";

// What became of a publish, as the ack handler saw it.
enum class Outcome {
  kAcked,        // PubAck (perhaps a duplicate): stored
  kRetry,        // no ack in time, or a refusal that may pass: publish again
  kNoStream,     // no responders: no stream takes the subject
  kOtherStream,  // the subject belongs to another stream than the sink's
  kFull,         // the stream is at a limit and discards new messages
  kTooLarge,     // over the stream's max_msg_size
};

struct Completion {
  uint64_t seq = 0;
  Outcome outcome = Outcome::kAcked;
  bool duplicate = false;
  uint64_t stream_seq = 0;
  std::string reason;
};

// What libnats' threads touch: the ack handler and the connection callbacks. Never
// freed: libnats may still be inside a callback after the connection is destroyed (it
// does not join its delivery threads), so Close() marks it closed and empties it, and
// the ~200 bytes left stay (one per sink; the relay makes one per fatal error).
struct Shared {
  absl::Mutex mu;
  bool closed ABSL_GUARDED_BY(mu) = false;
  // Published and not yet completed, by the natsMsg libnats hands back.
  absl::flat_hash_map<natsMsg*, uint64_t> published ABSL_GUARDED_BY(mu);
  std::vector<Completion> done ABSL_GUARDED_BY(mu);
  int event_fd = -1;
  std::atomic<bool> connection_closed{false};
  std::atomic<uint64_t> disconnects{0};

  void Wake() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (closed) return;
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = write(event_fd, &one, sizeof one);
  }
};

Completion Classify(jsPubAck* pa, jsPubAckErr* pae) {
  if (pa != nullptr) {
    return {.outcome = Outcome::kAcked, .duplicate = pa->Duplicate, .stream_seq = pa->Sequence};
  }
  const std::string text = pae->ErrText != nullptr ? pae->ErrText : natsStatus_GetText(pae->Err);
  if (pae->Err == NATS_NO_RESPONDERS) return {.outcome = Outcome::kNoStream, .reason = text};
  switch (pae->ErrCode) {
    case JSStreamMessageExceedsMaximumErr:
      return {.outcome = Outcome::kTooLarge, .reason = text};
    case JSStreamNotMatchErr:
      return {.outcome = Outcome::kOtherStream, .reason = text};
    case JSStreamStoreFailedErr:
      // "maximum messages exceeded", "maximum bytes exceeded", "maximum messages per
      // subject exceeded": a limit with discard new. Anything else (a disk error) may pass.
      if (absl::StrContains(text, "maximum")) return {.outcome = Outcome::kFull, .reason = text};
      break;
    default:
      break;
  }
  return {.outcome = Outcome::kRetry, .reason = text};
}

// libnats' ack handler, on its own thread: queues the outcome and wakes the caller.
void OnAck(jsCtx*, natsMsg* msg, jsPubAck* pa, jsPubAckErr* pae, void* closure) {
  auto* shared = static_cast<Shared*>(closure);
  {
    absl::MutexLock lock(&shared->mu);
    auto it = shared->published.find(msg);
    if (it != shared->published.end()) {
      Completion c = Classify(pa, pae);
      c.seq = it->second;
      shared->published.erase(it);
      shared->done.push_back(std::move(c));
      shared->Wake();
    }
  }
  natsMsg_Destroy(msg);  // ours once the handler has it (nats.h, jsPubAckHandler)
}

void OnDisconnected(natsConnection*, void* closure) {
  auto* shared = static_cast<Shared*>(closure);
  shared->disconnects.fetch_add(1);
  absl::MutexLock lock(&shared->mu);
  shared->Wake();
}

// Also the connected callback of a first connection made in the background.
void OnReconnected(natsConnection*, void* closure) {
  auto* shared = static_cast<Shared*>(closure);
  absl::MutexLock lock(&shared->mu);
  shared->Wake();
}

void OnClosed(natsConnection*, void* closure) {
  auto* shared = static_cast<Shared*>(closure);
  shared->connection_closed.store(true);
  absl::MutexLock lock(&shared->mu);
  shared->Wake();
}

// A publish subject: tokens separated by dots, none empty, no whitespace or control
// characters, no wildcard token (those subscribe, they do not publish).
absl::Status CheckSubject(std::string_view subject) {
  if (subject.empty()) return absl::InvalidArgumentError("empty NATS subject");
  for (absl::string_view token :
       absl::StrSplit(absl::string_view(subject.data(), subject.size()), '.')) {
    if (token.empty() || token == "*" || token == ">") {
      return absl::InvalidArgumentError(absl::StrCat(
          "not a NATS subject to publish to (empty or wildcard token): ", std::string(subject)));
    }
  }
  for (unsigned char c : subject) {
    if (c <= ' ' || c == 0x7f) {
      return absl::InvalidArgumentError(
          "a NATS subject cannot hold whitespace or control characters");
    }
  }
  return absl::OkStatus();
}

// A header line of NATS's protocol ends at CR LF, and libnats takes C strings.
absl::Status CheckHeader(const sink::Header& h) {
  auto bad = [](std::string_view v) {
    return v.find_first_of(std::string_view("\r\n\0", 3)) != std::string_view::npos;
  };
  if (h.name.empty() || bad(h.name) || h.name.find(':') != std::string_view::npos || bad(h.value)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "header ", std::string(h.name), " cannot be carried by NATS (a line break, NUL or ':')"));
  }
  return absl::OkStatus();
}

using JetStream = std::unique_ptr<jsCtx, decltype(&jsCtx_Destroy)>;

struct Impl final : public Sink {
  // For NewSink, which sets it up.
  using ConfirmingSink::ArmTimer;
  using ConfirmingSink::OpenWakeFd;

  Impl(const SinkOptions& options, const sink::SinkSettings& settings, std::string where)
      : BrokerSink(settings, absl::StrCat("JetStream at ", where)),
        options(options),
        where(std::move(where)),
        retry_backoff(options.retry_base, options.retry_cap, Backoff::Jitter::kNone) {}
  ~Impl() override { Close(absl::ZeroDuration()); }

  absl::Status Produce(const sink::OutgoingMessage& message) override;
  int Serve() override;
  absl::Time NextWake(absl::Time now) const override;
  void Disconnect() override;

  absl::Status OpenEventFd();
  absl::Status Connect();
  bool Connected() const { return connection != nullptr && connection->connected(); }
  void PrepareStreamOnce();
  absl::Status PublishOne(uint64_t seq);
  void PublishWaiting();
  int ServeRefused();
  int ServeDone();
  bool BetweenLeaders(std::string_view topic, absl::flat_hash_map<std::string, bool>& asked);
  void NoticeConnection();
  void Retry(uint64_t seq, absl::string_view reason);
  absl::Status FailureStatus(const Entry& e, const Completion& c) const;

  SinkOptions options;
  std::string where;  // the redacted URL
  Shared* shared = new Shared();
  std::unique_ptr<Connection> connection;
  JetStream js{nullptr, &jsCtx_Destroy};
  bool stream_ready = false;
  // Published and not yet completed: each publish libnats took completes once (a
  // PubAck, a refusal, or no ack within ack_wait), its entry reported meanwhile or not.
  int at_server = 0;
  // Refused by libnats before reaching the server (over max_payload): reported from
  // Serve(), like every outcome, never from inside Produce().
  std::vector<std::pair<uint64_t, absl::Status>> refused;
  absl::Time retry_at = absl::InfinitePast();
  Backoff retry_backoff;
  uint64_t disconnects_seen = 0;
};

}  // namespace

absl::Status Impl::OpenEventFd() {
  shared->event_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (shared->event_fd < 0) {
    return absl::InternalError(absl::StrCat("eventfd: ", std::strerror(errno)));
  }
  return WatchSignal(shared->event_fd);
}

// The connection the sink keeps (nats/connection.h): it never gives up (an outage
// delays; the relay's window bounds what waits), and when the server is not reachable
// libnats keeps trying in the background.
absl::Status Impl::Connect() {
  OUTBOXD_ASSIGN_OR_RETURN(connection, Connection::Open({.url = options.url,
                                                         .creds_file = options.creds_file,
                                                         .user = options.user,
                                                         .password = options.password,
                                                         .events = {.disconnected = OnDisconnected,
                                                                    .reconnected = OnReconnected,
                                                                    .closed = OnClosed,
                                                                    .closure = shared}}));
  jsOptions jo;
  jsOptions_Init(&jo);
  jo.PublishAsync.AckHandler = OnAck;
  jo.PublishAsync.AckHandlerClosure = shared;
  jo.PublishAsync.MaxPending = options.max_pending;
  jo.PublishAsync.StallWait = 1;  // the sink keeps its own window; never block the caller
  jsCtx* ctx = nullptr;
  if (natsConnection_JetStream(&ctx, connection->get(), &jo) != NATS_OK) {
    return absl::InternalError("natsConnection_JetStream failed");
  }
  js.reset(ctx);
  return absl::OkStatus();
}

// Before the first publish, once connected: a stream refused here cannot be published
// to, so the sink turns fatal with the reason (the relay's new sink reports it at once).
void Impl::PrepareStreamOnce() {
  if (stream_ready || !fatal().ok() || !Connected()) return;
  absl::Status s = PrepareStream(js.get(), options.stream, where);
  if (s.ok()) {
    stream_ready = true;
  } else if (s.code() == absl::StatusCode::kUnavailable) {
    retry_at = absl::Now() + retry_backoff.Next();
    spdlog::warn("{}; trying again", s);
  } else {
    SetFatal(absl::AbortedError(s.message()));
  }
}

absl::Status Impl::PublishOne(uint64_t seq) {
  Entry& e = entries().at(seq);
  // Each of a StoredMessage's fields ends with a NUL: its data() is a C string.
  const sink::StoredMessage& m = e.message;
  natsMsg* msg = nullptr;
  if (natsMsg_Create(&msg, m.topic().data(), nullptr, m.value().data(),
                     static_cast<int>(m.value().size())) != NATS_OK) {
    return absl::InternalError("natsMsg_Create failed");
  }
  std::string_view msg_id;  // Nats-Msg-Id: the "id" header
  for (size_t i = 0; i < m.header_count(); ++i) {
    const sink::Header h = m.header(i);
    natsMsgHeader_Add(msg, h.name.data(), h.value.data());
    if (h.name == kIdHeader) msg_id = h.value;
  }
  jsPubOptions po;
  jsPubOptions_Init(&po);
  po.MaxWait = absl::ToInt64Milliseconds(options.ack_wait);
  // Only the sink's stream may store it: a subject another stream takes is refused.
  po.ExpectStream = options.stream.name.c_str();
  if (!msg_id.empty()) po.MsgId = msg_id.data();
  natsMsg* const sent = msg;
  {
    absl::MutexLock lock(&shared->mu);
    shared->published[sent] = seq;
  }
  const natsStatus s = js_PublishMsgAsync(js.get(), &msg, &po);
  if (s == NATS_OK) {
    order().Sent(seq);
    ++at_server;
    ++counters_.published;
    if (e.publishes++ > 0) ++counters_.republished;
    return absl::OkStatus();
  }
  {
    absl::MutexLock lock(&shared->mu);
    shared->published.erase(sent);
  }
  natsMsg_Destroy(msg);  // not taken: still ours
  if (s == NATS_MAX_PAYLOAD) {
    return absl::InvalidArgumentError(
        absl::StrCat("message of ", m.value().size(),
                     " bytes (and its headers) is over the NATS server's "
                     "max_payload of ",
                     natsConnection_GetMaxPayload(connection->get()), " bytes"));
  }
  return absl::UnavailableError(natsStatus_GetText(s));
}

void Impl::PublishWaiting() {
  while (order().ready() > 0 && stream_ready && at_server < options.max_pending && Connected() &&
         absl::Now() >= retry_at) {
    const uint64_t seq = *order().NextReady();
    absl::Status s = PublishOne(seq);
    if (s.code() == absl::StatusCode::kInvalidArgument) {
      order().Sent(seq);
      refused.emplace_back(seq, std::move(s));
      continue;
    }
    if (!s.ok()) {
      Retry(seq, s.message());
      return;
    }
  }
}

// Publishing pauses for the backoff (every key: the server is the likely cause) and
// the message is ready again. The outage's other lost acks join the
// pause already set rather than lengthen it; the first of a series is warned about,
// the later ones logged at debug, until an ack resets the series.
void Impl::Retry(uint64_t seq, absl::string_view reason) {
  order().Resend(seq);
  const absl::Time now = absl::Now();
  if (now < retry_at) return;
  const absl::Duration wait = retry_backoff.Next();
  retry_at = now + wait;
  const auto level = retry_backoff.attempts() == 1 ? spdlog::level::warn : spdlog::level::debug;
  spdlog::log(level, "NATS at {} did not take a message to {} ({}); publishing again in {}", where,
              entries().at(seq).message.topic(), std::string(reason), absl::FormatDuration(wait));
}

// The dead letter's reason: what the server said, and the fix.
absl::Status Impl::FailureStatus(const Entry& e, const Completion& c) const {
  const std::string& stream = options.stream.name;
  const std::string subject(e.message.topic());
  switch (c.outcome) {
    case Outcome::kNoStream:
      return absl::NotFoundError(absl::StrCat("no JetStream stream takes subject ", subject,
                                              " (no responders); add it to stream ", stream));
    case Outcome::kOtherStream:
      return absl::NotFoundError(absl::StrCat(
          "subject ", subject, " belongs to another stream than ", stream, ": ", c.reason));
    case Outcome::kFull:
      return absl::FailedPreconditionError(
          absl::StrCat("JetStream stream ", stream, " refused the message: ", c.reason));
    case Outcome::kTooLarge:
      return absl::InvalidArgumentError(
          absl::StrCat("JetStream stream ", stream, " refused the message: ", c.reason));
    case Outcome::kAcked:
    case Outcome::kRetry:
      break;
  }
  return absl::InternalError("not a failure");
}

int Impl::ServeRefused() {
  int served = 0;
  std::vector<std::pair<uint64_t, absl::Status>> batch;
  batch.swap(refused);
  for (const auto& [seq, status] : batch) {
    auto it = entries().find(seq);
    if (it != entries().end()) served += Fail(it, status);
  }
  return served;
}

int Impl::ServeDone() {
  std::vector<Completion> batch;
  {
    absl::MutexLock lock(&shared->mu);
    batch.swap(shared->done);
  }
  int served = 0;
  absl::flat_hash_map<std::string, bool> between_leaders;  // by subject, for this batch
  for (Completion& c : batch) {
    --at_server;
    auto it = entries().find(c.seq);
    if (it == entries().end()) continue;  // reported already (timed out)
    if (c.outcome == Outcome::kNoStream &&
        BetweenLeaders(it->second.message.topic(), between_leaders)) {
      c.outcome = Outcome::kRetry;
    }
    switch (c.outcome) {
      case Outcome::kAcked:
        if (c.duplicate) ++counters_.duplicates;
        retry_backoff.Reset();
        Acknowledge(it, c.stream_seq > 0 ? static_cast<int64_t>(c.stream_seq) : -1);
        ++served;
        break;
      case Outcome::kRetry:
        Retry(c.seq, c.reason);
        break;
      default:
        served += Fail(it, FailureStatus(it->second, c));
        break;
    }
  }
  return served;
}

// No responders on `topic`: the sink's stream takes it (or JetStream could not say),
// so the stream is between leaders and the message is published again; or no stream
// takes it: a dead letter. Asked once per subject in a batch of completions.
bool Impl::BetweenLeaders(std::string_view topic, absl::flat_hash_map<std::string, bool>& asked) {
  auto [it, fresh] = asked.try_emplace(std::string(topic), false);
  if (fresh) {
    absl::StatusOr<bool> takes = StreamTakesSubject(js.get(), options.stream.name, topic);
    it->second = !takes.ok() || *takes;
  }
  return it->second;
}

void Impl::NoticeConnection() {
  if (shared->connection_closed.load() && fatal().ok()) {
    SetFatal(absl::AbortedError(absl::StrCat("NATS connection to ", where, " closed")));
  }
  const uint64_t disconnects = shared->disconnects.load();
  if (disconnects != disconnects_seen) {
    disconnects_seen = disconnects;
    spdlog::warn(
        "NATS connection to {} lost; reconnecting. {} messages wait; those unacknowledged are "
        "published again after {} (Nats-Msg-Id keeps them once)",
        where, entries().size(), absl::FormatDuration(options.ack_wait));
  }
}

int Impl::Serve() {
  int served = ServeDone();
  NoticeConnection();
  PrepareStreamOnce();
  PublishWaiting();
  served += ServeRefused();
  served += ServeDone();
  return served;
}

// A retry or the stream check; at once for a refusal to report. Acks and reconnects
// wake the eventfd.
absl::Time Impl::NextWake(absl::Time now) const {
  absl::Time next = absl::InfiniteFuture();
  if ((order().ready() > 0 || !stream_ready) && fatal().ok()) next = retry_at;
  if (!refused.empty()) next = now;
  // Disconnected, the reconnect wakes the eventfd: no timer, or it would spin.
  if (!Connected() && next <= now) next = now + absl::Milliseconds(100);
  return next;
}

void Impl::Disconnect() {
  {
    absl::MutexLock lock(&shared->mu);
    shared->closed = true;
    shared->published.clear();
    shared->done.clear();
  }
  js.reset();
  connection.reset();
  if (shared->event_fd >= 0) close(shared->event_fd);
}

absl::StatusOr<std::unique_ptr<Sink>> NewSink(const SinkOptions& options,
                                              const sink::SinkSettings& settings) {
  if (options.max_pending < 1) return absl::InvalidArgumentError("max_pending must be at least 1");
  auto sink = std::make_unique<Impl>(options, settings, RedactedUrl(options.url));
  OUTBOXD_RETURN_IF_ERROR(sink->OpenWakeFd());
  OUTBOXD_RETURN_IF_ERROR(sink->OpenEventFd());
  OUTBOXD_RETURN_IF_ERROR(sink->Connect());
  if (sink->Connected()) {
    OUTBOXD_RETURN_IF_ERROR(PrepareStream(sink->js.get(), options.stream, sink->where));
    sink->stream_ready = true;
  }
  sink->ArmTimer();
  return std::unique_ptr<Sink>(std::move(sink));
}

absl::Status Impl::Produce(const sink::OutgoingMessage& message) {
  if (!fatal().ok()) return fatal();
  OUTBOXD_RETURN_IF_ERROR(CheckSubject(message.topic));
  for (const sink::Header& h : message.headers) OUTBOXD_RETURN_IF_ERROR(CheckHeader(h));
  Add(message);
  // Published now when its turn has come; every outcome (a message over max_payload
  // too) is reported from Poll(), in order behind its key.
  PublishWaiting();
  ArmTimer();
  return absl::OkStatus();
}

}  // namespace outboxd::nats
