// StandbyHold: the --standby-slot rule, whole. The transaction the relay keeps back
// until every named standby has flushed past its commit, so that nothing reaches the
// broker that a failover to one of them could lose: what is held (each pgoutput
// message of the transaction being read, its commit's end marking it complete),
// until which flush (the slowest standby's; a missing standby slot holds everything),
// and whom it waits for. The session reads the standbys' positions
// (Session::standby_flushes) and hands them here; the pipeline adds each message as it
// arrives and, once released, handles the messages as if they had just been read
// (under the same flow control); the relay reports WaitingFor().
//
// Memory stays bounded whatever the transaction's size: messages are kept in memory up
// to a budget (--max-in-flight-bytes), the rest go to an unlinked temporary file. One
// INSERT of 40,000 rows of 2.6 kB held 128 MB before.
//
//   StandbyHold hold(64 << 20);
//   OUTBOXD_RETURN_IF_ERROR(hold.Add(data));              // each message read
//   hold.SetStandbys(session.standby_flushes());           // each turn
//   if (hold.waiting()) ...                                // stop reading the stream
//   OUTBOXD_ASSIGN_OR_RETURN(std::optional<std::string_view> next, hold.Released());
//   ...                                                    // until nullopt: then empty
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

// How far one named standby has flushed: its physical slot's restart_lsn (0: the slot
// is missing or has no position).
struct StandbyFlush {
  std::string slot;
  pg::Lsn flush = 0;
  bool operator==(const StandbyFlush&) const = default;
};
using StandbyFlushes = std::vector<StandbyFlush>;

// The named standbys that have not flushed up to `end` (a missing one included), in
// the order given; none when `end` is 0.
//   StandbysBehind({{"a", 100}, {"b", 50}}, 80) == {"b"}
std::vector<std::string> StandbysBehind(const StandbyFlushes& standbys, pg::Lsn end);
// How far every standby has flushed: 0 when one is missing, or when none was read.
pg::Lsn SlowestFlush(const StandbyFlushes& standbys);

class StandbyHold {
 public:
  explicit StandbyHold(size_t memory_budget) : budget_(memory_budget) {}

  // One message of the transaction being held (its Begin first, its Commit last).
  absl::Status Add(std::string_view message);
  // The next held message, in order, once committed(); nullopt when all were taken
  // (the hold is then empty again). The view is valid until the next call.
  absl::StatusOr<std::optional<std::string_view>> Next();
  // Forgets the transaction (a session's end: the slot sends it again); the standbys'
  // positions stay.
  void Clear();

  // The standbys' positions, as the session last read them.
  void SetStandbys(const StandbyFlushes& standbys);
  // A failover: the standbys' positions were read on the old timeline. Until the next
  // SetStandbys a committed transaction waits.
  void Forget() { SetStandbys({}); }
  // A committed transaction waits for a standby: reading the stream waits with it.
  [[nodiscard]] bool waiting() const { return committed() && flush_ < end_; }
  // The next message of a committed transaction every standby has flushed (Next());
  // nullopt while none is released (nothing held, not committed yet, or waiting()).
  [[nodiscard]] absl::StatusOr<std::optional<std::string_view>> Released();
  // The standbys the committed transaction waits for, in the order named (none when
  // nothing committed is held).
  [[nodiscard]] std::vector<std::string> WaitingFor() const {
    return StandbysBehind(standbys_, end_);
  }

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
  StandbyFlushes standbys_;  // SetStandbys
  pg::Lsn flush_ = 0;        // SlowestFlush(standbys_)
};

}  // namespace outboxd::relay

#endif  // OUTBOXD_RELAY_STANDBY_HOLD_H_
