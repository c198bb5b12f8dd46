// BulkChangeStream: the catch-up through SQL (docs/architecture.md, "The bulk
// catch-up"). A walsender sends a backlog one CopyData message per change; the same
// decode run in-server by pg_logical_slot_peek_binary_changes is several times faster.
// This ChangeStream reads the slot that way, chunk by chunk, on a regular connection,
// and yields each row as the XLogData the walsender would have sent (the row's bytea
// is that pgoutput message, its lsn the message's position), so the pipeline (decode,
// map, gate, dead letters, AckTracker, flow control) does not know the difference.
//
//   peek (one chunk, materialised by the server)  -> FETCH rows through a cursor
//   -> the pipeline publishes them -> every one acknowledged (SendFeedback)
//   -> pg_replication_slot_advance(slot, watermark) -> next chunk
//   ... caught up (the server's position at connect): the last advance, then
//   START_REPLICATION (the chunk's transaction is not committed, only closed with its
//   connection), and from then on this is a PgChangeStream.
//
// A peek always starts at the slot's confirmed position, so a chunk is peeked only
// once the one before it is acknowledged and the slot advanced past it; the slot is
// never advanced further than the watermark the pipeline confirms. Between peeks
// the slot is not active, so the advisory lock (TryLockSlot) keeps another relay
// from streaming it meanwhile; a streaming relay takes the same lock around its
// START_REPLICATION (relay/session.cc).
//
//   OUTBOXD_ASSIGN_OR_RETURN(std::unique_ptr<BulkChangeStream> s,
//       BulkChangeStream::Start(std::move(sql), replication, {.slot = ..., .target = server}));
//   ... the pipeline reads s->Next() and confirms with s->SendFeedback(...) as usual.
#ifndef OUTBOXD_RELAY_BULK_STREAM_H_
#define OUTBOXD_RELAY_BULK_STREAM_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "observe/metrics.h"
#include "pg/connection.h"
#include "pg/lsn.h"
#include "relay/change_stream.h"

namespace outboxd::relay {

// The advisory lock every relay takes on `slot` before it reads it (bulk phase) or
// starts streaming it: false when another session holds it.
//   OUTBOXD_ASSIGN_OR_RETURN(bool mine, TryLockSlot(conn, "outboxd"));
absl::StatusOr<bool> TryLockSlot(pg::Connection& conn, const std::string& slot);
absl::Status UnlockSlot(pg::Connection& conn, const std::string& slot);
// Unavailable with SQLSTATE 55006 (the relay stands by, relay/relay.cc): another
// relay is catching up on `slot` in bulk.
absl::Status SlotLockedError(const std::string& slot);

struct BulkOptions {
  std::string slot;
  std::string publication;
  bool messages = false;  // pgoutput's messages 'true' (--source messages|both)
  pg::Lsn start = 0;      // the pipeline's resume position (acknowledged already)
  pg::Lsn target = 0;     // the server's WAL position at connect: caught up there
  // upto_nchanges of one peek (--bulk-catch-up-chunk): see relay_options.h.
  int64_t chunk_changes = 500000;
  // Rows per FETCH; two results at most are held (the one read, the one prefetched).
  int fetch_rows = 1000;
  observe::Metrics* metrics = nullptr;  // outboxd_catchup_bulk_changes_total
  // The stream's once caught up (pg::StreamOptions::receive_timeout). The peeks have
  // none: a chunk may take the server a while to decode, with nothing to say meanwhile.
  absl::Duration receive_timeout = absl::ZeroDuration();
};

class BulkChangeStream final : public ChangeStream {
 public:
  // Takes the advisory lock on `sql` (SlotLockedError when taken), checks that the
  // slot is not active (55006 too), advances it to options.start when it lags the
  // acknowledged position, and sends the first chunk's peek. `replication` is taken
  // (on success only) for the START_REPLICATION once caught up.
  static absl::StatusOr<std::unique_ptr<BulkChangeStream>> Start(
      pg::Connection sql, std::optional<pg::Connection>& replication, BulkOptions options);
  ~BulkChangeStream() override;

  absl::StatusOr<pg::StreamMessage> Next() override;
  // Records `confirmed` (what the pipeline's FeedbackRule reports, relay/feedback_rule.h,
  // uncoalesced since batched()); once a chunk's rows are all acknowledged, advances
  // the slot and peeks the next chunk (or switches to streaming).
  absl::Status SendFeedback(pg::Lsn received, pg::Lsn confirmed, Reply reply) override;
  bool wants_write() const override;
  absl::Status Flush() override;
  // A stop mid-chunk: cancels a peek or fetch in progress and advances the slot to the
  // last confirmed position, so a restart resumes right after it.
  absl::Status End() override;
  int socket() const override;
  bool batched() const override { return bulk(); }

  // Still reading through SQL (false once switched to streaming).
  bool bulk() const { return streaming_ == nullptr; }

 private:
  // The one query in flight on `sql_` at a time.
  enum class Query { kNone, kOpenChunk, kFetch, kAdvance, kCloseChunk };

  BulkChangeStream(pg::Connection sql, pg::Connection replication, BulkOptions options,
                   std::string slot_literal, std::string peek_sql);
  absl::Status Send(Query query, const std::string& sql);
  // Collects what has arrived for the query in flight, then sends the next one.
  absl::Status Pump();
  absl::Status Finished(Query query);
  absl::Status Schedule();
  // The chunk read is the last one: what is left of the backlog is streamed.
  bool LastChunk() const;
  // The next FETCH's answer, waited for (bounded): it comes from a result already
  // materialised by the server, so waiting keeps each pipeline turn reading a whole
  // batch (a short read ends the turn as if it were the chunk's tail: sent at once,
  // without batching, relay/pipeline.cc Pace).
  absl::Status AwaitFetch();
  absl::StatusOr<pg::StreamMessage> Row();
  absl::Status SwitchToStreaming();
  absl::Status QueryError(PGresult* result) const;

  std::optional<pg::Connection> sql_;
  std::optional<pg::Connection> replication_;
  BulkOptions options_;
  std::string slot_literal_;
  std::string peek_sql_;  // BEGIN; DECLARE ... peek ...; FETCH
  std::unique_ptr<ChangeStream> streaming_;

  Query query_ = Query::kNone;
  absl::Status query_error_;
  std::optional<pg::Result> arrived_;  // the TUPLES_OK result of the query in flight
  std::optional<pg::Result> current_;  // rows being handed out
  std::optional<pg::Result> next_;     // prefetched
  // The result the last row handed out came from, once replaced: kept until the next
  // Next(), since the pipeline may still read that row while it calls SendFeedback
  // (a full producer queue), which can take a FETCH's answer.
  std::optional<pg::Result> retired_;
  int row_ = 0;

  // The chunk being read.
  bool cursor_done_ = false;  // a FETCH returned fewer rows than asked
  int64_t chunk_rows_ = 0;
  pg::Lsn chunk_start_ = 0;  // the slot's position when it was peeked
  pg::Lsn chunk_end_ = 0;    // end of its last transaction (a Commit row's lsn)
  pg::Lsn advanced_ = 0;     // where the slot's confirmed position is
  pg::Lsn advancing_ = 0;    // what the kAdvance or kCloseChunk in flight advances to
  absl::Time advanced_at_;
  pg::Lsn confirmed_ = 0;  // the pipeline's watermark, as last sent
  int64_t chunks_ = 0;
  int64_t rows_ = 0;
  // Where a chunk's time goes, logged at debug level when it closes: the peek (until
  // its first rows), reading and publishing them, waiting for the last acks, the
  // advance.
  absl::Time opened_at_;
  absl::Time peeked_at_;
  absl::Time read_at_;
  absl::Time closing_at_;
};

}  // namespace outboxd::relay

#endif  // OUTBOXD_RELAY_BULK_STREAM_H_
