// The relay's reading half. Reading order matters: pgoutput (protocol 1, no streaming)
// sends only committed transactions, Begin .. rows .. Commit, so rows are handed over
// as they are decoded and the AckTracker closes the transaction at its Commit.
#include "relay/transaction_intake.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/log_escape.h"
#include "base/status_macros.h"
#include "outbox/dead_letter.h"
#include "pg/table_name.h"

namespace outboxd::relay {
namespace {

// Rejected outboxd messages (forged, unsigned, invalid): one line at once, then at
// most one count per interval.
constexpr absl::Duration kRejectionsLogInterval = absl::Seconds(10);

}  // namespace

TransactionIntake::TransactionIntake(const RelayOptions& options, RelayStats* stats, Clock clock,
                                     IntakeTarget* target)
    : options_(options),
      stats_(stats),
      clock_(std::move(clock)),
      target_(target),
      mapper_(options_.columns) {
  // Preflight (relay/preflight.h) refused a name that does not parse before any relay
  // is built; kept whole, such a name would just match no Relation message.
  absl::StatusOr<pg::TableName> table = pg::TableName::Parse(options_.table);
  table_name_ = table.ok() ? table->name : options_.table;
  if (table.ok()) table_schema_ = table->schema;
  // Every reason's series from the start, at 0, so an alert sees a value.
  for (outbox::Rejection reason : outbox::kEveryRejection) {
    stats_->metrics.MessagesRejected(outbox::RejectionName(reason), 0);
  }
}

absl::Status TransactionIntake::Handle(std::string_view data, int64_t sent_us) {
  OUTBOXD_RETURN_IF_ERROR(pgoutput::DecodeInto(data, message_));
  if (auto* insert = std::get_if<pgoutput::Insert>(&message_)) return HandleInsert(*insert);
  if (auto* begin = std::get_if<pgoutput::Begin>(&message_)) {
    tx_.id = target_->BeginTransaction(begin->final_lsn, begin->commit_time + kPgEpochOffsetUs);
    tx_.lsn = begin->final_lsn;
    tx_.lsn_text = pg::FormatLsn(begin->final_lsn);
    tx_.commit_us = begin->commit_time + kPgEpochOffsetUs;
    tx_commit_text_.clear();
    null_rows_ = 0;
    tx_.sent_us = sent_us;
    tx_.picked_up = false;
  } else if (auto* commit = std::get_if<pgoutput::Commit>(&message_)) {
    target_->CommitTransaction(commit->end_lsn);
  } else if (auto* relation = std::get_if<pgoutput::Relation>(&message_)) {
    return HandleRelation(*relation);
  } else if (auto* logical = std::get_if<pgoutput::LogicalMessage>(&message_)) {
    return HandleLogicalMessage(*logical);
  }
  // Update, Delete and Truncate are never published (the publication asks for
  // inserts only; if someone widens it, we still ignore them). Origin and Type carry
  // nothing for us.
  return absl::OkStatus();
}

void TransactionIntake::BeginBackfill(AckTracker::TxId id, pg::Lsn consistent_point) {
  tx_.id = id;
  tx_.lsn = consistent_point;
  tx_.lsn_text = pg::FormatLsn(consistent_point);
}

void TransactionIntake::EndSession() {
  outbox_relation_id_ = 0;
  tx_.sent_us = 0;  // a backfill before the next stream has no walsender send time
}

absl::Status TransactionIntake::HandleRelation(const pgoutput::Relation& relation) {
  if (IsOutboxTable(relation)) {
    // A new Relation for the outbox replaces the mapping (ALTER TABLE mid-stream).
    OUTBOXD_RETURN_IF_ERROR(mapper_.SetRelation(relation));
    outbox_relation_id_ = relation.id;
  }
  relations_.Put(relation);
  return absl::OkStatus();
}

bool TransactionIntake::IsOutboxTable(const pgoutput::Relation& relation) const {
  return relation.relname == table_name_ &&
         (table_schema_.empty() || relation.nspname == table_schema_);
}

absl::Status TransactionIntake::HandleInsert(const pgoutput::Insert& insert) {
  if (insert.relation_id != outbox_relation_id_ || outbox_relation_id_ == 0) {
    if (!warned_foreign_insert_) {
      const pgoutput::Relation* rel = relations_.Find(insert.relation_id);
      spdlog::warn("publication {} also covers table {}; its rows are not published",
                   options_.publication,
                   LogSafe(rel ? rel->relname : absl::StrCat(insert.relation_id)));
      warned_foreign_insert_ = true;
    }
    return absl::OkStatus();
  }
  if (options_.source == Source::kMessages) {
    if (!std::exchange(warned_ignored_row_, true)) {
      spdlog::warn(
          "rows inserted into {} are not published with --source messages; use "
          "--source both to publish rows and emitted events",
          options_.table);
    }
    return absl::OkStatus();
  }
  absl::StatusOr<outbox::OutboxEvent> event = mapper_.Map(insert.tuple);
  if (!event.ok()) return DeadLetterNullRow(insert.tuple, event.status());
  if (options_.columns.created_at.empty()) event->created_at = CommitTimeText();
  return target_->Publish(*event, tx_);
}

absl::Status TransactionIntake::DeadLetterNullRow(const pgoutput::Tuple& tuple,
                                                  const absl::Status& error) {
  // A row that does not match its Relation is no event at all: stop with the reason.
  if (tuple.size() != mapper_.column_count()) {
    return absl::FailedPreconditionError(absl::StrCat("outbox row in transaction ", tx_.lsn_text,
                                                      " cannot be read: ", error.message()));
  }
  // A NULL (or a value not in text form) in a mapped column, which an adopted table
  // may allow: stopping met the row again on every restart and held every aggregate.
  outbox::OutboxEvent event = mapper_.MapPresent(tuple);
  // Stand-ins for a missing id or aggregate, unique to the row: a NULL aggregate
  // parks no other event (as an unreadable message's does not); replay leaves the
  // letter until a person has set the real value (outbox::HasNullKey).
  const std::string row = absl::StrCat(tx_.lsn_text, "#", ++null_rows_);
  const std::string id =
      event.id.empty() ? absl::StrCat(outbox::kNullKeyPrefix, row) : std::string(event.id);
  const std::string aggregate = event.aggregate_id.empty()
                                    ? absl::StrCat(outbox::kNullKeyPrefix, row)
                                    : std::string(event.aggregate_id);
  event.id = id;
  event.aggregate_id = aggregate;
  return target_->DeadLetterRow(
      event, tx_,
      absl::InvalidArgumentError(absl::StrCat(outbox::kNullKeyError, " (", error.message(), ")")));
}

absl::Status TransactionIntake::HandleLogicalMessage(const pgoutput::LogicalMessage& message) {
  // Other prefixes belong to other consumers of the WAL.
  if (message.prefix != outbox::kEmitPrefix || options_.source == Source::kTable) {
    return absl::OkStatus();
  }
  if ((message.flags & 1) == 0) {
    // Written whether or not its transaction commits, and outside any transaction
    // the AckTracker could confirm: publishing it could publish what was rolled back.
    Reject(message.lsn, outbox::Rejection::kNonTransactional,
           "is not transactional: events must be emitted inside their transaction, by "
           "outboxd_emit");
    return absl::OkStatus();
  }
  // Every role may call pg_logical_emit_message: only a signed content is an event
  // (outbox/emitted_event.h). A refused one is not a dead letter: it names no aggregate
  // that is really ours, so it must park none, and it is nobody's event to replay.
  outbox::EmittedRead read = outbox::ReadEmittedEvent(message.content, emit_key_, message.lsn);
  if (!read.ok()) {
    Reject(message.lsn, read.rejected, read.why);
    return absl::OkStatus();
  }
  if (read.event.created_at.empty()) read.event.created_at = CommitTimeText();
  return target_->Publish(read.event, tx_);
}

void TransactionIntake::Reject(pg::Lsn lsn, outbox::Rejection reason, std::string_view why) {
  stats_->metrics.MessagesRejected(outbox::RejectionName(reason));
  // A role flooding the WAL with forgeries must not flood the log too: one line, then
  // a count every kRejectionsLogInterval (LogRejections).
  if (clock_() - rejections_logged_at_ < kRejectionsLogInterval) {
    ++rejections_unlogged_;
    return;
  }
  spdlog::warn(
      "outboxd message at {} rejected ({}), not published: its content {}. Only events "
      "written by outboxd_emit are published; see docs/security.md",
      pg::FormatLsn(lsn), outbox::RejectionName(reason), LogSafe(why));
  rejections_logged_at_ = clock_();
}

void TransactionIntake::LogRejections(LogNow when) {
  if (rejections_unlogged_ == 0) return;
  if (when != LogNow::kNow && clock_() - rejections_logged_at_ < kRejectionsLogInterval) return;
  spdlog::warn(
      "{} more outboxd message(s) rejected, not published (outboxd_messages_rejected_total "
      "counts them by reason)",
      rejections_unlogged_);
  rejections_unlogged_ = 0;
  rejections_logged_at_ = clock_();
}

bool TransactionIntake::WorthHolding(std::string_view data) {
  if (data.empty() || data[0] != 'M') return true;
  if (!pgoutput::DecodeInto(data, message_).ok()) return true;  // Handle says why
  const auto& message = std::get<pgoutput::LogicalMessage>(message_);
  if (message.prefix != outbox::kEmitPrefix || options_.source == Source::kTable) return false;
  if (message.content.size() <= outbox::kMaxEmittedContent) return true;
  Reject(message.lsn, outbox::Rejection::kTooLarge, "is over the size outboxd_emit writes");
  return false;
}

std::string_view TransactionIntake::CommitTimeText() {
  if (tx_commit_text_.empty()) {
    // As PostgreSQL renders a timestamptz in UTC, so the encoder's IsoTimestamp
    // treats it like a created-at column's value.
    tx_commit_text_ = absl::FormatTime("%Y-%m-%d %H:%M:%E*S+00",
                                       absl::FromUnixMicros(tx_.commit_us), absl::UTCTimeZone());
  }
  return tx_commit_text_;
}

}  // namespace outboxd::relay
