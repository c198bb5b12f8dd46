// The independent reader of a chaos run on NATS JetStream: plain libnats, no outboxd
// code (a verdict on the sink should not rest on the code it checks). It makes the
// run's stream before the relays start (file storage, JetStream's 2-minute duplicate
// window, the normal events' subjects only, so the load's invalid-subject poison has
// no place in it), then follows it by stream sequence while the run goes: each round
// an ephemeral pull consumer from the next sequence not yet read, as far as the
// stream's last one, then gone. A round the faults cut (a server killed or paused)
// leaves nothing behind: the next starts again where the last message read ends.
//
// What it reads live serves the driver's questions (Seen, Count, WaitCaughtUp). The
// verdict reads the stream once more from its first message after the run: what it
// holds then, duplicates and all, is what the check sees, so a message acknowledged
// and then lost by a restarted server counts as lost even if it was read before.
// One stream holds every aggregate, so stream order is the order checked.
//
//   auto reader = NatsReader::Start(url, "CHAOS", "chaos.*");
//   ... run ...
//   bool delivered = (*reader)->Seen(marker_id);
//   std::vector<Delivery> all = (*reader)->StopAndTake();
#ifndef OUTBOXD_TESTS_CHAOS_NATS_READER_H_
#define OUTBOXD_TESTS_CHAOS_NATS_READER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "chaos/reader.h"
#include "nats/connection.h"

typedef struct __jsCtx jsCtx;

namespace outboxd::chaos {

class NatsReader final : public Reader {
 public:
  // Connects (reconnecting for ever after), makes the stream taking `subject` unless
  // it exists, then starts reading it.
  static absl::StatusOr<std::unique_ptr<NatsReader>> Start(const std::string& url,
                                                           const std::string& stream,
                                                           const std::string& subject);
  ~NatsReader() override;

  // True once everything up to the stream's last sequence has been read, twice a
  // second apart with the last sequence unchanged.
  bool WaitCaughtUp(absl::Duration timeout) const override;
  // The whole stream read again from its first message (see the header comment).
  std::vector<Delivery> StopAndTake() override;

 private:
  NatsReader(std::unique_ptr<nats::Connection> conn, jsCtx* js, std::string stream,
             std::string subject)
      : conn_(std::move(conn)), js_(js), stream_(std::move(stream)), subject_(std::move(subject)) {}
  void Run();
  // The stream's last sequence (0 when empty).
  absl::StatusOr<uint64_t> LastSequence() const;
  // Reads sequences `from`..`last` through a consumer of its own, appending each
  // message to `out`; returns the sequence after the last one read.
  uint64_t ReadRange(uint64_t from, uint64_t last, std::vector<Delivery>& out);

  const std::unique_ptr<nats::Connection> conn_;
  jsCtx* const js_;
  const std::string stream_;
  const std::string subject_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> next_{1};  // the first stream sequence not read yet
  std::thread thread_;
};

}  // namespace outboxd::chaos

#endif  // OUTBOXD_TESTS_CHAOS_NATS_READER_H_
