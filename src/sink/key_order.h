// Per-key order for a sink whose broker keeps no partition log (RabbitMQ, NATS):
// at most one message of each key is at the broker at a time. Kafka keeps a key's
// messages in order inside its partition; a queue does not once one of them fails:
// a follower published before the broker answered for its predecessor would already
// sit in a queue when the predecessor comes back (returned, refused, nacked) to be
// dead-lettered, and its replay would land behind it. So a key's later messages wait
// in the sink until the first is reported, and when it fails they fail right behind
// it, unpublished, in order: the relay dead-letters them as its gate does the events
// it meets after a dead letter, and a replay delivers them in order. The price is a
// confirm round trip per message of one key; across keys nothing waits.
//
// KeyOrder holds only the sequence numbers (the sink's produce order) and which of
// them may go to the broker now ("ready": the first unreported one of its key, not at
// the broker); the sink keeps the messages.
//
//   KeyOrder order;
//   order.Add(1, "order-7");                   // ready: the key's first
//   order.Add(2, "order-7");                   // waits behind 1
//   while (std::optional<uint64_t> seq = order.NextReady()) {
//     Publish(*seq); order.Sent(*seq);
//   }
//   // the connection was lost before 1's confirm: order.Resend(1), it is ready again
//   // 1 acknowledged:                        order.Remove(1, "order-7"); 2 is ready
//   // 1 failed: report it, then each of order.Followers(1) (here 2), removing each
#ifndef OUTBOXD_SINK_KEY_ORDER_H_
#define OUTBOXD_SINK_KEY_ORDER_H_

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"

namespace outboxd::sink {

class KeyOrder {
 public:
  // Takes message `seq` of `key`; `seq` is above every one added before. It is ready
  // at once when no earlier message of its key is unreported, else it waits for them.
  void Add(uint64_t seq, absl::string_view key);

  // The lowest ready message: publish it, then Sent(). nullopt when none is ready.
  [[nodiscard]] std::optional<uint64_t> NextReady() const;
  // How many are ready.
  [[nodiscard]] size_t ready() const { return ready_.size(); }

  // Off the ready list: at the broker now (or refused before it got there, and about
  // to be reported).
  void Sent(uint64_t seq);
  // At the broker but not taken (the connection was lost before its confirm, or the
  // broker nacked it): ready again, before any later message.
  void Resend(uint64_t seq);

  // Reported (acknowledged or failed), and forgotten: the next message of its key
  // becomes ready. Only the first of its key may be reported (asserted): the others
  // never went to the broker.
  void Remove(uint64_t seq, absl::string_view key);

  // The messages of seq's key behind it, oldest first: when `seq` failed, each is
  // reported failed behind it (and removed) before anything else of the key.
  [[nodiscard]] std::vector<uint64_t> Followers(uint64_t seq) const;

  void Clear();

 private:
  // The unreported messages of one key, chained through next_: `first` is the only
  // one that may be at the broker.
  struct Line {
    uint64_t first = 0;
    uint64_t last = 0;
  };

  absl::flat_hash_map<std::string, Line> lines_;  // by key
  absl::flat_hash_map<uint64_t, uint64_t> next_;  // seq -> the next of its key
  std::set<uint64_t> ready_;
};

}  // namespace outboxd::sink

#endif  // OUTBOXD_SINK_KEY_ORDER_H_
