// ChangeStream: the seam between the relay and the replication stream. The relay
// reads the slot's messages (XLogData carrying pgoutput, keepalives) from it and
// sends its feedback through it; nothing else. PgChangeStream, PostgreSQL's
// streaming replication protocol (pg/replication_stream.h), is the production one;
// tests script their own (tests/support/scripted_stream.h) to check the relay's
// rules in process.
//
//   OUTBOXD_ASSIGN_OR_RETURN(pg::ReplicationStream s, pg::ReplicationStream::Start(...));
//   std::unique_ptr<ChangeStream> stream = std::make_unique<PgChangeStream>(std::move(s));
//   OUTBOXD_ASSIGN_OR_RETURN(pg::StreamMessage m, stream->Next());   // non-blocking
//   OUTBOXD_RETURN_IF_ERROR(stream->SendFeedback(received, confirmed, Reply::kNotNeeded));
#ifndef OUTBOXD_RELAY_CHANGE_STREAM_H_
#define OUTBOXD_RELAY_CHANGE_STREAM_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pg/copy_data.h"
#include "pg/lsn.h"
#include "pg/replication_stream.h"

namespace outboxd::relay {

// Whether a feedback message asks the server to answer with a keepalive at once.
enum class Reply { kNotNeeded, kRequested };

class ChangeStream {
 public:
  virtual ~ChangeStream() = default;

  // The next message without blocking: NoMessage when none is buffered (wait for
  // socket()), StreamEnd when the server ended the stream.
  virtual absl::StatusOr<pg::StreamMessage> Next() = 0;
  // Standby status update: `received` written, `confirmed` flushed and applied.
  virtual absl::Status SendFeedback(pg::Lsn received, pg::Lsn confirmed, Reply reply) = 0;
  // Feedback queued behind a full socket: wait for socket() to be writable, Flush().
  virtual bool wants_write() const = 0;
  virtual absl::Status Flush() = 0;
  // Ends the stream cleanly; the final feedback goes first.
  virtual absl::Status End() = 0;
  // Readable when Next() may have a message.
  virtual int socket() const = 0;
  // Whether its messages come in batches already (the bulk catch-up's FETCHes,
  // relay/bulk_stream.h): an empty read then means a wait for the server or for
  // acknowledgements, not a trickle worth napping on (relay/pipeline.cc, Pace).
  virtual bool batched() const { return false; }
};

class PgChangeStream final : public ChangeStream {
 public:
  explicit PgChangeStream(pg::ReplicationStream stream) : stream_(std::move(stream)) {}

  absl::StatusOr<pg::StreamMessage> Next() override { return stream_.Next(); }
  absl::Status SendFeedback(pg::Lsn received, pg::Lsn confirmed, Reply reply) override {
    return stream_.SendFeedback(received, confirmed, reply == Reply::kRequested);
  }
  bool wants_write() const override { return stream_.wants_write(); }
  absl::Status Flush() override { return stream_.Flush(); }
  absl::Status End() override { return stream_.End(); }
  int socket() const override { return stream_.socket(); }

 private:
  pg::ReplicationStream stream_;
};

}  // namespace outboxd::relay

#endif  // OUTBOXD_RELAY_CHANGE_STREAM_H_
