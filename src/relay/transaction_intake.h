// TransactionIntake: the reading half of the relay's data path. It decodes each
// pgoutput message of the stream (or of a transaction released by the standby hold),
// keeps the transaction being read (its commit LSN and time, its walsender send time),
// maps an outbox row or a signed outboxd_emit message to an event, and hands each
// event, with its transaction, to the delivery side (the Pipeline, through
// IntakeTarget): the sink, the AckTracker, the dead letters. What it refuses (a
// foreign table's row, a row under --source messages, a forged or unsigned message)
// it warns about or counts here, once.
//
//   PostgreSQL --XLogData--> TransactionIntake::Handle --> IntakeTarget::Publish(event, tx)
//                             (Begin, Relation, Insert,     (relay/pipeline.h: gate, sink,
//                              Message, Commit)              AckTracker, feedback)
//
//   TransactionIntake intake(options, &stats, clock, &pipeline);
//   OUTBOXD_RETURN_IF_ERROR(intake.Handle(xlog.data, sent_us));   // each message read
#ifndef OUTBOXD_RELAY_TRANSACTION_INTAKE_H_
#define OUTBOXD_RELAY_TRANSACTION_INTAKE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "outbox/emitted_event.h"
#include "outbox/event.h"
#include "pg/lsn.h"
#include "pgoutput/decoder.h"
#include "relay/ack_tracker.h"
#include "relay/relay_options.h"

namespace outboxd::relay {

// Microseconds between the Unix epoch and PostgreSQL's epoch (2000-01-01).
inline constexpr int64_t kPgEpochOffsetUs = 946684800LL * 1000000;

// The transaction being read, as each of its events carries it.
struct Transaction {
  AckTracker::TxId id = 0;  // the AckTracker's, the delivery tag of its events
  pg::Lsn lsn = 0;          // its commit LSN
  std::string lsn_text;     // commit LSN "X/Y" for the lsn header
  int64_t commit_us = 0;    // Unix microseconds
  // The walsender's send time of its Begin (Unix µs; 0: unknown, as in a bulk catch-up
  // or while held for standbys), for outboxd_pickup_seconds, observed once.
  int64_t sent_us = 0;
  bool picked_up = false;
};

// What the intake hands over: the Pipeline's delivery side.
class IntakeTarget {
 public:
  virtual ~IntakeTarget() = default;
  // pgoutput Begin and Commit: AckTracker::Begin (returns the transaction's id), Commit.
  virtual AckTracker::TxId BeginTransaction(pg::Lsn commit_lsn, int64_t commit_us) = 0;
  virtual void CommitTransaction(pg::Lsn end_lsn) = 0;
  // One outbox event of `tx`, from a row or a message.
  virtual absl::Status Publish(const outbox::OutboxEvent& event, Transaction& tx) = 0;
  // A row with NULL in a mapped column: a dead letter; `event` carries stand-ins for a
  // missing id or aggregate, unique to the row.
  virtual absl::Status DeadLetterRow(const outbox::OutboxEvent& event, const Transaction& tx,
                                     const absl::Status& error) = 0;
};

class TransactionIntake {
 public:
  using Clock = std::function<absl::Time()>;

  // `clock` times the rejections' log lines.
  TransactionIntake(const RelayOptions& options, RelayStats* stats, Clock clock,
                    IntakeTarget* target);

  // One pgoutput message; `sent_us` is the walsender's send time of the XLogData it
  // came in (Unix µs; 0: unknown).
  absl::Status Handle(std::string_view data, int64_t sent_us);
  // --standby-slot: false for a logical message the relay would skip or refuse for its
  // size (that one is counted here), so the hold keeps no copy of it.
  bool WorthHolding(std::string_view data);
  // Backfill (relay/backfill_coordinator.h): the rows form one transaction `id`
  // ending at the new slot's consistent point.
  void BeginBackfill(AckTracker::TxId id, pg::Lsn consistent_point);
  // The session ended: the next one sends the outbox's Relation again, and a backfill
  // before it has no walsender send time.
  void EndSession();
  // One line for the rejections not logged since the last one: every
  // kRejectionsLogInterval, or `now`.
  enum class LogNow { kWhenDue, kNow };
  void LogRejections(LogNow when);

  // --source messages|both: the key outboxd_emit signs with (outbox/emit_key.h), read
  // by each session; a message it did not sign is rejected, never published.
  void SetEmitKey(outbox::EmitKey key) { emit_key_ = std::move(key); }

  Transaction& transaction() { return tx_; }
  const Transaction& transaction() const { return tx_; }

 private:
  absl::Status HandleRelation(const pgoutput::Relation& relation);
  absl::Status HandleInsert(const pgoutput::Insert& insert);
  // A row with NULL in a mapped column (a table that allows it): a dead letter that
  // parks its aggregate, or none when the aggregate itself is NULL.
  absl::Status DeadLetterNullRow(const pgoutput::Tuple& tuple, const absl::Status& error);
  // --source messages|both: an outboxd_emit message is an event like a row.
  absl::Status HandleLogicalMessage(const pgoutput::LogicalMessage& message);
  // An outboxd message that is no event (forged, unsigned, invalid, too large):
  // counted by reason, logged at most once per interval (LogRejections), skipped.
  void Reject(pg::Lsn lsn, outbox::Rejection reason, std::string_view why);
  bool IsOutboxTable(const pgoutput::Relation& relation) const;
  // The current transaction's commit time, rendered once per transaction: the
  // created_at of events from a table without a created-at column.
  std::string_view CommitTimeText();

  const RelayOptions& options_;
  RelayStats* stats_;
  Clock clock_;
  IntakeTarget* target_;
  std::string table_name_;    // unqualified
  std::string table_schema_;  // empty: any schema

  pgoutput::RelationCache relations_;
  outbox::EventMapper mapper_;
  pgoutput::Message message_;  // reused across DecodeInto calls
  uint32_t outbox_relation_id_ = 0;
  bool warned_foreign_insert_ = false;
  bool warned_ignored_row_ = false;   // --source messages: a row arrived
  outbox::EmitKey emit_key_;          // SetEmitKey
  uint64_t rejections_unlogged_ = 0;  // LogRejections
  absl::Time rejections_logged_at_ = absl::InfinitePast();

  Transaction tx_;              // the current one
  std::string tx_commit_text_;  // "" until CommitTimeText() renders it
  uint64_t null_rows_ = 0;      // in this transaction, for their letters' ids
};

}  // namespace outboxd::relay

#endif  // OUTBOXD_RELAY_TRANSACTION_INTAKE_H_
