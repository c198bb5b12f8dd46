// The RabbitMQ source over rabbitmq-c, on amqp::Connection (amqp/connection.h): one
// connection, channel 1, basic.qos bounding the unacked messages, basic.consume with
// manual acks. Settle() is basic.ack, sent only after the inbox transaction
// committed; a crash before it leaves the message unacked, so the broker delivers it
// again and the inbox skips it. Redeliver() is basic.nack with requeue, then the
// connection is dropped: the messages prefetched behind the failed one go back too,
// to their places, so after the backoff they come again in queue order (nacking the
// one alone would let its successors overtake it). A lost connection is reopened by
// the next Next(); what was unacked comes again.
#include <amqp.h>
#include <amqp_framing.h>
#include <sys/time.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "amqp/connection.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "inbox/consumer.h"
#include "inbox/internal/source.h"

namespace outboxd::inbox::internal {
namespace {

using amqp::kChannel;
using amqp::View;
// Heartbeats are answered only inside Next(): a handler slower than half of this
// would lose the connection (and the message would come again, a duplicate).
constexpr absl::Duration kHeartbeat = absl::Seconds(60);

// A string-valued header table entry's value, or nullopt.
std::optional<std::string> HeaderText(const amqp_field_value_t& v) {
  if (v.kind == AMQP_FIELD_KIND_UTF8 || v.kind == AMQP_FIELD_KIND_BYTES) {
    return std::string(View(v.value.bytes));
  }
  return std::nullopt;
}

class AmqpSource final : public Source {
 public:
  explicit AmqpSource(const ConsumerOptions& options) : options_(options) {
    if (options_.queue.empty()) options_.queue = options_.group_id;
  }
  ~AmqpSource() override { Close(); }

  // Connects, declares the relay's exchange (durable topic, as `outboxd run` does),
  // the durable queue and one binding per topic, and starts consuming.
  absl::Status Connect();

  absl::StatusOr<std::optional<Received>> Next(absl::Duration timeout) override;

  absl::Status Settle(const Received& r) override {
    if (conn_ == nullptr) return absl::UnavailableError("ack not sent: the connection was lost");
    if (int rc = amqp_basic_ack(conn_->get(), kChannel, r.delivery_tag, /*multiple=*/0); rc != 0) {
      Drop();
      return absl::UnavailableError(absl::StrCat("basic.ack failed: ", amqp_error_string2(rc)));
    }
    return absl::OkStatus();
  }

  void Redeliver(const Received& r) override {
    if (conn_ == nullptr) return;  // unacked already went back with the connection
    amqp_basic_nack(conn_->get(), kChannel, r.delivery_tag, /*multiple=*/0, /*requeue=*/1);
    Close();
  }

  void Close() override {
    if (conn_ == nullptr) return;
    conn_->Close();
    conn_.reset();
  }

  std::string Where(const Message& m) const override {
    return absl::StrCat("queue ", options_.queue, ", delivery ", m.offset, " (routing key ",
                        m.topic, ")");
  }
  std::string SkipAdvice() const override {
    return "it is not acked. Fix the producer, then take it off the queue (e.g. shovel or "
           "purge it) if it must be skipped";
  }

 private:
  absl::Status SetUp();
  Received ToReceived(const amqp_envelope_t& envelope) const;
  // Forgets a broken connection without a close handshake.
  void Drop() { conn_.reset(); }

  ConsumerOptions options_;
  std::unique_ptr<amqp::Connection> conn_;
  absl::Time retry_at_ = absl::InfinitePast();  // after a failed connect
};

// The relay's exchange (durable topic, as `outboxd run` declares it), the durable
// queue and one binding per topic, then the consumer.
absl::Status AmqpSource::SetUp() {
  OUTBOXD_RETURN_IF_ERROR(conn_->DeclareExchange(options_.exchange, amqp::ExchangeMode::kDeclare));
  OUTBOXD_RETURN_IF_ERROR(
      conn_->DeclareBoundQueue(options_.exchange, options_.queue, options_.topics));
  return conn_->Consume(options_.queue, options_.prefetch);
}

absl::Status AmqpSource::Connect() {
  OUTBOXD_ASSIGN_OR_RETURN(conn_, amqp::Connection::Open({.url = options_.amqp_url,
                                                          .heartbeat = kHeartbeat,
                                                          .connection_name = "outboxd inbox"}));
  absl::Status s = SetUp();
  if (!s.ok()) Drop();
  return s;
}

Received AmqpSource::ToReceived(const amqp_envelope_t& e) const {
  Received r{.delivery_tag = e.delivery_tag};
  Message& m = r.message;
  m.topic = std::string(View(e.routing_key));
  m.offset = static_cast<int64_t>(e.delivery_tag);
  m.value = std::string(View(e.message.body));
  const amqp_basic_properties_t& p = e.message.properties;
  if (p._flags & AMQP_BASIC_HEADERS_FLAG) {
    for (int i = 0; i < p.headers.num_entries; ++i) {
      const amqp_table_entry_t& h = p.headers.entries[i];
      if (std::optional<std::string> text = HeaderText(h.value)) {
        m.headers.emplace_back(std::string(View(h.key)), std::move(*text));
      }
    }
  }
  // outboxd's messages carry the aggregate in a header (Kafka: the key) and the
  // event id as message_id; an `id` header (--header) wins, as with Kafka.
  m.key = std::string(m.Header("aggregate_id").value_or(""));
  std::optional<std::string_view> id = m.Header(options_.id_header);
  if (id) {
    m.id = std::string(*id);
  } else if (p._flags & AMQP_BASIC_MESSAGE_ID_FLAG) {
    m.id = std::string(View(p.message_id));
  }
  return r;
}

absl::StatusOr<std::optional<Received>> AmqpSource::Next(absl::Duration timeout) {
  if (conn_ == nullptr) {
    const absl::Time now = absl::Now();
    if (now < retry_at_) {
      absl::SleepFor(std::min(retry_at_ - now, timeout));
      return std::nullopt;
    }
    if (absl::Status s = Connect(); !s.ok()) {
      if (absl::IsInvalidArgument(s)) return s;
      spdlog::warn("RabbitMQ consumer: {} (retrying in 1s)", s.message());
      retry_at_ = absl::Now() + absl::Seconds(1);
      return std::nullopt;
    }
  }
  amqp_maybe_release_buffers(conn_->get());
  timeval tv = absl::ToTimeval(std::max(timeout, absl::ZeroDuration()));
  amqp_envelope_t envelope;
  amqp_rpc_reply_t reply = amqp_consume_message(conn_->get(), &envelope, &tv, 0);
  if (reply.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION &&
      reply.library_error == AMQP_STATUS_TIMEOUT) {
    return std::nullopt;
  }
  if (absl::Status s = amqp::ReplyStatus(reply, "RabbitMQ consumer"); !s.ok()) {
    // The broker requeues what we had not acked; the next call reconnects.
    spdlog::warn("{} (reconnecting)", s.message());
    Drop();
    return std::nullopt;
  }
  Received r = ToReceived(envelope);
  amqp_destroy_envelope(&envelope);
  return r;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Source>> MakeAmqpSource(const ConsumerOptions& options) {
  auto source = std::make_unique<AmqpSource>(options);
  // At once, so that a wrong URL, vhost or password fails the start, not a later poll.
  if (absl::Status s = source->Connect(); !s.ok()) return s;
  return source;
}

}  // namespace outboxd::inbox::internal
