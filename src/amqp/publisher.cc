// Publisher over rabbitmq-c 0.11: the connection set-up (URL, TLS, login with the
// connection.blocked capability, channel, confirm.select, exchange.declare), the
// publish, and one handler per broker method that can arrive on a publishing
// channel (basic.ack, basic.nack, basic.return, connection.blocked/unblocked,
// channel.close, connection.close).
#include "amqp/publisher.h"

#include <amqp.h>
#include <amqp_framing.h>
#include <amqp_ssl_socket.h>
#include <amqp_tcp_socket.h>
#include <sys/time.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace outboxd::amqp {
namespace {

// AMQP reply codes (the AMQP 0-9-1 specification, "Constants").
constexpr int kNoRoute = 312;
constexpr int kPreconditionFailed = 406;
// Frames handled per Poll() after the first, so one Poll() cannot run for ever while
// the broker keeps sending.
constexpr int kMaxFramesPerPoll = 10000;

timeval AsTimeval(absl::Duration d) {
  if (d < absl::ZeroDuration()) d = absl::ZeroDuration();
  return absl::ToTimeval(d);
}

// "message size 2000000 is larger than configured max size 1048576" (rabbit_channel's
// check_msg_size) -> 2000000.
std::optional<uint64_t> OversizedBodySize(absl::string_view reply_text) {
  constexpr absl::string_view kPrefix = "message size ";
  size_t at = reply_text.find(kPrefix);
  if (at == absl::string_view::npos) return std::nullopt;
  absl::string_view rest = reply_text.substr(at + kPrefix.size());
  rest = rest.substr(0, rest.find(' '));
  uint64_t size = 0;
  if (!absl::SimpleAtoi(rest, &size)) return std::nullopt;
  return size;
}

// A message rabbitmq-c could only half send: it writes the basic.publish frame before
// it encodes the properties, so a property that does not encode would leave the
// connection unusable. AMQP short strings (routing key, message id, type, content
// type, header names) hold 255 bytes; the properties must fit in one frame.
absl::Status CheckSendable(const OutgoingMessage& m) {
  constexpr size_t kShortString = 255;
  const MessageProperties& p = m.properties;
  for (absl::string_view field :
       {absl::string_view(m.routing_key.data(), m.routing_key.size()),
        absl::string_view(p.message_id.data(), p.message_id.size()),
        absl::string_view(p.type.data(), p.type.size()),
        absl::string_view(p.content_type.data(), p.content_type.size())}) {
    if (field.size() > kShortString) {
      return absl::InvalidArgumentError(absl::StrCat(
          "an AMQP routing key, message id, type or content type holds at most 255 bytes, not ",
          field.size()));
    }
  }
  // Our encoding of the properties: 3 short strings, the timestamp, delivery mode, and
  // per header a name, a type byte and a 4-byte length; a margin for the frame header.
  size_t size = 3 * (kShortString + 1) + 8 + 1 + 4 + 64;
  for (const Header& h : m.headers) {
    if (h.name.size() > kShortString) {
      return absl::InvalidArgumentError(absl::StrCat(
          "an AMQP header name holds at most 255 bytes: ", absl::string_view(h.name.data(), 40),
          "..."));
    }
    size += 1 + h.name.size() + 1 + 4 + h.value.size();
  }
  if (size > AMQP_DEFAULT_FRAME_SIZE) {
    return absl::InvalidArgumentError(absl::StrCat("the message's headers take ", size,
                                                   " bytes; AMQP properties must fit in one ",
                                                   AMQP_DEFAULT_FRAME_SIZE, "-byte frame"));
  }
  return absl::OkStatus();
}

}  // namespace

struct Publisher::Impl {
  // A published message until its confirm; what a basic.return or a channel.close
  // needs to find it.
  struct Pending {
    uint64_t tag = 0;
    std::string routing_key;
    std::string message_id;
    uint64_t body_size = 0;
    std::string returned;  // basic.return's reason; it completes at its basic.ack
  };

  PublisherOptions options;
  CompletionHandler on_completion;
  std::string where;  // the redacted URL, for errors
  std::unique_ptr<Connection> conn;
  uint64_t next_delivery_tag = 1;
  std::map<uint64_t, Pending> pending;  // by delivery tag
  uint64_t pending_bytes = 0;
  uint64_t last_returned = 0;  // returns arrive in publish order: search after this tag
  absl::Status health = absl::UnavailableError("not connected");
  bool blocked = false;
  std::string blocked_reason;
  std::vector<amqp_table_entry_t> header_entries;  // reused by Produce

  absl::Status Open();
  absl::Status SetUpChannel();
  absl::Status Produce(const OutgoingMessage& message);
  int Poll(absl::Duration timeout);
  int HandleFrame(const amqp_frame_t& frame);
  int Confirm(uint64_t delivery_tag, bool multiple, Outcome outcome);
  int HandleReturn(const amqp_basic_return_t& m);
  int HandleChannelClose(const amqp_channel_close_t& m);
  int HandleConnectionClose(const amqp_connection_close_t& m);
  int Lose(absl::Status why);
  void Deliver(Pending& p, Outcome outcome, std::string_view reason);
};

absl::Status Publisher::Impl::SetUpChannel() {
  amqp_confirm_select(conn->get(), kChannel);
  OUTBOXD_RETURN_IF_ERROR(conn->LastReply("confirm.select"));
  return conn->DeclareExchange(options.exchange, options.exchange_mode);
}

absl::Status Publisher::Impl::Open() {
  next_delivery_tag = 1;
  last_returned = 0;
  blocked = false;
  blocked_reason.clear();
  absl::StatusOr<std::unique_ptr<Connection>> opened =
      Connection::Open({.url = options.url,
                        .tls = options.tls,
                        .connect_timeout = options.connect_timeout,
                        .heartbeat = options.heartbeat,
                        .connection_name = options.connection_name});
  absl::Status s = opened.status();
  if (s.ok()) {
    conn = *std::move(opened);
    s = SetUpChannel();
  }
  if (!s.ok()) {
    conn.reset();
    health = absl::UnavailableError(s.message());
    return s;
  }
  health = absl::OkStatus();
  return s;
}

absl::Status Publisher::Impl::Produce(const OutgoingMessage& message) {
  if (conn == nullptr) {
    return absl::UnavailableError(absl::StrCat(health.message(), "; Reconnect() first"));
  }
  if (blocked) {
    return absl::ResourceExhaustedError(absl::StrCat("the broker blocked the connection (",
                                                     blocked_reason, "); wait for it to clear"));
  }
  OUTBOXD_RETURN_IF_ERROR(CheckSendable(message));
  amqp_basic_properties_t props{};
  props._flags = AMQP_BASIC_DELIVERY_MODE_FLAG;
  props.delivery_mode = 2;  // persistent
  const MessageProperties& p = message.properties;
  if (!p.message_id.empty()) {
    props._flags |= AMQP_BASIC_MESSAGE_ID_FLAG;
    props.message_id = Bytes(p.message_id);
  }
  if (!p.type.empty()) {
    props._flags |= AMQP_BASIC_TYPE_FLAG;
    props.type = Bytes(p.type);
  }
  if (!p.content_type.empty()) {
    props._flags |= AMQP_BASIC_CONTENT_TYPE_FLAG;
    props.content_type = Bytes(p.content_type);
  }
  if (p.timestamp.has_value()) {
    props._flags |= AMQP_BASIC_TIMESTAMP_FLAG;
    props.timestamp = static_cast<uint64_t>(absl::ToUnixSeconds(*p.timestamp));
  }
  if (!message.headers.empty()) {
    header_entries.clear();
    for (const Header& h : message.headers) {
      header_entries.push_back(
          {.key = Bytes(h.name),
           .value = {.kind = AMQP_FIELD_KIND_UTF8, .value = {.bytes = Bytes(h.value)}}});
    }
    props._flags |= AMQP_BASIC_HEADERS_FLAG;
    props.headers = {.num_entries = static_cast<int>(header_entries.size()),
                     .entries = header_entries.data()};
  }
  int rc =
      amqp_basic_publish(conn->get(), kChannel, Bytes(options.exchange), Bytes(message.routing_key),
                         /*mandatory=*/1, /*immediate=*/0, &props, Bytes(message.body));
  if (rc != AMQP_STATUS_OK) {
    absl::Status lost = absl::UnavailableError(
        absl::StrCat("publishing to ", where, " failed: ", amqp_error_string2(rc)));
    Lose(lost);
    return lost;
  }
  pending.emplace(next_delivery_tag++, Pending{.tag = message.tag,
                                               .routing_key = std::string(message.routing_key),
                                               .message_id = std::string(p.message_id),
                                               .body_size = message.body.size()});
  pending_bytes += message.body.size();
  return absl::OkStatus();
}

int Publisher::Impl::Poll(absl::Duration timeout) {
  int served = 0;
  timeval first = AsTimeval(timeout);
  timeval zero{0, 0};
  for (int frames = 0; conn != nullptr && frames < kMaxFramesPerPoll; ++frames) {
    amqp_frame_t frame;
    int rc = amqp_simple_wait_frame_noblock(conn->get(), &frame, frames == 0 ? &first : &zero);
    if (rc == AMQP_STATUS_TIMEOUT) break;
    if (rc != AMQP_STATUS_OK) {
      served += Lose(absl::UnavailableError(
          absl::StrCat("connection to ", where, " lost: ", amqp_error_string2(rc))));
      break;
    }
    served += HandleFrame(frame);
  }
  if (conn != nullptr) amqp_maybe_release_buffers(conn->get());
  return served;
}

int Publisher::Impl::HandleFrame(const amqp_frame_t& frame) {
  if (frame.frame_type != AMQP_FRAME_METHOD) return 0;  // heartbeats are rabbitmq-c's
  void* decoded = frame.payload.method.decoded;
  switch (frame.payload.method.id) {
    case AMQP_BASIC_ACK_METHOD: {
      auto* m = static_cast<amqp_basic_ack_t*>(decoded);
      return Confirm(m->delivery_tag, m->multiple, Outcome::kAcked);
    }
    case AMQP_BASIC_NACK_METHOD: {
      auto* m = static_cast<amqp_basic_nack_t*>(decoded);
      return Confirm(m->delivery_tag, m->multiple, Outcome::kNacked);
    }
    case AMQP_BASIC_RETURN_METHOD:
      return HandleReturn(*static_cast<amqp_basic_return_t*>(decoded));
    case AMQP_CONNECTION_BLOCKED_METHOD:
      blocked = true;
      blocked_reason = std::string(View(static_cast<amqp_connection_blocked_t*>(decoded)->reason));
      return 0;
    case AMQP_CONNECTION_UNBLOCKED_METHOD:
      blocked = false;
      blocked_reason.clear();
      return 0;
    case AMQP_CHANNEL_CLOSE_METHOD:
      return HandleChannelClose(*static_cast<amqp_channel_close_t*>(decoded));
    case AMQP_CONNECTION_CLOSE_METHOD:
      return HandleConnectionClose(*static_cast<amqp_connection_close_t*>(decoded));
    default:
      return 0;
  }
}

void Publisher::Impl::Deliver(Pending& p, Outcome outcome, std::string_view reason) {
  pending_bytes -= p.body_size;
  if (on_completion) on_completion(Completion{.tag = p.tag, .outcome = outcome, .reason = reason});
}

// basic.ack / basic.nack for one delivery tag, or with `multiple` for every tag up to
// it. Each entry leaves the map before its callback, so a callback may Produce().
int Publisher::Impl::Confirm(uint64_t delivery_tag, bool multiple, Outcome outcome) {
  int served = 0;
  while (!pending.empty()) {
    auto it = multiple ? pending.begin() : pending.find(delivery_tag);
    if (it == pending.end() || it->first > delivery_tag) break;
    auto node = pending.extract(it);
    Pending& p = node.mapped();
    if (!p.returned.empty() && outcome == Outcome::kAcked) {
      Deliver(p, Outcome::kUnroutable, p.returned);
    } else {
      Deliver(p, outcome,
              outcome == Outcome::kNacked ? "nacked: the broker refused it for now" : "");
    }
    ++served;
    if (!multiple) break;
  }
  return served;
}

// basic.return carries no delivery tag, only the message: returns come in publish
// order, so it is the first later message with this routing key and message id.
int Publisher::Impl::HandleReturn(const amqp_basic_return_t& m) {
  std::string routing_key(View(m.routing_key));
  std::string reason = m.reply_code == kNoRoute
                           ? "unroutable: no queue bound for routing key " + routing_key
                           : absl::StrCat("returned: ", m.reply_code, " ", View(m.reply_text),
                                          " for routing key ", routing_key);
  amqp_message_t message;
  amqp_rpc_reply_t read = amqp_read_message(conn->get(), kChannel, &message, 0);
  if (read.reply_type != AMQP_RESPONSE_NORMAL) {
    return Lose(absl::UnavailableError(absl::StrCat("reading a returned message from ", where, ": ",
                                                    ReplyStatus(read, "basic.return").message())));
  }
  std::string message_id;
  if (message.properties._flags & AMQP_BASIC_MESSAGE_ID_FLAG) {
    message_id = std::string(View(message.properties.message_id));
  }
  amqp_destroy_message(&message);
  for (auto it = pending.upper_bound(last_returned); it != pending.end(); ++it) {
    Pending& p = it->second;
    if (p.returned.empty() && p.routing_key == routing_key && p.message_id == message_id) {
      p.returned = std::move(reason);
      last_returned = it->first;
      break;
    }
  }
  return 0;
}

// The broker closes the channel on an error such as a message over max_message_size
// (406). The messages before it were taken but their confirms are lost with the
// channel; the broker's text names the size, which tells the refused one apart.
int Publisher::Impl::HandleChannelClose(const amqp_channel_close_t& m) {
  amqp_channel_close_ok_t ok{};
  amqp_send_method(conn->get(), kChannel, AMQP_CHANNEL_CLOSE_OK_METHOD, &ok);
  absl::string_view text = View(m.reply_text);
  int served = 0;
  std::optional<uint64_t> size;
  if (m.reply_code == kPreconditionFailed) size = OversizedBodySize(text);
  if (size.has_value()) {
    auto it = std::find_if(pending.begin(), pending.end(),
                           [&](const auto& e) { return e.second.body_size == *size; });
    if (it != pending.end()) {
      auto node = pending.extract(it);
      std::string reason = absl::StrCat("rejected by the broker: ", text);
      Deliver(node.mapped(), Outcome::kRejected, reason);
      ++served;
    }
  }
  return served + Lose(absl::UnavailableError(absl::StrCat("channel closed by the broker at ",
                                                           where, ": ", m.reply_code, " ", text)));
}

int Publisher::Impl::HandleConnectionClose(const amqp_connection_close_t& m) {
  amqp_connection_close_ok_t ok{};
  amqp_send_method(conn->get(), 0, AMQP_CONNECTION_CLOSE_OK_METHOD, &ok);
  return Lose(absl::UnavailableError(absl::StrCat("connection closed by the broker at ", where,
                                                  ": ", m.reply_code, " ", View(m.reply_text))));
}

// Ends the connection; every outstanding message completes as kConnectionLost, in
// publish order, so the caller can publish them again in that order.
int Publisher::Impl::Lose(absl::Status why) {
  conn.reset();
  health = std::move(why);
  blocked = false;
  blocked_reason.clear();
  int served = 0;
  std::string reason(health.message());
  while (!pending.empty()) {
    auto node = pending.extract(pending.begin());
    Deliver(node.mapped(), Outcome::kConnectionLost, reason);
    ++served;
  }
  return served;
}

Publisher::Publisher(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Publisher::~Publisher() { Close(); }

absl::StatusOr<std::unique_ptr<Publisher>> Publisher::Connect(const PublisherOptions& options,
                                                              CompletionHandler on_completion) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->on_completion = std::move(on_completion);
  OUTBOXD_ASSIGN_OR_RETURN(impl->where, RedactedUrl(options.url));
  OUTBOXD_RETURN_IF_ERROR(impl->Open());
  return std::unique_ptr<Publisher>(new Publisher(std::move(impl)));
}

absl::Status Publisher::Produce(const OutgoingMessage& message) { return impl_->Produce(message); }

int Publisher::Poll(absl::Duration timeout) { return impl_->Poll(timeout); }

absl::Status Publisher::Flush(absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  while (!impl_->pending.empty() && impl_->conn != nullptr) {
    absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(
          absl::StrCat(impl_->pending.size(), " messages still unconfirmed by ", impl_->where,
                       " after ", absl::FormatDuration(timeout)));
    }
    impl_->Poll(std::min(left, absl::Milliseconds(100)));
  }
  return impl_->health;
}

absl::Status Publisher::Reconnect() {
  if (impl_->conn != nullptr) impl_->Lose(absl::UnavailableError("reconnecting"));
  return impl_->Open();
}

void Publisher::Close() {
  if (impl_->conn == nullptr) return;
  // Bounded by the rpc timeout set at connect; frames for the channel are skipped.
  amqp_connection_close(impl_->conn->get(), AMQP_REPLY_SUCCESS);
  impl_->Lose(absl::UnavailableError(absl::StrCat("connection to ", impl_->where, " closed")));
}

absl::Status Publisher::Health() const { return impl_->health; }

bool Publisher::Blocked() const { return impl_->blocked; }

std::string_view Publisher::BlockedReason() const { return impl_->blocked_reason; }

int Publisher::socket_fd() const {
  return impl_->conn == nullptr ? -1 : amqp_get_sockfd(impl_->conn->get());
}

bool Publisher::HasBufferedFrames() const {
  return impl_->conn != nullptr &&
         (amqp_frames_enqueued(impl_->conn->get()) || amqp_data_in_buffer(impl_->conn->get()));
}

int Publisher::InFlight() const { return static_cast<int>(impl_->pending.size()); }

uint64_t Publisher::InFlightBytes() const { return impl_->pending_bytes; }

}  // namespace outboxd::amqp
