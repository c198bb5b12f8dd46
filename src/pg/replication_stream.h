// The streaming replication protocol over a replication=database connection:
// START_REPLICATION ... LOGICAL with pgoutput, XLogData and keepalive messages in
// CopyData, and standby status updates (feedback).
// Layout: https://www.postgresql.org/docs/current/protocol-replication.html
//
//   OUTBOXD_ASSIGN_OR_RETURN(auto stream, ReplicationStream::Start(std::move(conn), options));
//   while (...) {
//     OUTBOXD_ASSIGN_OR_RETURN(StreamMessage m, stream.Next());   // non-blocking
//     if (std::holds_alternative<NoMessage>(m)) { wait for stream.socket() ...; continue; }
//   }
#ifndef OUTBOXD_PG_REPLICATION_STREAM_H_
#define OUTBOXD_PG_REPLICATION_STREAM_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "pg/connection.h"
#include "pg/copy_data.h"
#include "pg/lsn.h"

namespace outboxd::pg {

struct StreamOptions {
  std::string slot;
  std::string publication;
  Lsn start_lsn = 0;  // 0: the slot's confirmed_flush_lsn
  // pgoutput's messages 'true': logical decoding messages (pg_logical_emit_message)
  // are sent too, transactional ones inside their transaction's Begin and Commit.
  bool messages = false;
  // How long the stream may stay silent before Next() gives the connection up as dead
  // (Unavailable), as PostgreSQL's wal_receiver_timeout does: at half of it, a status
  // update asks the server for a reply, which a live walsender sends at once. Time the
  // caller spends not reading (flow control) does not count. 0: off.
  absl::Duration receive_timeout = absl::ZeroDuration();
};

class ReplicationStream {
 public:
  // Sends START_REPLICATION SLOT <slot> LOGICAL <lsn> (proto_version '1',
  // publication_names '<publication>'). Errors for a missing or busy slot carry
  // SQLSTATE-derived codes: NotFound (no slot), Unavailable (slot active elsewhere).
  // `conn` must be a ConnectionKind::kReplication connection. On success the
  // connection is switched to non-blocking mode.
  static absl::StatusOr<ReplicationStream> Start(Connection conn, const StreamOptions& options);

  // Move-only: buffer_ is owned (PQfreemem), so the moved-from stream gives it up.
  ReplicationStream(ReplicationStream&& other) noexcept;
  ReplicationStream& operator=(ReplicationStream&& other) noexcept;
  ReplicationStream(const ReplicationStream&) = delete;
  ReplicationStream& operator=(const ReplicationStream&) = delete;
  ~ReplicationStream();

  // Non-blocking read of the next message (consumes input from the socket first).
  // A publication missing from the database surfaces here, once pgoutput decodes
  // the first change, as FailedPrecondition. Also retries a pending flush. When the
  // server ends the stream, reads its final results (waiting up to 10 s for them).
  absl::StatusOr<StreamMessage> Next();

  // Standby status update ('r'): write = received, flush = apply = confirmed.
  // Flushes the connection's output buffer (non-blocking best effort). Positions
  // never go backwards: a lower value than one already sent is raised to it.
  absl::Status SendFeedback(Lsn received, Lsn confirmed, bool reply_requested = false);

  // True while output (feedback) is queued because the socket was not writable:
  // wait for socket() to be writable (or readable) and call Flush() or Next().
  bool wants_write() const { return wants_write_; }
  // Sends what libpq has queued without blocking; updates wants_write().
  absl::Status Flush();

  // Ends the copy stream cleanly (PQputCopyEnd, drain the final results), waiting at
  // most `timeout` for the server. Send the final feedback before calling this.
  absl::Status End(absl::Duration timeout = absl::Seconds(10));

  int socket() const;
  // The last positions sent with SendFeedback (0 before the first).
  Lsn last_received() const { return last_received_; }
  Lsn last_confirmed() const { return last_confirmed_; }

 private:
  ReplicationStream(Connection conn, const StreamOptions& options)
      : conn_(std::move(conn)), options_(options) {}
  void FreeBuffer();
  absl::StatusOr<StreamMessage> FinishCopy();
  absl::Status DrainResults(absl::Time deadline);
  absl::Status FlushUntil(absl::Time deadline);
  absl::Status WaitSocket(int events, absl::Time deadline);
  absl::Status ConnectionLost() const;
  absl::Status StreamError(absl::Status status) const;
  absl::Status CheckSilence(absl::Time now);

  Connection conn_;
  StreamOptions options_;
  char* buffer_ = nullptr;  // current PQgetCopyData buffer, PQfreemem'd on next read
  bool wants_write_ = false;
  bool ended_ = false;  // the copy stream is over (server ended it, error, or End())
  Lsn last_received_ = 0;
  Lsn last_confirmed_ = 0;
  absl::Time last_heard_ = absl::Now();  // the last message from the server
  absl::Time last_read_ = absl::Now();   // the last Next() that found no message
  bool heard_ = false;                   // a message since last_read_
  bool pinged_ = false;                  // a reply was asked for since last_heard_
};

}  // namespace outboxd::pg

#endif  // OUTBOXD_PG_REPLICATION_STREAM_H_
