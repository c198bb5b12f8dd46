// The dead-letter table: events that can never be published (a payload that is not a
// JSON object or array, a topic name Kafka refuses, a message too large for the
// topic), kept in the same database with their error, in arrival order, until
// `outboxd dead-letter replay` republishes them. Later events of an aggregate with a
// dead letter follow it here, so that aggregate's order is never broken.
//
// Dead letters belong to the slot of the relay that filed them: two relays on one
// outbox (each its slot, each its broker) park and replay only their own. A letter
// from before the `slot` column (NULL) counts for every slot until a replay takes it.
//
//   DeadLetterStore store("outbox", "outboxd");       // table outbox_dead_letter
//   OUTBOXD_RETURN_IF_ERROR(store.Insert(conn, letter));
//   OUTBOXD_ASSIGN_OR_RETURN(auto letters, store.List(conn, "pedido-77"));
#ifndef OUTBOXD_OUTBOX_DEAD_LETTER_H_
#define OUTBOXD_OUTBOX_DEAD_LETTER_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pg/connection.h"
#include "pg/table_name.h"

namespace outboxd::outbox {

struct DeadLetter {
  int64_t seq = 0;  // arrival order, assigned by the table
  std::string id;
  std::string aggregate_id;
  std::string type;
  std::string payload;
  std::string created_at;  // as in the created_at header
  std::string lsn;         // commit LSN "X/Y"
  std::string topic;
  // The row's headers (--headers-column) as the JSON text it held, or for a failed
  // delivery the message's headers other than outboxd's own; empty: none. Replay
  // publishes them again.
  std::string headers;
  std::string error;
  std::string dead_at;  // when it was written (read back only)
  // Read back only: a field still holds its stand-in (outbox/stored_letter.h) and the
  // row kept no original bytes for it (a table from before the `original` column):
  // what it held cannot be published again.
  bool original_lost = false;
  // Read back only: the slot of the relay that filed it; none for a letter from before
  // the `slot` column, which counts for every slot until replayed.
  std::optional<std::string> slot;
};

// A dead letter that holds a whole outboxd message whose content could not be read
// (`run --source messages|both`): its id, and its aggregate too, are "message@<the
// message's LSN>". Its own aggregate, so it parks no other event behind it (an outbox
// row may have an empty aggregate_id). It holds no event, so replay never publishes
// it: a person reads it and deletes it (DeadLetterStore::DeleteSql).
inline constexpr char kUnreadableMessagePrefix[] = "message@";
bool IsUnreadableMessage(const DeadLetter& letter);

// A dead letter for an outbox row with NULL in a mapped column (a table that allows
// it): a NULL id or aggregate_id is stored as "null@<commit LSN>#<n>" (n: the row's
// place among such rows in its transaction), so a NULL aggregate parks no other event.
// Its error starts with kNullKeyError; replay leaves it, naming the fix, until a person
// has set the real values (HasNullKey).
inline constexpr char kNullKeyPrefix[] = "null@";
inline constexpr char kNullKeyError[] = "a mapped column is NULL";
bool HasNullKey(const DeadLetter& letter);

struct FirstDeadLetter {
  std::string lsn;  // its commit LSN "X/Y"
  std::string id;
};

class DeadLetterStore {
 public:
  // `outbox_table` as given to --table ("outbox" or "schema.outbox"); the dead
  // letters live beside it in "<table>_dead_letter". With a `slot`, the store files
  // letters under it and reads only its own (and those from before the column);
  // without one (setup, status) it sees every slot's.
  explicit DeadLetterStore(const std::string& outbox_table,
                           std::optional<std::string> slot = std::nullopt);

  // CREATE TABLE IF NOT EXISTS ... (for outboxd setup).
  std::string CreateSql(pg::Connection& conn) const;
  // For outboxd setup on a table an older setup made: adds the `original`, `slot` and
  // `headers` columns and the unique index on (id, aggregate_id, slot), and drops the
  // old unique index on (id, aggregate_id) and constraint on id alone. Returns what it
  // changed ("" when nothing).
  absl::StatusOr<std::string> Migrate(pg::Connection& conn) const;
  const std::string& table() const { return name_.name; }

  // Stores any letter, whatever bytes its fields hold (outbox/stored_letter.h).
  // Idempotent on the event id, aggregate and slot: a poison event streamed again
  // after a restart is stored once, two events that share an id but not an aggregate
  // are both stored, and so is one event two slots' relays both refused.
  // Unavailable naming `outboxd setup` when the table (made by an older setup, not
  // migrated) keeps ids unique across aggregates and refused the second, or has no
  // `headers` column for a letter that has headers (dropping them would publish the
  // event without its trace context on replay): not an error
  // that ends the relay (base/status_macros.h, IsConfigurationError), since setup fixes
  // it while the relay retries, shown stuck on /healthz (relay/repeated_failure.h).
  absl::Status Insert(pg::Connection& conn, const DeadLetter& letter) const;
  // The table's shape is read once, at the first use after this (a session's start).
  void ForgetShape() const { shape_.reset(); }
  // Each aggregate that has dead letters (of this store's slot), with its first one
  // (arrival order): the
  // relay sends that aggregate's later events after it, and publishes its earlier
  // ones (replayed after a restart) normally. Keyed by the stored key and id
  // (outbox::StoredKey), which are unique to the event's own.
  absl::StatusOr<absl::flat_hash_map<std::string, FirstDeadLetter>> Aggregates(
      pg::Connection& conn) const;
  // In arrival order, of this store's slot; one aggregate's (its original bytes), or
  // all. Each with its
  // original bytes where the row kept them (outbox::FromStored).
  absl::StatusOr<std::vector<DeadLetter>> List(pg::Connection& conn,
                                               const std::optional<std::string>& aggregate) const;
  absl::StatusOr<int64_t> Count(pg::Connection& conn) const;
  // Other slots' letters, counted by slot, for a person who asked for this store's
  // slot and may have meant another relay's: {"outboxd_rabbitmq": 3}. Empty without a
  // slot or before the column.
  absl::StatusOr<std::map<std::string, int64_t>> OtherSlots(pg::Connection& conn) const;
  absl::Status Remove(pg::Connection& conn, int64_t seq) const;
  // The statement a person runs to delete one letter by id, for a message that names
  // it: DELETE FROM "outbox_dead_letter" WHERE id = 'message@0/16B3748'.
  std::string DeleteSql(const std::string& id) const;
  // PermissionDenied naming the GRANT when the current role cannot both read and
  // delete the letters, as `dead-letter replay` must (it deletes what it republished).
  absl::Status CheckReplayPrivileges(pg::Connection& conn) const;

 private:
  std::string Quoted(pg::Connection&) const { return name_.quoted; }
  // Which of the later columns the table has (a table from an older setup may lack them).
  struct Shape {
    bool original = false;
    bool slot = false;
    bool headers = false;
  };
  absl::StatusOr<Shape> ReadShape(pg::Connection& conn) const;
  // Unavailable: the table, made by an older setup, cannot take `letter` (`why`).
  absl::Status NotMigrated(const DeadLetter& letter, const char* why) const;
  // " AND (slot = $n OR slot IS NULL)" when this store reads one slot's letters and the
  // table has the column (then `params` gets the slot), else "".
  std::string SlotFilter(const Shape& shape, std::vector<std::optional<std::string>>& params) const;
  pg::TableName name_;
  std::optional<std::string> slot_;
  mutable std::optional<Shape> shape_;
};

}  // namespace outboxd::outbox

#endif  // OUTBOXD_OUTBOX_DEAD_LETTER_H_
