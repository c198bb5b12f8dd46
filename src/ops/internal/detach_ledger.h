// The ledger of the partitions outboxd detaches to drop: a table of its own beside the
// outbox ("<outbox>_detached", one for the outbox's and the inbox's partitions) where
// the partition upkeep (ops/partition_upkeep.h) records a partition *before* it
// detaches it CONCURRENTLY, while the catalog still proves whose partition it is. A
// round killed between the detach and the drop is finished by the next from this
// record alone: no lookup by name or comment, which any role with CREATE on some
// schema could forge (issue 27 point 1: a planted table's row-level security policy
// and an implicit cast ran as the outbox's owner, and as a superuser).
//
//   DetachLedger ledger(outbox);
//   OUTBOXD_RETURN_IF_ERROR(ledger.Ensure(conn, outbox));
//   OUTBOXD_ASSIGN_OR_RETURN(std::string oid, ledger.Record(conn, outbox, leaf));
//   ... ALTER TABLE outbox DETACH PARTITION leaf CONCURRENTLY ...
//   OUTBOXD_ASSIGN_OR_RETURN(std::vector<LedgerEntry> entries, ledger.Entries(conn, outbox));
//
// What the ledger says is trusted only when no other role can have written it: it is
// owned by the parent's owner or a superuser and grants no other role more than
// SELECT. A recorded partition is acted on only while the catalog still agrees with
// the record (same oid, schema, name and owner, that owner still the parent's).
#ifndef OUTBOXD_OPS_INTERNAL_DETACH_LEDGER_H_
#define OUTBOXD_OPS_INTERNAL_DETACH_LEDGER_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pg/connection.h"
#include "pg/table_name.h"

namespace outboxd::ops::internal {

// SQL that is TRUE when relation alias `rel` may be trusted as a partition of parent
// alias `parent`: owned by the parent's owner, or by a superuser (partitions created
// ahead by a superuser's cleanup). Neither can be forged by another role.
std::string TrustedOwnerSql(const std::string& rel, const std::string& parent);

struct LedgerEntry {
  enum class State {
    kPending,   // still attached, its DETACH ... CONCURRENTLY interrupted: FINALIZE it
    kAttached,  // recorded, the detach never began: the record is stale
    kDetached,  // detached as recorded: check it and drop it
    kChanged,   // exists, but no longer as recorded (owner, name, parent): not ours to drop
    kGone,      // dropped meanwhile
  };
  std::string oid;
  pg::TableName name;  // as recorded, schema-qualified
  State state = State::kGone;
};

class DetachLedger {
 public:
  // The ledger beside `outbox` (ops/partition_upkeep.h keeps the inbox's there too).
  explicit DetachLedger(const pg::TableName& outbox);

  const pg::TableName& table() const { return table_; }
  // CREATE TABLE IF NOT EXISTS, no rights for PUBLIC (for outboxd setup).
  std::string CreateSql() const;

  // Whether the ledger exists; FailedPrecondition naming the fix when it does but
  // another role could have written it.
  absl::StatusOr<bool> Check(pg::Connection& conn, const pg::TableName& parent) const;
  // Creates the ledger when missing, then Check.
  absl::Status Ensure(pg::Connection& conn, const pg::TableName& parent) const;
  // Records `leaf` while the catalog shows it a partition of `parent` with a trusted
  // owner; returns its oid. FailedPrecondition when it is not.
  absl::StatusOr<std::string> Record(pg::Connection& conn, const pg::TableName& parent,
                                     const pg::TableName& leaf) const;
  // The recorded partitions of `parent`, each with what the catalog says of it now.
  absl::StatusOr<std::vector<LedgerEntry>> Entries(pg::Connection& conn,
                                                   const pg::TableName& parent) const;
  // Removes `oid`'s record (inside the drop's transaction, or a stale one's).
  absl::Status Forget(pg::Connection& conn, const std::string& oid) const;

 private:
  pg::TableName table_;
};

}  // namespace outboxd::ops::internal

#endif  // OUTBOXD_OPS_INTERNAL_DETACH_LEDGER_H_
