// Sink: where the relays hand broker messages, whatever the broker. The CDC relay,
// the polling relay and dead-letter replay depend on this interface only; each
// broker is one folder beside it with a factory that makes its sink, chosen by the
// CLI (--sink): src/kafka/ (kafka::Publisher::Factory, librdkafka) and src/amqp/
// (amqp::NewSink, RabbitMQ with publisher confirms).
//
// The contract every implementation keeps, because the relay's guarantees rest on it:
//   - Produce() enqueues; the outcome comes later, once per message, as a
//     DeliveryReport carrying the message's tag (Kafka: from librdkafka's delivery
//     report; RabbitMQ: from the publisher confirm), from Poll() or Flush() on the
//     caller's thread (never from another thread).
//   - A report with an OK status means the broker has the message durably (Kafka:
//     acks=all; AMQP: publisher confirm). Nothing else may be reported OK.
//   - Messages with the same key are delivered in the order they were produced,
//     past a failure too (a broker without a partition log keeps that with
//     sink::KeyOrder, sink/key_order.h).
//   - Health() turns non-OK (Aborted) when the sink can deliver nothing more: the
//     caller recreates it and resumes from its confirmed position.
//   - wake_fd() becomes readable when reports are waiting, so a select() loop wakes
//     for them at once.
//
//   OUTBOXD_ASSIGN_OR_RETURN(std::unique_ptr<sink::Sink> out,
//                            make_sink({.on_delivery = [&](const sink::DeliveryReport& r) {
//                              tracker.Ack(r.tag);
//                            }}));
//   OUTBOXD_RETURN_IF_ERROR(out->Produce({.topic = "pedido.confirmado", .key = "77",
//                                         .value = "{...}", .headers = hdrs, .tag = 1}));
//   out->Poll(0);
#ifndef OUTBOXD_SINK_SINK_H_
#define OUTBOXD_SINK_SINK_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace outboxd::sink {

struct Header {
  std::string_view name;
  std::string_view value;
};

struct OutgoingMessage {
  std::string_view topic;  // Kafka topic; AMQP routing key
  std::string_view key;
  std::string_view value;
  std::span<const Header> headers;
  uint64_t tag = 0;  // returned in the delivery report
};

struct DeliveryReport {
  uint64_t tag = 0;
  // OK once the broker has the message durably. Otherwise why not:
  //   Aborted          the sink can deliver nothing more (recreate it);
  //   InvalidArgument  this message can never be delivered (dead-letter it);
  //   NotFound / PermissionDenied  destination missing or forbidden;
  //   Cancelled        dropped at shutdown;
  //   Unavailable      anything else (transient).
  absl::Status status;
  int32_t partition = -1;  // where the broker has partitions, else -1
  int64_t offset = -1;
  std::string_view topic;  // valid during the DeliveryHandler call
  // For a failed delivery only (so it can be dead-lettered): the rest of the message
  // as it was produced. Views valid during the DeliveryHandler call.
  std::string_view key;
  std::string_view value;
  std::vector<Header> headers;
};

using DeliveryHandler = std::function<void(const DeliveryReport&)>;

// --dedupe: a relay resuming from its confirmed position asks, for each event of the
// window it may have sent before, whether the broker already holds it
// (relay/resume_dedupe.h owns the rule; kafka/read_back.h reads a topic back).
struct HeldQuery {
  std::string_view topic;
  // The message as this relay would send it now: its id and lsn headers and its key.
  // One at the broker is this very message only when all three match (two outbox rows
  // may share an id: a table without that key, two partitions of one), and each answers
  // one question of a window (two rows may share all three).
  std::string_view id;
  std::string_view lsn;
  std::string_view key;
  // A backfilled row (a re-created slot): sent before by the stream with its commit
  // LSN, which the backfill does not know; any lsn matches (id and key still must).
  bool any_lsn = false;
  Header mark;          // the header every message of this relay carries (outboxd_slot)
  uint64_t since = 0;   // the window's start, on the lsn header's scale
  // Milliseconds since the epoch before which the message cannot have been made (its
  // transaction's commit time less a margin for clocks; 0: unknown). A topic's first
  // question bounds that topic's read-back with it.
  int64_t not_before_ms = 0;
  // Which resumed window asks (a new number each session): a reconnect may resume from
  // the same position after this sink sent more, so what an earlier window read back
  // is no answer for a later one.
  uint64_t window = 0;
  // Messages to read back per partition, own and others' (0: the sink's default).
  int64_t max_messages = 0;
};
// A message's id and key, each length-prefixed (a key may hold any byte, a separator
// too): what a broker's holdings are looked up by (the lsn is compared after).
std::string HeldIdentity(std::string_view id, std::string_view key);
// The same, written over *out (a buffer kept between lookups).
void HeldIdentity(std::string_view id, std::string_view key, std::string* out);

struct HeldAnswer {
  bool held = false;  // that very message (HeldQuery) is at the broker: do not send it again
  // With the first answer about a topic: why some of it could not be read back
  // ({reason, one-line detail}); a duplicate is possible there, never a loss.
  std::vector<std::pair<std::string, std::string>> fallbacks;
};

class Sink {
 public:
  virtual ~Sink() = default;

  // Enqueues one message. ResourceExhausted when the local queue is full (serve
  // Poll() and retry); InvalidArgument for a message that can never be sent.
  virtual absl::Status Produce(const OutgoingMessage& message) = 0;
  // Serves delivery reports (calls on_delivery); returns how many were served.
  virtual int Poll(int timeout_ms) = 0;
  // Waits until every enqueued message is reported or the timeout passes, serving
  // reports; meanwhile whatever is buffered is sent at once.
  virtual absl::Status Flush(absl::Duration timeout) = 0;
  // Live traffic: send what is buffered for batching at once, without waiting for
  // anything (the caller goes on reading). Sinks that buffer nothing ignore it.
  virtual void SendNow() {}
  // OK while the sink can deliver; Aborted once it never will again.
  virtual absl::Status Health() const = 0;
  // Messages enqueued but not yet reported, and their key, value and header bytes
  // (what the relay's flow control bounds).
  virtual int InFlight() const = 0;
  virtual uint64_t InFlightBytes() const = 0;
  // Readable when delivery reports are waiting; drained by Poll(). A wake-up may
  // serve no report.
  virtual int wake_fd() const = 0;
  // Ends the sink within `flush_timeout` plus its own teardown: waits that long for
  // outstanding reports (serving them), then drops what is left unreported. Returns how
  // many messages it dropped; the caller resends them from its confirmed position.
  // Nothing else may be called after it.
  virtual int Close(absl::Duration flush_timeout) = 0;
  // --dedupe (see HeldQuery). Unimplemented for a broker that cannot be read back.
  virtual absl::StatusOr<HeldAnswer> Held(const HeldQuery& query) {
    (void)query;
    return absl::UnimplementedError("this broker cannot be read back");
  }
  // Test-only: make Health() fail as the broker library would on a fatal error, so
  // the relay's recovery path runs for real. Sinks without such a hook ignore it.
  virtual void RaiseFatalErrorForTesting(std::string_view reason) { (void)reason; }
};

struct SinkSettings {
  DeliveryHandler on_delivery;
  // How long the sink keeps trying one message before reporting it failed. The CDC
  // relay never gives up (an outage delays, never drops); the polling relay ends an
  // attempt so it can record the failure and retry the row later.
  absl::Duration delivery_timeout = absl::InfiniteDuration();
};

// Makes a sink for the broker chosen on the command line; the relays call it again
// after a fatal error.
using SinkFactory = std::function<absl::StatusOr<std::unique_ptr<Sink>>(const SinkSettings&)>;

// Flush() of a sink whose Poll() serves its broker's confirms (RabbitMQ, NATS): polls
// until nothing is in flight, or fails after `timeout` naming `broker` ("RabbitMQ at
// amqp://host:5672/").
absl::Status PollUntilConfirmed(Sink& sink, absl::Duration timeout, std::string_view broker);

}  // namespace outboxd::sink

#endif  // OUTBOXD_SINK_SINK_H_
