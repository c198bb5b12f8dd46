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
#include "pg/connection.h"
#include "pg/lsn.h"

namespace outboxd::pg {

// 'w' message: a chunk of WAL decoded by the output plugin.
struct XLogData {
  Lsn wal_start = 0;       // start of the data in WAL
  Lsn wal_end = 0;         // current end of WAL on the server
  int64_t send_time = 0;   // microseconds since 2000-01-01
  std::string_view data;   // the pgoutput message; valid until the next Next()
};

// 'k' message: primary keepalive.
struct Keepalive {
  Lsn wal_end = 0;
  int64_t send_time = 0;
  bool reply_requested = false;
};

struct NoMessage {};  // nothing buffered; wait for socket() to become readable
struct StreamEnd {};  // server ended the copy stream

using StreamMessage = std::variant<NoMessage, XLogData, Keepalive, StreamEnd>;

struct StreamOptions {
  std::string slot;
  std::string publication;
  Lsn start_lsn = 0;  // 0: the slot's confirmed_flush_lsn
};

class ReplicationStream {
 public:
  // Sends START_REPLICATION SLOT <slot> LOGICAL <lsn> (proto_version '1',
  // publication_names '<publication>'). Errors for a missing or busy slot carry
  // SQLSTATE-derived codes: NotFound (no slot), Unavailable (slot active elsewhere).
  static absl::StatusOr<ReplicationStream> Start(Connection conn, const StreamOptions& options);

  ReplicationStream(ReplicationStream&&) = default;
  ReplicationStream& operator=(ReplicationStream&&) = default;
  ~ReplicationStream();

  // Non-blocking read of the next message (consumes input from the socket first).
  absl::StatusOr<StreamMessage> Next();

  // Standby status update ('r'): write = received, flush = apply = confirmed.
  // Flushes the connection's output buffer (non-blocking best effort).
  absl::Status SendFeedback(Lsn received, Lsn confirmed, bool reply_requested = false);

  // Ends the copy stream cleanly (PQputCopyEnd, drain the final results).
  absl::Status End();

  int socket() const;

 private:
  explicit ReplicationStream(Connection conn) : conn_(std::move(conn)) {}
  Connection conn_;
  char* buffer_ = nullptr;  // current PQgetCopyData buffer, PQfreemem'd on next read
};

}  // namespace outboxd::pg

#endif  // OUTBOXD_PG_REPLICATION_STREAM_H_
