// StandbyHold: the transaction the relay keeps back until every --standby-slot standby
// has flushed past its commit, so that nothing reaches the broker that a failover to
// one of them could lose. The relay adds the transaction's pgoutput messages as they
// arrive; once the commit is in and the standbys have it, it takes them out in order
// and handles them as if they had just been read (under the same flow control).
//
// Memory stays bounded whatever the transaction's size: messages are kept in memory up
// to a budget (--max-in-flight-bytes), the rest go to an unlinked temporary file. One
// INSERT of 40,000 rows of 2.6 kB held 128 MB before.
//
//   StandbyHold hold(64 << 20);
//   OUTBOXD_RETURN_IF_ERROR(hold.Add(data));              // each message read
//   if (hold.committed() && standby_flush >= hold.end()) {  // each turn, while it has some
//     OUTBOXD_ASSIGN_OR_RETURN(std::optional<std::string_view> next, hold.Next());
//     ...                                                 // until nullopt: then empty
//   }
#ifndef OUTBOXD_RELAY_STANDBY_HOLD_H_
#define OUTBOXD_RELAY_STANDBY_HOLD_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pg/lsn.h"

namespace outboxd::relay {

class StandbyHold {
 public:
  explicit StandbyHold(size_t memory_budget) : budget_(memory_budget) {}

  // One message of the transaction being held (its Begin first, its Commit last).
  absl::Status Add(std::string_view message);
  // The next held message, in order, once committed(); nullopt when all were taken
  // (the hold is then empty again). The view is valid until the next call.
  absl::StatusOr<std::optional<std::string_view>> Next();
  // Forgets everything (a session's end: the slot sends it again).
  void Clear();

  bool empty() const { return count_ == 0; }
  // The held transaction's Commit is in: it waits for the standbys, then drains.
  bool committed() const { return end_ != 0; }
  pg::Lsn end() const { return end_; }  // its commit's end LSN (0: not yet)
  // From its Begin, as pgoutput sends it: microseconds since 2000-01-01.
  int64_t commit_time_pg_us() const { return commit_pg_us_; }
  uint64_t events() const { return events_; }  // inserts and messages not taken yet
  size_t memory_bytes() const { return memory_bytes_; }
  size_t spilled_bytes() const { return spilled_bytes_; }

 private:
  absl::Status Spill(std::string_view message);
  absl::StatusOr<std::string_view> ReadSpilled();

  size_t budget_;
  std::vector<std::string> memory_;  // the first messages, up to budget_ bytes
  size_t memory_bytes_ = 0;
  std::unique_ptr<FILE, int (*)(FILE*)> file_{nullptr, &fclose};  // the rest, length-prefixed
  size_t spilled_bytes_ = 0;
  size_t count_ = 0;    // messages held
  size_t taken_ = 0;    // messages handed out by Next()
  std::string buffer_;  // the last message read back from the file
  pg::Lsn end_ = 0;
  int64_t commit_pg_us_ = 0;
  uint64_t events_ = 0;
};

}  // namespace outboxd::relay

#endif  // OUTBOXD_RELAY_STANDBY_HOLD_H_
