// DeadLetterGate: keeps each aggregate's order when one of its events can never be
// published. The event goes to the dead-letter table, and so does every later event
// of the same aggregate (they follow it, in order) until a replay empties the table
// for it; other aggregates flow on. Events of the aggregate from before the first
// dead letter (streamed again after a restart) are published as usual.
//
// The table is behind DeadLetterTable: the relay's session provides PostgreSQL's
// (relay/session.h), tests an in-memory one.
//
// A replay runs in another process. The gate knows the server time of its last read
// of the table; an event of a parked aggregate committed after that time makes it read
// again before deciding, so a replay that returned before the event's transaction
// committed has freed the aggregate for that very event. Older events (a backlog) are
// decided on what was read.
//
//   DeadLetterGate gate(table);
//   OUTBOXD_RETURN_IF_ERROR(gate.Refresh());                    // at each session start
//   OUTBOXD_ASSIGN_OR_RETURN(bool follows, gate.Follows(event.aggregate_id, event.id,
//       {.commit_lsn = lsn, .commit_time = t, .tx = tx}));
//   OUTBOXD_RETURN_IF_ERROR(gate.Store(letter, tx));            // before acking it
#ifndef OUTBOXD_RELAY_DEAD_LETTER_GATE_H_
#define OUTBOXD_RELAY_DEAD_LETTER_GATE_H_

#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "outbox/dead_letter.h"
#include "pg/lsn.h"
#include "relay/ack_tracker.h"

namespace outboxd::relay {

// The dead-letter table, as the gate uses it: one relay's letters (its slot's), never
// another relay's on the same outbox, whose broker may well take what this one refused.
class DeadLetterTable {
 public:
  virtual ~DeadLetterTable() = default;
  // Stores one letter as this relay's; idempotent on the event id.
  virtual absl::Status Insert(const outbox::DeadLetter& letter) = 0;
  // Each aggregate with dead letters of this relay, and its first one (arrival order),
  // by their stored key and id (outbox::StoredKey: the value itself unless it needed a
  // stand-in).
  virtual absl::StatusOr<absl::flat_hash_map<std::string, outbox::FirstDeadLetter>>
  Aggregates() = 0;
  // The server's time, read before Aggregates(): whatever committed before it is in
  // the answer.
  virtual absl::StatusOr<absl::Time> Now() = 0;
  // For log lines.
  virtual std::string_view name() const = 0;
};

class DeadLetterGate {
 public:
  // Where the current event sits in the stream.
  struct Position {
    pg::Lsn commit_lsn = 0;  // of its transaction
    absl::Time commit_time = absl::InfinitePast();  // the server's, from its Begin
    AckTracker::TxId tx = 0;
  };

  explicit DeadLetterGate(DeadLetterTable* table) : table_(table) {}

  // Re-reads which aggregates have dead letters (a replay may have emptied some).
  absl::Status Refresh();
  // Whether the event `event_id` of `aggregate_id` at `at` must follow an earlier
  // dead letter of its aggregate into the table. Reads the table again first when the
  // aggregate is parked and the event committed after the last read.
  [[nodiscard]] absl::StatusOr<bool> Follows(std::string_view aggregate_id,
                                             std::string_view event_id, Position at);
  // Whether `aggregate_id` has dead letters (as of the last Refresh or Store).
  bool IsParked(std::string_view aggregate_id) const;
  // Writes `letter` to the table and parks its aggregate from it on. `tx` is the
  // transaction in which the relay met it.
  absl::Status Store(const outbox::DeadLetter& letter, AckTracker::TxId tx);

  std::string_view table_name() const { return table_->name(); }

 private:
  // An aggregate with dead letters, and where its first one sits: its events after
  // that point follow it to the table, those before it (replayed after a restart)
  // are published.
  struct Parked {
    pg::Lsn lsn = 0;  // commit LSN of the first dead letter
    std::string first_id;
    AckTracker::TxId passed_in = 0;  // the transaction in which the relay met it
  };

  DeadLetterTable* table_;
  absl::flat_hash_map<std::string, Parked> parked_;
  Parked* Find(std::string_view aggregate_id);

  absl::Time read_as_of_ = absl::InfinitePast();  // the server's time of the last read
};

}  // namespace outboxd::relay

#endif  // OUTBOXD_RELAY_DEAD_LETTER_GATE_H_
