// nats::Sink: the entries the relay produced until each is reported, in per-key lines
// (sink::KeyOrder, sink/key_order.h) so that only the first of each key is ever
// published; the ready ones (never sent, or to be sent again) published lowest first up to
// max_pending at the server; the PubAcks libnats hands its own thread, queued in
// Shared and served on the caller's thread; the retry and timeout deadlines behind a
// timerfd, watched with Shared's eventfd by one epoll descriptor (wake_fd()).
#include "nats/sink.h"

#include <nats/nats.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "base/backoff.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "nats/connection.h"
#include "nats/internal/stream.h"
#include "sink/key_order.h"

namespace outboxd::nats {
namespace {

// The relay's header whose value becomes Nats-Msg-Id (outbox/message_format.h).
constexpr std::string_view kIdHeader = "id";
// What an entry holds beside its text, counted in InFlightBytes(): the map node with
// the Entry (~200 bytes), its strings' and vector's allocations, the line's slot.
constexpr uint64_t kEntryOverhead = 320;

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

}  // namespace

struct Sink::Impl {
  // One produced message, owned until its report.
  struct Entry {
    uint64_t tag = 0;
    std::string topic;
    std::string key;
    std::string value;
    std::vector<std::pair<std::string, std::string>> headers;
    std::string msg_id;  // Nats-Msg-Id: the "id" header
    absl::Time produced_at;
    uint64_t bytes = 0;
    int publishes = 0;
    bool at_server = false;
  };

  SinkOptions options;
  sink::DeliveryHandler on_delivery;
  absl::Duration delivery_timeout = absl::InfiniteDuration();
  std::string where;  // the redacted URL
  Shared* shared = new Shared();
  std::unique_ptr<Connection> connection;
  JetStream js{nullptr, &jsCtx_Destroy};
  bool stream_ready = false;
  absl::Status fatal;

  std::map<uint64_t, Entry> entries;  // by sequence = produce order
  sink::KeyOrder order;               // ready to publish (again): firsts of keys only
  uint64_t next_seq = 1;
  uint64_t bytes = 0;
  int at_server = 0;
  // Refused by libnats before reaching the server (over max_payload): reported from
  // Step(), like every outcome, never from inside Produce().
  std::vector<std::pair<uint64_t, absl::Status>> refused;
  absl::Time retry_at = absl::InfinitePast();
  Backoff retry_backoff{absl::ZeroDuration(), absl::ZeroDuration(), Backoff::Jitter::kNone};
  uint64_t disconnects_seen = 0;
  SinkCounters counters;

  int epoll_fd = -1;
  int timer_fd = -1;

  ~Impl() {
    {
      absl::MutexLock lock(&shared->mu);
      shared->closed = true;
      shared->published.clear();
      shared->done.clear();
    }
    js.reset();
    connection.reset();
    if (shared->event_fd >= 0) close(shared->event_fd);
    if (timer_fd >= 0) close(timer_fd);
    if (epoll_fd >= 0) close(epoll_fd);
  }

  absl::Status OpenWakeFds();
  absl::Status Connect();
  bool Connected() const { return connection->connected(); }
  void PrepareStreamOnce();
  absl::Status PublishOne(uint64_t seq);
  void PublishWaiting();
  int ServeRefused();
  int Step();
  int ServeDone();
  bool BetweenLeaders(const std::string& topic, absl::flat_hash_map<std::string, bool>& asked);
  int ExpireTimedOut();
  void NoticeConnection();
  void Retry(uint64_t seq, absl::string_view reason);
  void Report(const Entry& e, const absl::Status& status, uint64_t stream_seq);
  void Remove(std::map<uint64_t, Entry>::iterator it);
  int Finish(std::map<uint64_t, Entry>::iterator it, uint64_t stream_seq);
  int Fail(std::map<uint64_t, Entry>::iterator it, const absl::Status& status);
  absl::Status FailureStatus(const Entry& e, const Completion& c) const;
  void ArmTimer();
  void DrainWake();
  int Wait(int timeout_ms);
};

absl::Status Sink::Impl::OpenWakeFds() {
  epoll_fd = epoll_create1(EPOLL_CLOEXEC);
  timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  shared->event_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (epoll_fd < 0 || timer_fd < 0 || shared->event_fd < 0) {
    return absl::InternalError(absl::StrCat("epoll/timerfd/eventfd: ", std::strerror(errno)));
  }
  for (int fd : {timer_fd, shared->event_fd}) {
    epoll_event ev{.events = EPOLLIN, .data = {.fd = fd}};
    if (epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev) != 0) {
      return absl::InternalError(absl::StrCat("epoll_ctl: ", std::strerror(errno)));
    }
  }
  return absl::OkStatus();
}

// The connection the sink keeps (nats/connection.h): it never gives up (an outage
// delays; the relay's window bounds what waits), and when the server is not reachable
// libnats keeps trying in the background.
absl::Status Sink::Impl::Connect() {
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
void Sink::Impl::PrepareStreamOnce() {
  if (stream_ready || !fatal.ok() || !Connected()) return;
  absl::Status s = PrepareStream(js.get(), options.stream, where);
  if (s.ok()) {
    stream_ready = true;
  } else if (s.code() == absl::StatusCode::kUnavailable) {
    retry_at = absl::Now() + retry_backoff.Next();
    spdlog::warn("{}; trying again", s);
  } else {
    fatal = absl::AbortedError(s.message());
  }
}

absl::Status Sink::Impl::PublishOne(uint64_t seq) {
  Entry& e = entries.at(seq);
  natsMsg* msg = nullptr;
  if (natsMsg_Create(&msg, e.topic.c_str(), nullptr, e.value.data(),
                     static_cast<int>(e.value.size())) != NATS_OK) {
    return absl::InternalError("natsMsg_Create failed");
  }
  for (const auto& [name, value] : e.headers) natsMsgHeader_Add(msg, name.c_str(), value.c_str());
  jsPubOptions po;
  jsPubOptions_Init(&po);
  po.MaxWait = absl::ToInt64Milliseconds(options.ack_wait);
  // Only the sink's stream may store it: a subject another stream takes is refused.
  po.ExpectStream = options.stream.name.c_str();
  if (!e.msg_id.empty()) po.MsgId = e.msg_id.c_str();
  natsMsg* const sent = msg;
  {
    absl::MutexLock lock(&shared->mu);
    shared->published[sent] = seq;
  }
  const natsStatus s = js_PublishMsgAsync(js.get(), &msg, &po);
  if (s == NATS_OK) {
    order.Sent(seq);
    e.at_server = true;
    ++at_server;
    ++counters.published;
    if (e.publishes++ > 0) ++counters.republished;
    return absl::OkStatus();
  }
  {
    absl::MutexLock lock(&shared->mu);
    shared->published.erase(sent);
  }
  natsMsg_Destroy(msg);  // not taken: still ours
  if (s == NATS_MAX_PAYLOAD) {
    return absl::InvalidArgumentError(
        absl::StrCat("message of ", e.value.size(),
                     " bytes (and its headers) is over the NATS server's "
                     "max_payload of ",
                     natsConnection_GetMaxPayload(connection->get()), " bytes"));
  }
  return absl::UnavailableError(natsStatus_GetText(s));
}

void Sink::Impl::PublishWaiting() {
  while (order.ready() > 0 && stream_ready && at_server < options.max_pending && Connected() &&
         absl::Now() >= retry_at) {
    const uint64_t seq = *order.NextReady();
    absl::Status s = PublishOne(seq);
    if (s.code() == absl::StatusCode::kInvalidArgument) {
      order.Sent(seq);
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
void Sink::Impl::Retry(uint64_t seq, absl::string_view reason) {
  order.Resend(seq);
  const absl::Time now = absl::Now();
  if (now < retry_at) return;
  const absl::Duration wait = retry_backoff.Next();
  retry_at = now + wait;
  const auto level = retry_backoff.attempts() == 1 ? spdlog::level::warn : spdlog::level::debug;
  spdlog::log(level, "NATS at {} did not take a message to {} ({}); publishing again in {}", where,
              entries.at(seq).topic, std::string(reason), absl::FormatDuration(wait));
}

void Sink::Impl::Report(const Entry& e, const absl::Status& status, uint64_t stream_seq) {
  if (!on_delivery) return;
  sink::DeliveryReport report{.tag = e.tag,
                              .status = status,
                              .offset = stream_seq > 0 ? static_cast<int64_t>(stream_seq) : -1,
                              .topic = e.topic};
  if (!status.ok()) {
    report.key = e.key;
    report.value = e.value;
    for (const auto& [name, value] : e.headers) report.headers.push_back({name, value});
  }
  on_delivery(report);
}

void Sink::Impl::Remove(std::map<uint64_t, Entry>::iterator it) {
  bytes -= it->second.bytes;
  if (it->second.at_server) --at_server;
  entries.erase(it);
}

// Acknowledged: reported OK; the key's next message may be published.
int Sink::Impl::Finish(std::map<uint64_t, Entry>::iterator it, uint64_t stream_seq) {
  Report(it->second, absl::OkStatus(), stream_seq);
  order.Remove(it->first, it->second.key);
  Remove(it);
  return 1;
}

// Reports a failed entry, then every later entry of its key (none was published): the
// relay dead-letters them in order behind it. Returns how many were reported.
int Sink::Impl::Fail(std::map<uint64_t, Entry>::iterator it, const absl::Status& status) {
  const std::vector<uint64_t> behind = order.Followers(it->first);
  const std::string key = it->second.key;
  order.Remove(it->first, key);
  Report(it->second, status, 0);
  Remove(it);
  const absl::Status follows = absl::FailedPreconditionError(
      absl::StrCat("follows an earlier message of its key that failed: ", status.message()));
  for (uint64_t seq : behind) {
    order.Remove(seq, key);
    auto follower = entries.find(seq);
    Report(follower->second, follows, 0);
    Remove(follower);
  }
  return 1 + static_cast<int>(behind.size());
}

// The dead letter's reason: what the server said, and the fix.
absl::Status Sink::Impl::FailureStatus(const Entry& e, const Completion& c) const {
  const std::string& stream = options.stream.name;
  switch (c.outcome) {
    case Outcome::kNoStream:
      return absl::NotFoundError(absl::StrCat("no JetStream stream takes subject ", e.topic,
                                              " (no responders); add it to stream ", stream));
    case Outcome::kOtherStream:
      return absl::NotFoundError(absl::StrCat(
          "subject ", e.topic, " belongs to another stream than ", stream, ": ", c.reason));
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

int Sink::Impl::ServeRefused() {
  int served = 0;
  std::vector<std::pair<uint64_t, absl::Status>> batch;
  batch.swap(refused);
  for (const auto& [seq, status] : batch) {
    auto it = entries.find(seq);
    if (it != entries.end()) served += Fail(it, status);
  }
  return served;
}

int Sink::Impl::ServeDone() {
  std::vector<Completion> batch;
  {
    absl::MutexLock lock(&shared->mu);
    batch.swap(shared->done);
  }
  int served = 0;
  absl::flat_hash_map<std::string, bool> between_leaders;  // by subject, for this batch
  for (Completion& c : batch) {
    auto it = entries.find(c.seq);
    if (it == entries.end()) continue;  // reported already (timed out)
    it->second.at_server = false;
    --at_server;
    if (c.outcome == Outcome::kNoStream && BetweenLeaders(it->second.topic, between_leaders)) {
      c.outcome = Outcome::kRetry;
    }
    switch (c.outcome) {
      case Outcome::kAcked:
        if (c.duplicate) ++counters.duplicates;
        retry_backoff.Reset();
        served += Finish(it, c.stream_seq);
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
bool Sink::Impl::BetweenLeaders(const std::string& topic,
                                absl::flat_hash_map<std::string, bool>& asked) {
  auto [it, fresh] = asked.try_emplace(topic, false);
  if (fresh) {
    absl::StatusOr<bool> takes = StreamTakesSubject(js.get(), options.stream.name, topic);
    it->second = !takes.ok() || *takes;
  }
  return it->second;
}

// With a finite delivery timeout (the polling relay's attempts), a message not
// acknowledged in time is reported failed; an ack that comes later is ignored.
int Sink::Impl::ExpireTimedOut() {
  if (delivery_timeout == absl::InfiniteDuration()) return 0;
  int served = 0;
  const absl::Time now = absl::Now();
  while (!entries.empty() && entries.begin()->second.produced_at + delivery_timeout <= now) {
    served += Fail(entries.begin(), absl::UnavailableError(absl::StrCat(
                                        "not acknowledged by JetStream at ", where, " within ",
                                        absl::FormatDuration(delivery_timeout))));
  }
  return served;
}

void Sink::Impl::NoticeConnection() {
  if (shared->connection_closed.load() && fatal.ok()) {
    fatal = absl::AbortedError(absl::StrCat("NATS connection to ", where, " closed"));
  }
  const uint64_t disconnects = shared->disconnects.load();
  if (disconnects != disconnects_seen) {
    disconnects_seen = disconnects;
    spdlog::warn(
        "NATS connection to {} lost; reconnecting. {} messages wait; those unacknowledged are "
        "published again after {} (Nats-Msg-Id keeps them once)",
        where, entries.size(), absl::FormatDuration(options.ack_wait));
  }
}

int Sink::Impl::Step() {
  int served = ServeDone();
  NoticeConnection();
  PrepareStreamOnce();
  PublishWaiting();
  served += ServeRefused();
  served += ServeDone();
  served += ExpireTimedOut();
  ArmTimer();
  return served;
}

// The timer fires at the sink's next deadline (a retry, a delivery timeout, the stream
// check), so a select() on wake_fd() wakes for it; acks and reconnects wake the eventfd.
void Sink::Impl::ArmTimer() {
  const absl::Time now = absl::Now();
  absl::Time next = absl::InfiniteFuture();
  if ((order.ready() > 0 || !stream_ready) && fatal.ok()) next = std::min(next, retry_at);
  if (!refused.empty()) next = now;
  if (delivery_timeout != absl::InfiniteDuration() && !entries.empty()) {
    next = std::min(next, entries.begin()->second.produced_at + delivery_timeout);
  }
  // Disconnected, the reconnect wakes the eventfd: no timer, or it would spin.
  if (!Connected() && next <= now) next = now + absl::Milliseconds(100);
  itimerspec spec{};
  if (next != absl::InfiniteFuture()) {
    // A zero it_value disarms: the earliest is one nanosecond from now.
    spec.it_value = absl::ToTimespec(std::max(next - now, absl::Nanoseconds(1)));
  }
  timerfd_settime(timer_fd, 0, &spec, nullptr);
}

void Sink::Impl::DrainWake() {
  uint64_t count;
  while (read(timer_fd, &count, sizeof count) > 0) {
  }
  while (read(shared->event_fd, &count, sizeof count) > 0) {
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
  if (options.max_pending < 1) return absl::InvalidArgumentError("max_pending must be at least 1");
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->retry_backoff = Backoff(options.retry_base, options.retry_cap, Backoff::Jitter::kNone);
  impl->on_delivery = settings.on_delivery;
  impl->delivery_timeout = settings.delivery_timeout;
  impl->where = RedactedUrl(options.url);
  OUTBOXD_RETURN_IF_ERROR(impl->OpenWakeFds());
  OUTBOXD_RETURN_IF_ERROR(impl->Connect());
  if (impl->Connected()) {
    OUTBOXD_RETURN_IF_ERROR(PrepareStream(impl->js.get(), options.stream, impl->where));
    impl->stream_ready = true;
  }
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
  OUTBOXD_RETURN_IF_ERROR(CheckSubject(message.topic));
  Impl::Entry e{.tag = message.tag,
                .topic = std::string(message.topic),
                .key = std::string(message.key),
                .value = std::string(message.value),
                .produced_at = absl::Now()};
  e.headers.reserve(message.headers.size());
  e.bytes = kEntryOverhead + e.topic.size() + e.key.size() + e.value.size();
  for (const sink::Header& h : message.headers) {
    OUTBOXD_RETURN_IF_ERROR(CheckHeader(h));
    if (h.name == kIdHeader) e.msg_id = std::string(h.value);
    e.headers.emplace_back(h.name, h.value);
    e.bytes += h.name.size() + h.value.size() + 2 * sizeof(std::string);
  }
  const uint64_t seq = m.next_seq++;
  auto [it, added] = m.entries.emplace(seq, std::move(e));
  m.bytes += it->second.bytes;
  m.order.Add(seq, it->second.key);
  // Published from Step(), so that every outcome (a message over max_payload too) is
  // reported from Poll(), in order behind its key.
  m.PublishWaiting();
  m.ArmTimer();
  return absl::OkStatus();
}

int Sink::Poll(int timeout_ms) {
  impl_->DrainWake();
  int served = impl_->Step();
  if (served > 0 || timeout_ms <= 0) return served;
  if (impl_->Wait(timeout_ms) <= 0) return served;
  impl_->DrainWake();
  return served + impl_->Step();
}

absl::Status Sink::Flush(absl::Duration timeout) {
  return sink::PollUntilConfirmed(*this, timeout, absl::StrCat("JetStream at ", impl_->where));
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
  impl_.reset();
  return dropped;
}

void Sink::RaiseFatalErrorForTesting(std::string_view reason) {
  impl_->fatal = absl::AbortedError(std::string(reason));
}

const SinkCounters& Sink::counters() const { return impl_->counters; }

}  // namespace outboxd::nats
