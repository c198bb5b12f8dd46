// KeyLines: per-key order past a failure, the rule src/amqp/sink.cc keeps in its Entry
// chain, held here in one small type so the NATS sink can switch to the shared one
// under src/sink/ by replacing this header alone.
//
// The rule: at most one message of a key is at the broker at a time; the key's later
// messages wait in the sink until it is reported. When it fails, its followers (none
// published) fail right behind it, in order, so the relay dead-letters them in order
// and a replay delivers them in order. Published at once, a follower could be stored
// before the failed one's replay.
//
//   KeyLines lines;
//   if (lines.Add("77", 1)) Publish(1);      // first of its key: may go now
//   lines.Add("77", 2);                      // waits behind 1
//   uint64_t next = lines.Done("77", 1);     // 1 reported OK: 2 may go now
//   std::vector<uint64_t> behind = lines.Fail("77", 2);  // 2 failed: these fail too
#ifndef OUTBOXD_NATS_INTERNAL_KEY_LINES_H_
#define OUTBOXD_NATS_INTERNAL_KEY_LINES_H_

#include <cassert>
#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace outboxd::nats {

class KeyLines {
 public:
  // Appends `seq` to its key's line. True when it is the first: nothing of its key is
  // unreported, so it may be published now.
  [[nodiscard]] bool Add(std::string_view key, uint64_t seq) {
    std::deque<uint64_t>& line = lines_[std::string(key)];
    line.push_back(seq);
    return line.size() == 1;
  }

  // `seq`, the first of its key, was reported OK: returns the key's next message, which
  // may be published now, or 0 when the line is empty.
  [[nodiscard]] uint64_t Done(std::string_view key, uint64_t seq) {
    auto it = lines_.find(ToAbsl(key));
    assert(it != lines_.end() && it->second.front() == seq &&
           "a message is reported only as the first of its key");
    (void)seq;
    it->second.pop_front();
    if (it->second.empty()) {
      lines_.erase(it);
      return 0;
    }
    return it->second.front();
  }

  // `seq`, the first of its key, failed: returns its followers, in order, which fail
  // behind it; the line is gone.
  [[nodiscard]] std::vector<uint64_t> Fail(std::string_view key, uint64_t seq) {
    auto it = lines_.find(ToAbsl(key));
    assert(it != lines_.end() && it->second.front() == seq &&
           "a message is reported only as the first of its key");
    (void)seq;
    std::vector<uint64_t> behind(it->second.begin() + 1, it->second.end());
    lines_.erase(it);
    return behind;
  }

  void Clear() { lines_.clear(); }

 private:
  // This abseil's string_view is its own type: the heterogeneous lookup needs one.
  static absl::string_view ToAbsl(std::string_view v) { return {v.data(), v.size()}; }

  absl::flat_hash_map<std::string, std::deque<uint64_t>> lines_;
};

}  // namespace outboxd::nats

#endif  // OUTBOXD_NATS_INTERNAL_KEY_LINES_H_
