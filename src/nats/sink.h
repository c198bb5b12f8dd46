// The NATS JetStream sink: sink::Sink (sink/sink.h) over libnats' asynchronous
// JetStream publish, so that the relays publish to a JetStream stream with the same
// guarantees as to Kafka and RabbitMQ.
//
//   relay ──Produce──▶ entries (produce order) ──js_PublishMsgAsync──▶ stream
//         ◀─reports─── PubAck (or duplicate): OK
//                      no responders, no stream takes the subject: NotFound
//                      other stream: NotFound
//                      stream full (discard new): FailedPrecondition
//                      over max_payload or the stream's max_msg_size: InvalidArgument
//                      no ack within ack_wait, lost connection, other server errors,
//                      no responders while the sink's stream takes the subject (a
//                      clustered stream electing a new leader):
//                      published again (same Nats-Msg-Id), later, in order
//
// Each message is published to the relay's topic as its subject, with the relay's
// headers (id, type, aggregate_id, created_at, lsn, content-type, --header ones) and
// `Nats-Msg-Id` = the outbox id, expecting the configured stream: JetStream drops a
// repeat of an id within the stream's duplicate window, so a message published again
// after a lost ack (or by a relay restarted from its confirmed position) is stored
// once. Past the window a repeat is stored twice: the window must outlast a relay's
// restart (the default below, 2 minutes, is JetStream's own).
//
// Confirmed only on the PubAck: libnats calls the ack handler on its own thread, which
// only queues the outcome and wakes wake_fd(); Poll() reports on the caller's thread.
// Per-key order: at most one message per key is at the server at a time
// (sink::KeyOrder, sink/key_order.h); when one fails, its key's later messages are reported
// failed right behind it. At most `max_pending` messages are at the server at once.
// The price is a PubAck round trip per message of one key: one hot aggregate went at
// ~800 events/s here (3,000 events in 3.7-3.8 s), 100 to 1,000 keys at 42,000-65,000.
//
// Credentials (a creds file, a user and password, or ones inside the URL) are never
// logged: messages name the URL without its user information.
//
//   OUTBOXD_ASSIGN_OR_RETURN(std::unique_ptr<sink::Sink> out,
//       sink::FactoryOf(&nats::NewSink, nats::SinkOptions{.url = "nats://127.0.0.1:4222",
//                            .stream = {.name = "OUTBOXD", .subjects = {"order.>"}}})(
//           {.on_delivery = [&](const sink::DeliveryReport& r) { tracker.Ack(r.tag); }}));
//   OUTBOXD_RETURN_IF_ERROR(out->Produce({.topic = "order.confirmed", .key = "77",
//                                         .value = "{...}", .headers = hdrs, .tag = 1}));
//   out->Poll(100);
#ifndef OUTBOXD_NATS_SINK_H_
#define OUTBOXD_NATS_SINK_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "nats/connection.h"  // RedactedUrl, for the callers' messages
#include "sink/confirming_sink.h"
#include "sink/sink.h"

namespace outboxd::nats {

enum class Declare {
  kCreateIfMissing,  // create the stream when it does not exist (run, poll)
  kPassive,          // only check that it exists (--no-declare)
};

struct StreamOptions {
  std::string name = "OUTBOXD";
  // What a created stream takes (e.g. "order.>"); an existing stream is left as it is.
  std::vector<std::string> subjects;
  Declare declare = Declare::kCreateIfMissing;
  // The fix a missing stream's error names when it is not created, in the caller's
  // terms (its flags: `outboxd run --no-declare` and `dead-letter replay` differ);
  // empty: "create it".
  std::string fix_if_missing;
  // A created stream's duplicate window (JetStream's default).
  absl::Duration duplicate_window = absl::Minutes(2);
};

struct SinkOptions {
  // nats://host:port, several comma-separated; user:password@ allowed (never logged).
  std::string url;
  std::string creds_file;  // a NATS .creds file (JWT and NKey seed), or empty
  std::string user;        // with password, or empty
  std::string password;
  StreamOptions stream;
  // Messages published and not yet acknowledged, at most; the rest wait in the sink.
  // Measured with 40,000 events over 1,000 or 5,000 keys, two runs each, on a shared
  // 2-core machine: 64 gave 17,500-22,300 events/s, 256 23,700-43,400, 1,024
  // 33,100-50,700, 4,096 31,400-58,000. Past 1,024 the noise is larger than the gain,
  // and libnats holds a copy of each pending message.
  int max_pending = 1024;
  // No PubAck within this: the message is published again (the server may have it:
  // the duplicate window drops the repeat). libnats' own default wait; a restarted
  // server (scripts/nats) answers again within 0.2-0.5 s, so a lost ack costs at most
  // this, while a shorter wait would republish what a busy server only delays.
  absl::Duration ack_wait = absl::Seconds(5);
  // Waits before publishing again after a transient refusal: doubling base to cap.
  absl::Duration retry_base = absl::Milliseconds(50);
  absl::Duration retry_cap = absl::Seconds(2);
};

// The sink's own counts, for tests and the log.
struct SinkCounters {
  uint64_t published = 0;    // js_PublishMsgAsync calls that took a message
  uint64_t republished = 0;  // of those, a message published again (ack lost, refused)
  uint64_t duplicates = 0;   // PubAcks saying the stream had the id already
};

// NewSink makes the sink (its Impl in sink.cc, so that libnats stays out of this header)
// over sink::BrokerSink and ConfirmingSink (sink/confirming_sink.h), which holds the entries,
// reports them and answers Poll, Flush, Health, InFlight, InFlightBytes, wake_fd and Close.
// Produce() answers InvalidArgument for a message NATS cannot carry (a subject with
// spaces or wildcards, a header with a line break); Aborted once the connection is
// closed for good. Otherwise OK, connected or not: the message waits.
using Sink = sink::BrokerSink<SinkCounters>;

// Connects and checks (or creates) the stream at once: InvalidArgument (URL, stream
// options), Unauthenticated, NotFound (a passive stream missing) end here, naming
// the redacted URL. An unreachable server does not: the sink starts disconnected,
// libnats keeps reconnecting, and the stream is checked once it is reached.
absl::StatusOr<std::unique_ptr<Sink>> NewSink(const SinkOptions& options,
                                              const sink::SinkSettings& settings);

}  // namespace outboxd::nats

#endif  // OUTBOXD_NATS_SINK_H_
