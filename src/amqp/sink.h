// The RabbitMQ sink: sink::Sink (sink/sink.h) over amqp::Publisher, so that the CDC
// relay, the polling relay and dead-letter replay publish to RabbitMQ with the same
// guarantees as to Kafka.
//
//   relay ──Produce──▶ entries (produce order) ──publish──▶ Publisher ──▶ exchange
//         ◀─reports─── ack: OK · return: NotFound · refused: InvalidArgument
//                      lost connection / nack: published again, in order, later
//
// Every message stays in `entries` until it is reported, so the sink itself can
// publish it again. A connection or channel loss completes what was unconfirmed as
// "lost": those messages go back to the waiting list, the sink reconnects with a
// capped backoff and publishes the waiting list again in produce order before
// anything newer, so per-key order holds and the relay sees only delayed reports.
// What the broker took but never confirmed arrives twice (counted in republished()).
// A basic.nack is published again the same way after a backoff. A message no queue
// is bound for (basic.return) or the broker refuses (over max_message_size) is
// reported failed, which the relay dead-letters.
//
// Per-key order past those is sink::KeyOrder's rule (sink/key_order.h): at most one
// message per key is at the broker at a time; the key's later messages wait in the
// sink until it is confirmed. So a nacked message is never overtaken, and when one
// fails, its key's later messages (none published) are reported failed right behind
// it ("follows an earlier message of its key that failed: ..."): the relay
// dead-letters them in order, and a replay delivers them in order.
//
// A broker under a memory or disk alarm blocks the connection (connection.blocked):
// Produce() then answers ResourceExhausted, so the relay stops reading and keeps
// serving Poll() and its feedback, until connection.unblocked.
//
// wake_fd() is an epoll descriptor over the connection's socket and a timer armed
// for the sink's next deadline (a reconnect, a retry, a delivery timeout): one stable
// descriptor, whatever connection is current.
//
//   OUTBOXD_ASSIGN_OR_RETURN(std::unique_ptr<sink::Sink> out,
//       sink::FactoryOf(&amqp::NewSink, amqp::SinkOptions{.publisher = {.url = url, .exchange =
//       "outboxd"}})(
//           {.on_delivery = [&](const sink::DeliveryReport& r) { tracker.Ack(r.tag); }}));
//   OUTBOXD_RETURN_IF_ERROR(out->Produce({.topic = "order.confirmed", .key = "77",
//                                         .value = "{...}", .headers = hdrs, .tag = 1}));
//   out->Poll(100);
#ifndef OUTBOXD_AMQP_SINK_H_
#define OUTBOXD_AMQP_SINK_H_

#include <cstdint>
#include <memory>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "amqp/publisher.h"
#include "sink/confirming_sink.h"
#include "sink/sink.h"

namespace outboxd::amqp {

struct SinkOptions {
  PublisherOptions publisher;
  // Waits between reconnect attempts after a loss: doubling from base up to cap
  // (the first attempt comes at once). A RabbitMQ node restarts in 5-15 s, so the
  // cap keeps the gap after it comes back short.
  absl::Duration reconnect_base = absl::Milliseconds(100);
  absl::Duration reconnect_cap = absl::Seconds(2);
  // Waits before publishing a nacked message again: doubling from base up to cap.
  absl::Duration nack_base = absl::Milliseconds(50);
  absl::Duration nack_cap = absl::Seconds(2);
  // For this long after a reconnect, a message returned as unroutable is published
  // again (with the nack backoff) rather than reported failed: a node restarted after
  // a crash accepts connections while its durable queues are still recovering, and
  // routes nothing to a queue that is not up yet. Seen in the suite: a RabbitMQ kill -9
  // under load, the relay back within 13 s, every message it sent returned for seconds.
  // A return on the first connection, or later than this, is a missing binding.
  absl::Duration unroutable_grace = absl::Seconds(30);
};

// The sink's own counts, for tests and the log.
struct SinkCounters {
  uint64_t reconnects = 0;   // successful reconnects after a loss
  uint64_t republished = 0;  // messages published again after a loss (may be duplicates)
  uint64_t nacked = 0;       // basic.nack received (each published again)
  uint64_t returned_again = 0;  // returns within unroutable_grace (each published again)
};

// NewSink makes the sink (its Impl in sink.cc) over sink::BrokerSink and ConfirmingSink
// (sink/confirming_sink.h), which holds the entries, reports them and answers Poll,
// Flush, Health, InFlight, InFlightBytes, wake_fd and Close. Produce() answers
// ResourceExhausted while the broker blocks the connection; InvalidArgument for a
// message AMQP cannot carry (e.g. a routing key over 255 bytes); Aborted after
// RaiseFatalErrorForTesting. Otherwise OK, connected or not: the message waits.
using Sink = sink::BrokerSink<SinkCounters>;

// Connects at once: InvalidArgument (URL), Unauthenticated, PermissionDenied,
// NotFound (passive exchange missing) and FailedPrecondition (an exchange of another
// type) end here, naming the redacted URL; an unreachable broker does not (the sink
// starts disconnected and keeps trying, as a Kafka producer would).
absl::StatusOr<std::unique_ptr<Sink>> NewSink(const SinkOptions& options,
                                              const sink::SinkSettings& settings);

}  // namespace outboxd::amqp

#endif  // OUTBOXD_AMQP_SINK_H_
