// ConfirmingSink: what the RabbitMQ and NATS sinks share, the sinks whose broker
// client hands back one confirmation per message and whose broker keeps no partition
// log. (Kafka's librdkafka keeps its own queue, order and reports: kafka::Publisher is
// a plain sink::Sink.)
//
//   relay ──Produce──▶ entries (produce order) ──Serve(): publish the ready ones──▶ broker
//         ◀──Poll()─── Acknowledge · Fail (and its key's followers) · delivery timeout
//
// It keeps each produced message (a StoredMessage, sink/stored_message.h) until it is
// reported, in its key's line (sink::KeyOrder, sink/key_order.h: at most one message
// per key at the broker), and reports on the caller's thread, from Poll(), what the
// broker's part decided and what the delivery timeout expired. wake_fd() is one epoll
// descriptor over a timer armed for the next deadline and what the broker's part adds
// (a socket, an eventfd its client's threads write): stable whatever connection is
// current. Flush() polls until nothing is in flight (sink::PollUntilConfirmed);
// Close() flushes, drops what is left unreported and disconnects.
//
// A broker's sink (amqp/sink.cc, nats/sink.cc) derives from it, implements Produce()
// (its own checks, Add(), then publishing what may go now) and three hooks:
//   Serve()        one round on the caller's thread: serve the broker's outcomes
//                  (Acknowledge, Fail, or KeyOrder::Resend to publish it again), publish
//                  the ready entries; returns how many it reported
//   NextWake(now)  the broker's own next deadline (a reconnect, a retry), or
//                  InfiniteFuture(): the timer fires then, so a select() wakes for it
//   Disconnect()   ends the connection, from Close(), once the entries are dropped
// Its Create() calls OpenWakeFd() first, and its destructor Close(absl::ZeroDuration()).
//
//   absl::Status MySink::Produce(const sink::OutgoingMessage& message) {
//     if (!fatal().ok()) return fatal();
//     Add(message);  // ready at once when no earlier message of its key is unreported
//     PublishReady();
//     ArmTimer();
//     return absl::OkStatus();
//   }
//   // in Serve(), for a confirm of sequence `seq`: Acknowledge(entries().find(seq));
#ifndef OUTBOXD_SINK_CONFIRMING_SINK_H_
#define OUTBOXD_SINK_CONFIRMING_SINK_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "sink/key_order.h"
#include "sink/sink.h"
#include "sink/stored_message.h"

namespace outboxd::sink {

class ConfirmingSink : public Sink {
 public:
  ~ConfirmingSink() override;
  ConfirmingSink(const ConfirmingSink&) = delete;
  ConfirmingSink& operator=(const ConfirmingSink&) = delete;

  int Poll(int timeout_ms) final;
  absl::Status Flush(absl::Duration timeout) final;
  absl::Status Health() const final;
  int InFlight() const final;
  // What the unreported messages hold in the sink: their text (topic, key, value,
  // headers) and the bookkeeping around each, so --max-in-flight-bytes bounds memory.
  uint64_t InFlightBytes() const final;
  int wake_fd() const final;
  int Close(absl::Duration flush_timeout) final;
  void RaiseFatalErrorForTesting(std::string_view reason) final;

 protected:
  // One produced message, kept until it is reported.
  struct Entry {
    uint64_t tag = 0;
    StoredMessage message;
    absl::Time produced_at;
    uint64_t bytes = 0;  // what it holds in memory (message and bookkeeping)
    int publishes = 0;   // how often it went to the broker: above one, published again
  };
  using Entries = std::map<uint64_t, Entry>;  // by sequence = produce order

  // `broker` names it in errors: "RabbitMQ at amqp://127.0.0.1:5672/".
  ConfirmingSink(const SinkSettings& settings, std::string broker);

  // wake_fd() and its timer: the broker sink's Create() calls it first.
  [[nodiscard]] absl::Status OpenWakeFd();
  // Adds an eventfd the broker client's threads write to wake_fd(); Poll() empties it.
  [[nodiscard]] absl::Status WatchSignal(int fd);
  // Adds a connection's socket to wake_fd() (again, for a new socket with an old
  // number). A closed socket leaves it by itself.
  void WatchSocket(int fd);
  // The timer fires at the next deadline: NextWake()'s, or the oldest entry's delivery
  // timeout.
  void ArmTimer();

  // Takes a message: its entry, and its place behind its key's unreported ones.
  Entries::iterator Add(const OutgoingMessage& message);
  // Forgets an entry unreported (Produce() refused it); it must be its key's first.
  void Remove(Entries::iterator it);
  // Reports it acknowledged (`offset`: where the broker stored it, or -1) and forgets
  // it: its key's next message becomes ready.
  void Acknowledge(Entries::iterator it, int64_t offset = -1);
  // Reports it failed, then each later entry of its key (none was published) with
  // FailedPrecondition "follows an earlier message of its key that failed: ...": the
  // relay dead-letters them in order behind it, as its gate does the events it meets
  // after a dead letter. Returns how many were reported.
  int Fail(Entries::iterator it, const absl::Status& status);

  Entries& entries() { return entries_; }
  const Entries& entries() const { return entries_; }
  KeyOrder& order() { return order_; }
  const KeyOrder& order() const { return order_; }
  // OK, or why the sink can deliver nothing more: what Health() and Produce() answer.
  const absl::Status& fatal() const { return fatal_; }
  void SetFatal(absl::Status status) { fatal_ = std::move(status); }

 private:
  virtual int Serve() = 0;
  virtual absl::Time NextWake(absl::Time now) const = 0;
  virtual void Disconnect() = 0;

  int Step();
  int ExpireTimedOut();
  void Report(const Entry& e, const absl::Status& status, int64_t offset);
  void DrainWake();

  DeliveryHandler on_delivery_;
  absl::Duration delivery_timeout_;
  std::string broker_;
  absl::Status fatal_;
  Entries entries_;
  KeyOrder order_;
  uint64_t next_seq_ = 1;
  uint64_t bytes_ = 0;
  bool closed_ = false;
  int epoll_fd_ = -1;
  int timer_fd_ = -1;
  std::vector<int> drained_fds_;  // the timer and WatchSignal()'s: emptied by Poll()
};

// What each broker's sink adds to ConfirmingSink: its counters. The broker's sink.cc
// derives its implementation from it, and its `NewSink` makes one:
//   using Sink = sink::BrokerSink<SinkCounters>;            // amqp/sink.h
//   absl::StatusOr<std::unique_ptr<Sink>> NewSink(const SinkOptions&, const SinkSettings&);
template <typename Counters>
class BrokerSink : public ConfirmingSink {
 public:
  const Counters& counters() const { return counters_; }

 protected:
  using ConfirmingSink::ConfirmingSink;
  Counters counters_;
};

// The SinkFactory of a broker's `create` function, with the options it keeps:
//   relay_options.sink = sink::FactoryOf(&amqp::NewSink, amqp::SinkOptions{...});
template <typename S, typename Options>
SinkFactory FactoryOf(absl::StatusOr<std::unique_ptr<S>> (*create)(const Options&,
                                                                   const SinkSettings&),
                      Options options) {
  return [create, options = std::move(options)](
             const SinkSettings& settings) -> absl::StatusOr<std::unique_ptr<Sink>> {
    absl::StatusOr<std::unique_ptr<S>> made = create(options, settings);
    if (!made.ok()) return made.status();
    return std::unique_ptr<Sink>(*std::move(made));
  };
}

}  // namespace outboxd::sink

#endif  // OUTBOXD_SINK_CONFIRMING_SINK_H_
