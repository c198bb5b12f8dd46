// The walsender side of logical replication, in CopyBoth mode. Message layouts from
// https://www.postgresql.org/docs/current/protocol-replication.html (all integers
// big-endian). Reading never blocks; End() waits, but only up to its timeout.
#include "pg/replication_stream.h"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace outboxd::pg {
namespace {

// Standby status update: Byte1('r') Int64 write, Int64 flush, Int64 apply,
// Int64 send_time, Byte1 reply.
constexpr size_t kFeedbackSize = 1 + 8 + 8 + 8 + 8 + 1;
// Microseconds between the Unix epoch and PostgreSQL's (2000-01-01 00:00 UTC).
constexpr int64_t kPostgresEpochUnixMicros = 946'684'800'000'000;
// A gap between two reads longer than this is the caller not reading (the relay's
// loop reads at least every second while it reads at all), not the server silent.
constexpr absl::Duration kNotReading = absl::Seconds(2);

void WriteU64(char* out, uint64_t value) {
  for (int i = 7; i >= 0; --i) {
    out[i] = static_cast<char>(value & 0xff);
    value >>= 8;
  }
}

int64_t PostgresNowMicros() { return absl::ToUnixMicros(absl::Now()) - kPostgresEpochUnixMicros; }

// The PID in "replication slot \"x\" is active for PID 123", or "".
std::string ActivePid(std::string_view message) {
  size_t at = message.find("for PID ");
  if (at == std::string_view::npos) return "";
  std::string_view rest = message.substr(at + 8);
  return std::string(rest.substr(0, rest.find_first_not_of("0123456789")));
}

absl::Status StartErrorMessage(const absl::Status& status, const StreamOptions& options);

// The user-facing error keeps the server's SQLSTATE, so callers can tell "slot in
// use" (55006: stand by) from the rest.
absl::Status StartError(const absl::Status& status, const StreamOptions& options) {
  return WithSqlStateOf(StartErrorMessage(status, options), status);
}

absl::Status StartErrorMessage(const absl::Status& status, const StreamOptions& options) {
  const std::string state = SqlStateOf(status);
  const std::string message(status.message());
  if (state == "42704" && absl::StrContains(message, "replication slot")) {
    return absl::NotFoundError(
        absl::StrCat("replication slot ", options.slot, " does not exist; run outboxd setup"));
  }
  if (state == "55006") {
    std::string pid = ActivePid(message);
    return absl::UnavailableError(absl::StrCat("replication slot ", options.slot,
                                               " is in use by another process",
                                               pid.empty() ? "" : absl::StrCat(" (PID ", pid, ")"),
                                               "; stop the other outboxd or wait for it to exit"));
  }
  if (state == "55000") {  // a physical slot, or one created in another database
    return absl::FailedPreconditionError(
        absl::StrCat("cannot stream from replication slot ", options.slot, ": ", message,
                     "; use a logical slot created in this database by outboxd setup"));
  }
  if (state == "42601") {
    return absl::FailedPreconditionError(
        absl::StrCat("START_REPLICATION was rejected (", message,
                     "); the connection must be opened with ConnectionKind::kReplication"));
  }
  return status;
}

}  // namespace

absl::StatusOr<ReplicationStream> ReplicationStream::Start(Connection conn,
                                                           const StreamOptions& options) {
  if (options.slot.empty() || options.publication.empty()) {
    return absl::InvalidArgumentError("replication needs a slot and a publication name");
  }
  // publication_names is a literal holding a list of (quoted) identifiers.
  OUTBOXD_ASSIGN_OR_RETURN(std::string slot, conn.QuoteIdentifier(options.slot));
  OUTBOXD_ASSIGN_OR_RETURN(std::string publication, conn.QuoteIdentifier(options.publication));
  OUTBOXD_ASSIGN_OR_RETURN(std::string publication_names, conn.QuoteLiteral(publication));
  const std::string command =
      absl::StrCat("START_REPLICATION SLOT ", slot, " LOGICAL ", FormatLsn(options.start_lsn),
                   " (proto_version '1', publication_names ", publication_names,
                   options.messages ? ", messages 'true'" : "", ")");
  absl::StatusOr<Result> result = conn.Exec(command);
  if (!result.ok()) return StartError(result.status(), options);
  if (PQresultStatus(result->get()) != PGRES_COPY_BOTH) {
    return absl::InternalError(absl::StrCat("START_REPLICATION answered ",
                                            PQresStatus(PQresultStatus(result->get())),
                                            " instead of COPY_BOTH"));
  }
  // From here on a slow socket must never block the relay loop.
  if (PQsetnonblocking(conn.get(), 1) != 0) {
    return absl::InternalError("cannot switch the replication connection to non-blocking mode");
  }
  return ReplicationStream(std::move(conn), options);
}

ReplicationStream::ReplicationStream(ReplicationStream&& other) noexcept
    : conn_(std::move(other.conn_)),
      options_(std::move(other.options_)),
      buffer_(std::exchange(other.buffer_, nullptr)),
      wants_write_(other.wants_write_),
      ended_(other.ended_),
      last_received_(other.last_received_),
      last_confirmed_(other.last_confirmed_),
      last_heard_(other.last_heard_),
      last_read_(other.last_read_),
      heard_(other.heard_),
      pinged_(other.pinged_) {}

ReplicationStream& ReplicationStream::operator=(ReplicationStream&& other) noexcept {
  if (this != &other) {
    FreeBuffer();
    conn_ = std::move(other.conn_);
    options_ = std::move(other.options_);
    buffer_ = std::exchange(other.buffer_, nullptr);
    wants_write_ = other.wants_write_;
    ended_ = other.ended_;
    last_received_ = other.last_received_;
    last_confirmed_ = other.last_confirmed_;
    last_heard_ = other.last_heard_;
    last_read_ = other.last_read_;
    heard_ = other.heard_;
    pinged_ = other.pinged_;
  }
  return *this;
}

ReplicationStream::~ReplicationStream() { FreeBuffer(); }

void ReplicationStream::FreeBuffer() {
  if (buffer_ != nullptr) PQfreemem(buffer_);
  buffer_ = nullptr;
}

int ReplicationStream::socket() const { return conn_.socket(); }

absl::StatusOr<StreamMessage> ReplicationStream::Next() {
  FreeBuffer();
  if (ended_) return StreamEnd{};
  if (wants_write_) OUTBOXD_RETURN_IF_ERROR(Flush());
  // Serve what libpq already buffered before asking the socket (one recv per drain).
  int len = PQgetCopyData(conn_.get(), &buffer_, /*async=*/1);
  if (len == 0) {
    if (!PQconsumeInput(conn_.get())) return ConnectionLost();
    len = PQgetCopyData(conn_.get(), &buffer_, /*async=*/1);
  }
  if (len == 0) {
    OUTBOXD_RETURN_IF_ERROR(CheckSilence(absl::Now()));
    return NoMessage{};
  }
  if (len == -1) return FinishCopy();
  if (len < 0) return ConnectionLost();
  // No clock read per message: the next empty read stands for when it was heard.
  heard_ = true;
  return ParseCopyData(std::string_view(buffer_, static_cast<size_t>(len)));
}

// A live walsender answers a status update that asks for a reply at once, whatever
// it is doing; one that stays silent past the timeout is behind a dead path (a
// crashed host, a NAT box that forgot the connection), which TCP alone may take
// hours to notice.
absl::Status ReplicationStream::CheckSilence(absl::Time now) {
  if (heard_) {
    last_heard_ = now;
    heard_ = false;
    pinged_ = false;
  } else if (now - last_read_ > kNotReading) {
    last_heard_ += now - last_read_;
  }
  last_read_ = now;
  const absl::Duration timeout = options_.receive_timeout;
  if (timeout <= absl::ZeroDuration()) return absl::OkStatus();
  const absl::Duration silence = now - last_heard_;
  if (silence >= timeout) {
    return absl::UnavailableError(absl::StrCat(
        "no message from PostgreSQL at ", conn_.endpoint(), " for ", absl::FormatDuration(silence),
        ", though a reply was asked for (--pg-receive-timeout ", absl::FormatDuration(timeout),
        "): the replication connection is given up as dead"));
  }
  if (silence >= timeout / 2 && !pinged_) {
    pinged_ = true;
    return SendFeedback(last_received_, last_confirmed_, /*reply_requested=*/true);
  }
  return absl::OkStatus();
}

// The server left COPY mode: read its final results. Errors raised while decoding
// (e.g. a missing publication) arrive here as the result of START_REPLICATION.
absl::StatusOr<StreamMessage> ReplicationStream::FinishCopy() {
  ended_ = true;
  OUTBOXD_RETURN_IF_ERROR(DrainResults(absl::Now() + absl::Seconds(10)));
  return StreamEnd{};
}

absl::Status ReplicationStream::SendFeedback(Lsn received, Lsn confirmed, bool reply_requested) {
  if (ended_) return absl::FailedPreconditionError("replication stream has already ended");
  confirmed = std::max(confirmed, last_confirmed_);
  received = std::max({received, confirmed, last_received_});
  char message[kFeedbackSize];
  message[0] = 'r';
  WriteU64(message + 1, received);    // written
  WriteU64(message + 9, confirmed);   // flushed: the slot may forget up to here
  WriteU64(message + 17, confirmed);  // applied
  WriteU64(message + 25, static_cast<uint64_t>(PostgresNowMicros()));
  message[33] = reply_requested ? 1 : 0;
  const int rc = PQputCopyData(conn_.get(), message, static_cast<int>(kFeedbackSize));
  if (rc < 0) return ConnectionLost();
  if (rc == 0) {
    return absl::ResourceExhaustedError("replication output buffer full; feedback not queued");
  }
  last_received_ = received;
  last_confirmed_ = confirmed;
  return Flush();
}

absl::Status ReplicationStream::Flush() {
  const int rc = PQflush(conn_.get());
  if (rc < 0) return ConnectionLost();
  wants_write_ = rc == 1;
  return absl::OkStatus();
}

absl::Status ReplicationStream::End(absl::Duration timeout) {
  FreeBuffer();
  if (ended_) return absl::OkStatus();
  ended_ = true;
  const absl::Time deadline = absl::Now() + timeout;
  int rc;
  while ((rc = PQputCopyEnd(conn_.get(), nullptr)) == 0) {
    OUTBOXD_RETURN_IF_ERROR(WaitSocket(POLLOUT, deadline));
  }
  if (rc < 0) return ConnectionLost();
  OUTBOXD_RETURN_IF_ERROR(FlushUntil(deadline));
  // The server may still send data it had queued before it saw our CopyDone.
  for (;;) {
    char* data = nullptr;
    const int len = PQgetCopyData(conn_.get(), &data, /*async=*/1);
    if (data != nullptr) PQfreemem(data);
    if (len > 0) continue;
    if (len == -1) break;
    if (len < -1) return ConnectionLost();
    OUTBOXD_RETURN_IF_ERROR(WaitSocket(POLLIN, deadline));
    if (!PQconsumeInput(conn_.get())) return ConnectionLost();
  }
  return DrainResults(deadline);
}

// Reads results until libpq has none left; returns the first error among them.
absl::Status ReplicationStream::DrainResults(absl::Time deadline) {
  absl::Status first_error;
  for (;;) {
    while (PQisBusy(conn_.get())) {
      OUTBOXD_RETURN_IF_ERROR(WaitSocket(POLLIN, deadline));
      if (!PQconsumeInput(conn_.get())) return ConnectionLost();
    }
    Result result(PQgetResult(conn_.get()));
    if (result.get() == nullptr) break;
    const ExecStatusType status = PQresultStatus(result.get());
    if (status == PGRES_COPY_IN) {
      // The server sent CopyDone first; answer with ours to finish the command.
      if (PQputCopyEnd(conn_.get(), nullptr) < 0) return ConnectionLost();
      OUTBOXD_RETURN_IF_ERROR(FlushUntil(deadline));
      continue;
    }
    if (status == PGRES_COPY_OUT || status == PGRES_COPY_BOTH) {
      return absl::InternalError("replication stream still in COPY mode after it ended");
    }
    absl::Status checked = conn_.CheckResult(result, "START_REPLICATION");
    if (!checked.ok() && first_error.ok()) first_error = StreamError(std::move(checked));
  }
  return first_error;
}

absl::Status ReplicationStream::FlushUntil(absl::Time deadline) {
  for (;;) {
    const int rc = PQflush(conn_.get());
    if (rc < 0) return ConnectionLost();
    if (rc == 0) break;
    // libpq's advice: also read, in case the server is blocked writing to us.
    OUTBOXD_RETURN_IF_ERROR(WaitSocket(POLLOUT | POLLIN, deadline));
    if (!PQconsumeInput(conn_.get())) return ConnectionLost();
  }
  wants_write_ = false;
  return absl::OkStatus();
}

absl::Status ReplicationStream::WaitSocket(int events, absl::Time deadline) {
  pollfd fd{socket(), static_cast<int16_t>(events), 0};
  for (;;) {
    const int64_t ms = std::max<int64_t>(0, absl::ToInt64Milliseconds(deadline - absl::Now()));
    const int rc = poll(&fd, 1, static_cast<int>(std::min<int64_t>(ms, 60'000)));
    if (rc > 0) return absl::OkStatus();
    if (rc < 0 && errno != EINTR) return ConnectionLost();
    if (rc == 0 && ms == 0) {
      return absl::DeadlineExceededError(absl::StrCat(
          "PostgreSQL at ", conn_.endpoint(), " did not end the replication stream in time"));
    }
  }
}

absl::Status ReplicationStream::ConnectionLost() const {
  std::string reason = PQerrorMessage(conn_.get());
  reason = reason.substr(0, reason.find('\n'));
  return absl::UnavailableError(absl::StrCat("replication connection to ", conn_.endpoint(),
                                             " lost: ", reason.empty() ? "unknown error" : reason));
}

// Errors the server raised while streaming, in user terms.
absl::Status ReplicationStream::StreamError(absl::Status status) const {
  if (SqlStateOf(status) == "42704" && absl::StrContains(status.message(), "publication")) {
    const char* db = PQdb(conn_.get());
    return absl::FailedPreconditionError(absl::StrCat("publication ", options_.publication,
                                                      " does not exist in database ", db ? db : "?",
                                                      "; run outboxd setup"));
  }
  return status;
}

}  // namespace outboxd::pg
