// Idempotent Kafka producer for relay traffic (enable.idempotence=true, acks=all,
// unlimited message.timeout.ms so a broker outage never turns into a dropped event).
// Delivery reports are served by Poll() on the caller's thread; wake_fd() becomes
// readable when reports are waiting, so a select() loop wakes for them at once.
// linger.ms=5 batches a backlog; SendNow() has a live message sent at once without
// waiting for it (librdkafka's flush runs on a thread of the publisher's own).
//
//   PublisherOptions opts{.brokers = "127.0.0.1:9092"};
//   OUTBOXD_ASSIGN_OR_RETURN(auto pub, Publisher::Create(opts, [&](const DeliveryReport& r) {
//     tracker.Ack(r.tag, r.status);
//   }));
//   OUTBOXD_RETURN_IF_ERROR(pub->Produce({.topic = "pedido.confirmado", .key = "77",
//                                          .value = "{...}", .headers = hdrs, .tag = 1}));
//   pub->Poll(0);
#ifndef OUTBOXD_KAFKA_PUBLISHER_H_
#define OUTBOXD_KAFKA_PUBLISHER_H_

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
#include "sink/sink.h"

namespace outboxd::kafka {

// The message types are the sink's: the Kafka publisher is one sink::Sink.
using sink::DeliveryHandler;
using sink::DeliveryReport;
using sink::Header;
using sink::OutgoingMessage;

struct PublisherOptions {
  std::string brokers;
  // librdkafka properties passed through (--kafka KEY=VALUE); they override ours.
  std::vector<std::pair<std::string, std::string>> properties;
  // How long the destructor waits for outstanding acknowledgements before dropping
  // them unreported. A clean stop calls Flush() itself; this bounds any other teardown.
  absl::Duration close_timeout = absl::Seconds(5);
  // --dedupe: how long the read-backs of one window may take, all topics together
  // (Held); a topic asked about after that falls back (reason timeout) unread.
  absl::Duration read_back_budget = absl::Seconds(30);
  // librdkafka's log lines (syslog levels: 3 error, 4 warning, 6 info, 7 debug), handed
  // over on the thread calling Poll()/Flush() like delivery reports. Unset: librdkafka
  // prints them to stderr itself, from its own threads.
  std::function<void(int level, std::string_view facility, std::string_view message)> on_log;
};

// A librdkafka property whose value is a secret and never appears in an error or a
// log line: names with password, passwd, secret, key, token, credential, jaas or
// oauthbearer.config in them, in any case (sasl.password, ssl.key.pem,
// sasl.oauthbearer.client.secret, a misspelt sasl.jaas.config).
//   IsSecretProperty("sasl.password") == true; IsSecretProperty("linger.ms") == false
bool IsSecretProperty(std::string_view name);

// A --kafka setting that voids the relays' promise (every event delivered, in order
// per aggregate): what it is set to, as librdkafka reads it back, and what it risks.
struct UnsafeSetting {
  std::string setting;  // "acks=1"
  std::string risk;     // "a leader failover loses events it acknowledged"
};

// Whether a finite message.timeout.ms breaks the promise: it does for `run` (a
// timed-out event would be dead-lettered and passed), not for `poll` or the
// dead-letter replay, whose failed attempts leave the row to be tried again.
enum class MessageTimeout { kMustBeInfinite, kMayBeFinite };

// The properties among `options.properties` (applied over our defaults, aliases and
// spellings such as request.required.acks or "false"/"0" resolved by librdkafka
// itself) that weaken durability or ordering: enable.idempotence off, acks other than
// all, a finite message.timeout.ms (see MessageTimeout), partitioner=random,
// queuing.strategy=lifo. InvalidArgument for a property librdkafka refuses.
//   UnsafeSettings({.properties = {{"acks", "1"}}}, MessageTimeout::kMustBeInfinite)
//     -> {{"acks=1", "..."}}
absl::StatusOr<std::vector<UnsafeSetting>> UnsafeSettings(const PublisherOptions& options,
                                                          MessageTimeout timeout);

class Publisher final : public sink::Sink {
 public:
  static absl::StatusOr<std::unique_ptr<Publisher>> Create(const PublisherOptions& options,
                                                           DeliveryHandler on_delivery);
  // The relays' way to make one: a sink factory over these options. A finite
  // delivery_timeout becomes message.timeout.ms, placed first so that a user's
  // --kafka message.timeout.ms still wins.
  static sink::SinkFactory Factory(PublisherOptions options);
  // Flushes (bounded) then destroys the producer.
  ~Publisher() override;

  // Ends the producer within `flush_timeout` plus its own teardown (measured: under
  // 0.1 s with every broker down): waits up to `flush_timeout` for acknowledgements
  // (serving their reports), then drops whatever is left unreported and destroys the
  // producer. Returns how many messages it dropped; the caller resends them (the
  // relay resumes from its confirmed position). Nothing else may be called after it.
  //   int dropped = publisher->Close(absl::ZeroDuration());  // the caller already waited
  int Close(absl::Duration flush_timeout) override;

  // Enqueues one message. ResourceExhausted when librdkafka's local queue is full
  // (serve Poll() and retry); InvalidArgument for a message that can never be sent.
  absl::Status Produce(const OutgoingMessage& message) override;

  // Serves delivery reports (calls on_delivery); returns how many were served.
  int Poll(int timeout_ms) override;

  // Waits until every enqueued message is acknowledged or the timeout passes,
  // serving delivery reports; meanwhile librdkafka sends what it holds at once,
  // ignoring linger.ms.
  absl::Status Flush(absl::Duration timeout) override;

  // Returns at once; until every message is acknowledged, or for as long as the
  // linger (SendNowWindow), librdkafka sends what it holds, and what is produced
  // meanwhile, without waiting out linger.ms. Reports still come from Poll().
  //   pub->Produce(live_event); pub->SendNow();   // then wait on wake_fd() as usual
  void SendNow() override;

  // Non-OK once the producer hit a fatal error (e.g. idempotence sequence lost): the
  // caller must recreate the producer and resume from the confirmed position.
  absl::Status FatalError() const;
  absl::Status Health() const override { return FatalError(); }

  // Messages enqueued but not yet reported.
  int InFlight() const override;
  // Their key, value and header bytes (names and values): what the relay's flow
  // control bounds, since librdkafka holds a copy of each until it is reported.
  uint64_t InFlightBytes() const override;

  // --dedupe: whether the message `query` names (this relay's, by id and key, and by
  // lsn unless any_lsn) is already in `query.topic`, one copy per question. The
  // first question about a topic in a window reads the topic back (kafka/read_back.h,
  // blocking, bounded); later ones are answered from what it found, until a question
  // names another window. Before a window's first read-back it waits (up to 10 s)
  // until the messages an earlier session left in this producer are acknowledged;
  // past that, the window falls back (reason in_flight).
  absl::StatusOr<sink::HeldAnswer> Held(const sink::HeldQuery& query) override;

  // Test-only: raises a fatal idempotent-producer error as if the broker had
  // reported one (rd_kafka_test_fatal_error), so the recovery path runs for real.
  void RaiseFatalErrorForTesting(std::string_view reason) override;

  // Readable when delivery reports are waiting. Drained by Poll(). Other events (log
  // lines when on_log is set) wake it too, so a wake-up may serve no report.
  int wake_fd() const override;

 private:
  struct Impl;
  explicit Publisher(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// How long one SendNow() keeps librdkafka sending at once: the producer's linger.ms
// (as configured, in milliseconds), at least 1 ms and at most 50 ms. Covering the whole
// linger means a message produced before the call never waits it out, however late
// librdkafka's broker thread is woken (a flush only affects a broker thread that wakes
// while it lasts).
absl::Duration SendNowWindow(std::string_view linger_ms);

}  // namespace outboxd::kafka

#endif  // OUTBOXD_KAFKA_PUBLISHER_H_
