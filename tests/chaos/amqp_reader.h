// The independent consumer of a chaos run on RabbitMQ: one durable queue bound to the
// relays' exchange, consumed with manual acks by a plain rabbitmq-c loop of its own.
// It opens its connections with amqp::Connection (src/amqp/connection.h), as the
// relay's publisher and the inbox's consumer do, but reads and acks with its own
// loop rather than outboxd's consumer: a verdict on outboxd should not rest on the
// code it checks, the reader needs a passive queue.declare on a second connection
// that the inbox source has no call for, and it reconnects after 200 ms without a log
// line, since the faults cut it on purpose. A message is acked only after it was
// recorded, so a connection the faults cut (close_all_connections, a node killed)
// loses nothing: what was in flight comes again and counts as a duplicate.
// One queue holds every aggregate, so the order it is read in is the order checked.
//
//   auto reader = AmqpReader::Start(url, "chaos", "chaos-check", "chaos.*");
//   ... run ...
//   bool delivered = (*reader)->Seen(marker_id);
//   std::vector<Delivery> all = (*reader)->StopAndTake();
#ifndef OUTBOXD_TESTS_CHAOS_AMQP_READER_H_
#define OUTBOXD_TESTS_CHAOS_AMQP_READER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "chaos/reader.h"

namespace outboxd::chaos {

class AmqpReader final : public Reader {
 public:
  // Declares the durable topic exchange (as the relay would), a durable queue and the
  // binding, then starts consuming.
  static absl::StatusOr<std::unique_ptr<AmqpReader>> Start(const std::string& url,
                                                           const std::string& exchange,
                                                           const std::string& queue,
                                                           const std::string& binding_key);
  ~AmqpReader() override;

  // True once the queue has no ready message twice in a row a second apart, with
  // nothing read in between.
  bool WaitCaughtUp(absl::Duration timeout) const override;
  std::vector<Delivery> StopAndTake() override;

  int64_t reconnects() const { return reconnects_; }

 private:
  AmqpReader(std::string url, std::string queue) : url_(std::move(url)), queue_(std::move(queue)) {}
  void Run();
  // One connection's life: consume until it fails or stop_.
  absl::Status ConsumeOnce();

  const std::string url_;
  const std::string queue_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> reconnects_{0};
  int64_t read_ = 0;  // messages read: the next one's offset (the reading thread's)
  std::thread thread_;
};

}  // namespace outboxd::chaos

#endif  // OUTBOXD_TESTS_CHAOS_AMQP_READER_H_
