#include "chaos/amqp_reader.h"

#include <amqp.h>
#include <amqp_framing.h>
#include <sys/time.h>

#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "amqp/connection.h"

namespace outboxd::chaos {
namespace {

using amqp::kChannel;
using amqp::View;
// Enough in flight to keep up with the relays; small enough that a cut connection
// redelivers little.
constexpr uint16_t kPrefetch = 500;

// A connection with channel 1 open. Heartbeats every 10 s: rabbitmq-c answers them
// inside amqp_consume_message, which the reader calls every 100 ms.
absl::StatusOr<std::unique_ptr<amqp::Connection>> Connect(const std::string& url) {
  return amqp::Connection::Open({.url = url,
                                 .connect_timeout = absl::Seconds(2),
                                 .heartbeat = absl::Seconds(10),
                                 .connection_name = "outboxd-chaos reader"});
}

// A string-valued header as the relay writes it (longstr), or "".
std::string Header(const amqp_basic_properties_t& p, absl::string_view name) {
  if ((p._flags & AMQP_BASIC_HEADERS_FLAG) == 0) return "";
  for (int i = 0; i < p.headers.num_entries; ++i) {
    const amqp_table_entry_t& e = p.headers.entries[i];
    if (View(e.key) == name &&
        (e.value.kind == AMQP_FIELD_KIND_UTF8 || e.value.kind == AMQP_FIELD_KIND_BYTES)) {
      return std::string(View(e.value.value.bytes));
    }
  }
  return "";
}

}  // namespace

absl::StatusOr<std::unique_ptr<AmqpReader>> AmqpReader::Start(const std::string& url,
                                                              const std::string& exchange,
                                                              const std::string& queue,
                                                              const std::string& binding_key) {
  absl::StatusOr<std::unique_ptr<amqp::Connection>> conn = Connect(url);
  if (!conn.ok()) return conn.status();
  const std::string keys[] = {binding_key};
  absl::Status s = (*conn)->DeclareExchange(exchange, amqp::ExchangeMode::kDeclare);
  if (s.ok()) s = (*conn)->DeclareBoundQueue(exchange, queue, keys);
  if (!s.ok()) return s;
  (*conn)->Close();
  std::unique_ptr<AmqpReader> reader(new AmqpReader(url, queue));
  reader->thread_ = std::thread([r = reader.get()] { r->Run(); });
  return reader;
}

AmqpReader::~AmqpReader() { StopAndTake(); }

std::vector<Delivery> AmqpReader::StopAndTake() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  return TakeRecorded();
}

bool AmqpReader::WaitCaughtUp(absl::Duration timeout) const {
  const absl::Time deadline = absl::Now() + timeout;
  int64_t quiet_at_count = -1;  // Count() when the queue was last seen empty
  while (absl::Now() < deadline) {
    absl::SleepFor(absl::Seconds(1));
    absl::StatusOr<std::unique_ptr<amqp::Connection>> conn = Connect(url_);
    if (!conn.ok()) continue;
    amqp_queue_declare_ok_t* ok =
        amqp_queue_declare((*conn)->get(), kChannel, amqp_cstring_bytes(queue_.c_str()),
                           /*passive=*/1, 0, 0, 0, amqp_empty_table);
    const bool empty = ok != nullptr && ok->message_count == 0;
    (*conn)->Close();
    const int64_t count = static_cast<int64_t>(Count());
    if (empty && count == quiet_at_count) return true;
    quiet_at_count = empty ? count : -1;
  }
  return false;
}

void AmqpReader::Run() {
  while (!stop_) {
    absl::Status s = ConsumeOnce();
    if (stop_) break;
    // The node is restarting or closed us: come back soon, as a consumer would.
    ++reconnects_;
    absl::SleepFor(absl::Milliseconds(200));
  }
}

absl::Status AmqpReader::ConsumeOnce() {
  absl::StatusOr<std::unique_ptr<amqp::Connection>> conn = Connect(url_);
  if (!conn.ok()) return conn.status();
  if (absl::Status s = (*conn)->Consume(queue_, kPrefetch); !s.ok()) return s;
  amqp_connection_state_t c = (*conn)->get();
  while (!stop_) {
    amqp_maybe_release_buffers(c);
    amqp_envelope_t envelope;
    timeval timeout{.tv_sec = 0, .tv_usec = 100'000};
    amqp_rpc_reply_t reply = amqp_consume_message(c, &envelope, &timeout, 0);
    if (reply.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION &&
        reply.library_error == AMQP_STATUS_TIMEOUT) {
      continue;
    }
    // Anything else (a closed socket, connection.close, channel.close) ends this
    // connection; the unacked messages go back to the queue, in their place.
    if (absl::Status s = amqp::ReplyStatus(reply, "consume"); !s.ok()) return s;
    const amqp_basic_properties_t& p = envelope.message.properties;
    Delivery d{.partition = 0,
               .id = (p._flags & AMQP_BASIC_MESSAGE_ID_FLAG) ? std::string(View(p.message_id)) : "",
               .aggregate = Header(p, "aggregate_id"),
               .lsn = Header(p, "lsn")};
    const uint64_t tag = envelope.delivery_tag;
    amqp_destroy_envelope(&envelope);
    d.offset = read_++;
    std::vector<Delivery> one{std::move(d)};
    Record(one);
    // Acked only once recorded: a cut before this line redelivers it (a duplicate).
    if (amqp_basic_ack(c, kChannel, tag, /*multiple=*/0) != AMQP_STATUS_OK) {
      return absl::UnavailableError("basic.ack failed");
    }
  }
  (*conn)->Close();
  return absl::OkStatus();
}

}  // namespace outboxd::chaos
