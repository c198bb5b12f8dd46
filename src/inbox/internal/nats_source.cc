// The NATS JetStream source over libnats, on nats::Connection (nats/connection.h): a
// durable pull consumer on the relay's stream, explicit acks, at most `prefetch`
// messages delivered and not acked (its MaxAckPending). Settle() is a synchronous ack,
// sent only after the inbox transaction committed; a crash before it leaves the
// message unacked, so JetStream delivers it again after the consumer's ack wait and
// the inbox skips it. The durable consumer lives on the server: a restarted consumer
// binds to it and resumes where the acks left off.
//
// Order: Redeliver() naks the failed message and then every message fetched behind it,
// in delivery order, and once more what arrives late for an expired pull request
// before the next fetch: JetStream delivers nak'd messages again in the order they
// were nak'd, ahead of new ones, so after the backoff they come again in stream order.
//
// Fetching: a no-wait request for up to `prefetch` messages (those available now),
// and when there is none a request for one that waits up to the caller's timeout, so
// a lone message is handed over as it arrives rather than at the end of the wait.
#include <nats/nats.h>

#include <algorithm>
#include <cstdlib>
#include <deque>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "inbox/consumer.h"
#include "inbox/internal/source.h"
#include "nats/connection.h"

namespace outboxd::inbox::internal {
namespace {

using JetStream = std::unique_ptr<jsCtx, decltype(&jsCtx_Destroy)>;
using Subscription = std::unique_ptr<natsSubscription, decltype(&natsSubscription_Destroy)>;
using MessagePtr = std::unique_ptr<natsMsg, decltype(&natsMsg_Destroy)>;

// The wait of a no-wait request: the server answers at once (messages or "none");
// this bounds only a request sent while disconnected.
constexpr absl::Duration kNoWaitExpiry = absl::Milliseconds(50);
// Between attempts to bind the consumer while its stream does not exist yet.
constexpr absl::Duration kBindRetry = absl::Seconds(1);

MessagePtr Own(natsMsg* msg) { return MessagePtr(msg, &natsMsg_Destroy); }

std::string LastError(natsStatus s) {
  const char* text = nats_GetLastError(nullptr);
  return text != nullptr && *text != '\0' ? text : natsStatus_GetText(s);
}

void CopyHeaders(natsMsg* msg, Message& m) {
  const char** keys = nullptr;
  int count = 0;
  if (natsMsgHeader_Keys(msg, &keys, &count) != NATS_OK) return;
  for (int i = 0; i < count; ++i) {
    const char** values = nullptr;
    int n = 0;
    if (natsMsgHeader_Values(msg, keys[i], &values, &n) != NATS_OK) continue;
    for (int j = 0; j < n; ++j) m.headers.emplace_back(keys[i], values[j]);
    free(values);  // the array is ours, the strings the message's (nats.h)
  }
  free(keys);
}

class NatsSource final : public Source {
 public:
  explicit NatsSource(const ConsumerOptions& options) : options_(options) {
    if (options_.durable.empty()) options_.durable = options_.group_id;
  }
  ~NatsSource() override { Close(); }

  // Connects and binds the durable consumer (creating it when missing). A stream that
  // does not exist yet is waited for: Next() binds once the relay has created it.
  absl::Status Connect();

  absl::StatusOr<std::optional<Received>> Next(absl::Duration timeout) override;
  absl::Status Settle(const Received& r) override;
  void Redeliver(const Received& r) override;
  void Close() override;

  std::string Where(const Message& m) const override {
    return absl::StrCat("stream ", options_.stream, ", sequence ", m.offset, " (subject ", m.topic,
                        ")");
  }
  std::string SkipAdvice() const override {
    return absl::StrCat(
        "it is not acked. Fix the producer, then remove it from the stream (nats "
        "stream rmm ",
        options_.stream, " SEQUENCE) if it must be skipped");
  }

 private:
  absl::Status Bind();
  // Bind() again when the time has come; OK and no subscription while waiting.
  absl::Status BindWhenDue();
  // Fetched messages into ready_; OK with none when none came in time.
  absl::Status Fetch(absl::Duration timeout);
  absl::Status FetchInto(int batch, bool no_wait, absl::Duration expires);
  // Naks every held message, in delivery order, and forgets them.
  void NakHeld();
  Received ToReceived(natsMsg* msg, uint64_t tag) const;

  ConsumerOptions options_;
  std::unique_ptr<nats::Connection> conn_;
  JetStream js_{nullptr, &jsCtx_Destroy};
  Subscription sub_{nullptr, &natsSubscription_Destroy};
  absl::Time bind_at_ = absl::InfinitePast();
  MessagePtr current_{nullptr, &natsMsg_Destroy};  // handed out, not settled yet
  uint64_t current_tag_ = 0;
  std::deque<MessagePtr> ready_;  // fetched, not handed out yet
  // After a Redeliver(): what a pull request that expired still brings is nak'd
  // behind the rest before the next fetch.
  bool nak_late_ = false;
};

absl::Status NatsSource::Connect() {
  OUTBOXD_ASSIGN_OR_RETURN(conn_,
                           nats::Connection::Open({.url = options_.nats_url,
                                                   .creds_file = options_.nats_creds_file,
                                                   .name = "outboxd inbox",
                                                   .unreachable = nats::Unreachable::kFail}));
  jsCtx* js = nullptr;
  if (natsConnection_JetStream(&js, conn_->get(), nullptr) != NATS_OK) {
    return absl::InternalError("natsConnection_JetStream failed");
  }
  js_.reset(js);
  return Bind();
}

absl::Status NatsSource::Bind() {
  jsSubOptions so;
  jsSubOptions_Init(&so);
  so.Stream = options_.stream.c_str();
  so.Config.AckPolicy = js_AckExplicit;
  so.Config.DeliverPolicy = js_DeliverAll;
  so.Config.AckWait = absl::ToInt64Nanoseconds(options_.ack_wait);
  so.Config.MaxAckPending = options_.prefetch;
  natsSubscription* sub = nullptr;
  jsErrCode code = static_cast<jsErrCode>(0);
  const natsStatus s = js_PullSubscribe(&sub, js_.get(), options_.topics.front().c_str(),
                                        options_.durable.c_str(), nullptr, &so, &code);
  if (s == NATS_OK) {
    sub_.reset(sub);
    spdlog::info("inbox consuming JetStream stream {} at {}, durable consumer {}, subject {}",
                 options_.stream, conn_->where(), options_.durable, options_.topics.front());
    return absl::OkStatus();
  }
  if (code == JSStreamNotFoundErr) {
    bind_at_ = absl::Now() + kBindRetry;
    spdlog::warn(
        "JetStream stream {} does not exist at {} yet; waiting for it (outboxd run "
        "--sink nats creates it)",
        options_.stream, conn_->where());
    return absl::OkStatus();
  }
  if (s == NATS_TIMEOUT || s == NATS_NO_RESPONDERS) {
    return absl::UnavailableError(
        absl::StrCat("JetStream at ", conn_->where(), " did not answer; is it enabled (-js)?"));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("cannot bind durable consumer ", options_.durable, " on JetStream stream ",
                   options_.stream, " at ", conn_->where(), ": ", LastError(s),
                   "; give it the same settings or another name (--durable)"));
}

absl::Status NatsSource::BindWhenDue() {
  if (absl::Now() < bind_at_) return absl::OkStatus();
  absl::Status s = Bind();
  if (absl::IsUnavailable(s)) {
    spdlog::warn("{} (retrying)", s.message());
    bind_at_ = absl::Now() + kBindRetry;
    return absl::OkStatus();
  }
  return s;
}

absl::Status NatsSource::FetchInto(int batch, bool no_wait, absl::Duration expires) {
  jsFetchRequest req;
  jsFetchRequest_Init(&req);
  req.Batch = batch;
  req.NoWait = no_wait;
  req.Expires = absl::ToInt64Nanoseconds(expires);
  natsMsgList list{};
  const natsStatus s = natsSubscription_FetchRequest(&list, sub_.get(), &req);
  for (int i = 0; i < list.Count; ++i) {
    ready_.push_back(Own(list.Msgs[i]));
    list.Msgs[i] = nullptr;
  }
  natsMsgList_Destroy(&list);
  if (s == NATS_OK || s == NATS_TIMEOUT || s == NATS_NOT_FOUND) return absl::OkStatus();
  if (s == NATS_CONNECTION_CLOSED) {
    return absl::InternalError(absl::StrCat("NATS connection to ", conn_->where(), " closed"));
  }
  return absl::UnavailableError(LastError(s));
}

absl::Status NatsSource::Fetch(absl::Duration timeout) {
  absl::Status s = FetchInto(options_.prefetch, /*no_wait=*/true, kNoWaitExpiry);
  if (s.ok() && ready_.empty() && timeout >= absl::Milliseconds(1)) {
    s = FetchInto(1, /*no_wait=*/false, timeout);
  }
  if (absl::IsUnavailable(s)) {
    // Deleted under us, or the server lost it: bound again (created anew if gone).
    spdlog::warn("JetStream consumer {} at {}: {} (binding it again)", options_.durable,
                 conn_->where(), s.message());
    NakHeld();
    sub_.reset();
    bind_at_ = absl::Now() + kBindRetry;
    return absl::OkStatus();
  }
  return s;
}

absl::StatusOr<std::optional<Received>> NatsSource::Next(absl::Duration timeout) {
  if (sub_ == nullptr) {
    OUTBOXD_RETURN_IF_ERROR(BindWhenDue());
    if (sub_ == nullptr) {
      absl::SleepFor(std::min(timeout, std::max(bind_at_ - absl::Now(), absl::ZeroDuration())));
      return std::nullopt;
    }
  }
  if (nak_late_) {
    nak_late_ = false;
    int pending = 0;
    int bytes = 0;
    natsSubscription_GetPending(sub_.get(), &pending, &bytes);
    if (pending > 0) OUTBOXD_RETURN_IF_ERROR(FetchInto(pending, /*no_wait=*/true, kNoWaitExpiry));
    NakHeld();
  }
  if (ready_.empty()) OUTBOXD_RETURN_IF_ERROR(Fetch(timeout));
  if (ready_.empty()) return std::nullopt;
  current_ = std::move(ready_.front());
  ready_.pop_front();
  return ToReceived(current_.get(), ++current_tag_);
}

absl::Status NatsSource::Settle(const Received& r) {
  if (current_ == nullptr || r.delivery_tag != current_tag_) {
    return absl::FailedPreconditionError("ack not sent: the message is no longer held");
  }
  jsErrCode code = static_cast<jsErrCode>(0);
  const natsStatus s = natsMsg_AckSync(current_.get(), nullptr, &code);
  current_.reset();
  if (s != NATS_OK) return absl::UnavailableError(absl::StrCat("ack failed: ", LastError(s)));
  return absl::OkStatus();
}

void NatsSource::Redeliver(const Received& r) {
  if (current_ == nullptr || r.delivery_tag != current_tag_) return;
  NakHeld();
  nak_late_ = true;
}

void NatsSource::NakHeld() {
  if (current_ != nullptr) natsMsg_Nak(current_.get(), nullptr);
  current_.reset();
  for (MessagePtr& m : ready_) natsMsg_Nak(m.get(), nullptr);
  ready_.clear();
}

// Held messages go back at once (nak'd) rather than after the ack wait; the durable
// consumer stays on the server for the next start.
void NatsSource::Close() {
  if (conn_ == nullptr) return;
  NakHeld();
  if (sub_ != nullptr) natsConnection_FlushTimeout(conn_->get(), 1000);  // the naks out
  sub_.reset();
  js_.reset();
  conn_.reset();
}

Received NatsSource::ToReceived(natsMsg* msg, uint64_t tag) const {
  Received r{.delivery_tag = tag};
  Message& m = r.message;
  m.topic = natsMsg_GetSubject(msg);
  m.value.assign(natsMsg_GetData(msg), natsMsg_GetDataLength(msg));
  CopyHeaders(msg, m);
  jsMsgMetaData* meta = nullptr;
  if (natsMsg_GetMetaData(&meta, msg) == NATS_OK) {
    m.offset = static_cast<int64_t>(meta->Sequence.Stream);
    jsMsgMetaData_Destroy(meta);
  }
  // outboxd's messages carry the aggregate in a header (Kafka: the key) and the event
  // id as Nats-Msg-Id too; an `id` header wins, as with Kafka and RabbitMQ.
  m.key = std::string(m.Header("aggregate_id").value_or(""));
  m.id = std::string(m.Header(options_.id_header).value_or(m.Header("Nats-Msg-Id").value_or("")));
  return r;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Source>> MakeNatsSource(const ConsumerOptions& options) {
  if (options.topics.size() != 1) {
    return absl::InvalidArgumentError(
        "a NATS inbox consumer takes one subject (--topic; wildcards allowed, e.g. 'pedido.>'): "
        "a JetStream consumer filters on one subject");
  }
  auto source = std::make_unique<NatsSource>(options);
  // At once, so that a wrong URL or password fails the start, not a later poll.
  if (absl::Status s = source->Connect(); !s.ok()) return s;
  return source;
}

}  // namespace outboxd::inbox::internal
