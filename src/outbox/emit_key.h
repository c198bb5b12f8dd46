// The key outboxd_emit signs the WAL-only outbox's events with (outbox/emitted_event.h),
// in a table beside the outbox, "outboxd_emit_key": one row, created by `outboxd
// setup` from the server's strong random source (gen_random_uuid), readable by its
// owner (the outbox's) and the roles the owner grants SELECT to (the relay's), by no
// one else. outboxd_emit, SECURITY DEFINER, reads it as that owner.
//
//   EmitKeyStore keys("app.outbox");
//   setup:  OUTBOXD_ASSIGN_OR_RETURN(bool upgraded, keys.Ensure(conn, had_function));
//           ... COMMIT; if (upgraded) keys.RecordUpgrade(conn);
//   relay:  OUTBOXD_ASSIGN_OR_RETURN(outbox::EmitKey key, keys.Read(conn, "outboxd"));
#ifndef OUTBOXD_OUTBOX_EMIT_KEY_H_
#define OUTBOXD_OUTBOX_EMIT_KEY_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "outbox/emitted_event.h"
#include "pg/connection.h"
#include "pg/table_name.h"

namespace outboxd::outbox {

class EmitKeyStore {
 public:
  // `outbox_table` as given to --table, already checked; the key lives beside it.
  explicit EmitKeyStore(const pg::TableName& outbox_table)
      : outbox_(outbox_table), table_(outbox_table.Sibling(kEmitKeyTable)) {}

  // Creates the table (no rights for PUBLIC) and its key when missing. True when the
  // key is new and an unsigned outboxd_emit existed (`had_function`): an upgrade,
  // whose version-1 backlog RecordUpgrade lets through. Inside setup's transaction.
  [[nodiscard]] absl::StatusOr<bool> Ensure(pg::Connection& conn, bool had_function) const;
  // After the upgrade committed: version-1 content below the WAL position now is
  // read (what the old function wrote, and nothing written from here on).
  [[nodiscard]] absl::Status RecordUpgrade(pg::Connection& conn) const;
  // The key, for the relay: from the table in the schema of the outbox `publication`
  // covers, which must be owned by the outbox's owner. FailedPrecondition naming the
  // fix (setup, or the GRANT) when it is missing, someone else's, unreadable or empty.
  [[nodiscard]] absl::StatusOr<EmitKey> Read(pg::Connection& conn,
                                             const std::string& publication) const;

  const pg::TableName& table() const { return table_; }

 private:
  [[nodiscard]] absl::StatusOr<pg::TableName> Locate(pg::Connection& conn,
                                                     const std::string& publication) const;

  pg::TableName outbox_;
  pg::TableName table_;
};

}  // namespace outboxd::outbox

#endif  // OUTBOXD_OUTBOX_EMIT_KEY_H_
