// The catch-up through SQL: peek a chunk, hand its rows out, advance once acknowledged.
#include "relay/bulk_stream.h"

#include <poll.h>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "outbox/emitted_event.h"
#include "pg/copy_data.h"
#include "pg/replication_stream.h"
#include "relay/catch_up_plan.h"

namespace outboxd::relay {
namespace {

// pgoutput sends every logical message, of any prefix and size, and the walsender
// puts each in one CopyData that libpq holds whole (twice: its input buffer, then
// PQgetCopyData's copy). The peek is a query, so here the server leaves out what the
// relay would skip anyway: a message under another prefix arrives without its content,
// one of outboxd's over kMaxEmittedContent as kEmitCutByServer (counted as too_large).
// Message layout: 'M', flags (1), LSN (8), prefix NUL, content length (4), content.
std::string MessageFilterSql() {
  const std::string prefix = absl::BytesToHexString(
      absl::string_view(outbox::kEmitPrefix, sizeof(outbox::kEmitPrefix)));  // with its NUL
  const std::string cut(outbox::kEmitCutByServer);
  const size_t header = 1 + 1 + 8 + sizeof(outbox::kEmitPrefix) + 4;
  return absl::StrCat(
      "CASE WHEN pg_catalog.get_byte(data, 0) <> 77 THEN data "
      "WHEN pg_catalog.substr(data, 11, ",
      sizeof(outbox::kEmitPrefix), ") <> '\\x", prefix,
      "'::bytea THEN pg_catalog.substr(data, 1, 10) || '\\x0000000000'::bytea "
      "WHEN pg_catalog.octet_length(data) > ",
      header + outbox::kMaxEmittedContent, " THEN pg_catalog.substr(data, 1, ", header - 4,
      ") || '\\x", absl::BytesToHexString(std::string({0, 0, 0, static_cast<char>(cut.size())})),
      "'::bytea || '", cut, "'::bytea ELSE data END");
}

// The cursor every chunk is read through (one at a time, inside its own transaction).
constexpr char kCursor[] = "outboxd_bulk";
// How long Next() waits for a FETCH from a chunk already decoded (AwaitFetch): far
// more than one takes (a few ms for 1,000 rows), short enough that delivery reports
// and feedback are served in time if the server is slow.
constexpr absl::Duration kFetchWait = absl::Milliseconds(200);
// How often the slot is advanced inside a chunk (BulkChangeStream::Schedule).
constexpr absl::Duration kMidChunkAdvance = absl::Seconds(5);

std::string LockKey(const std::string& slot) { return "outboxd slot " + slot; }

// pg_replication_slot_advance, moving the slot to `to`: within a chunk, at its end and
// at a stop (`slot` quoted as a literal already).
std::string AdvanceSql(const std::string& slot, pg::Lsn to) {
  return absl::StrCat("SELECT pg_replication_slot_advance(", slot, ", '", pg::FormatLsn(to),
                      "'::pg_lsn)");
}

}  // namespace

absl::StatusOr<bool> TryLockSlot(pg::Connection& conn, const std::string& slot) {
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::Result r, conn.ExecParams("SELECT pg_try_advisory_lock(hashtext($1))", {LockKey(slot)}));
  return r.Get(0, 0) == "t";
}

absl::Status UnlockSlot(pg::Connection& conn, const std::string& slot) {
  return conn.ExecParams("SELECT pg_advisory_unlock(hashtext($1))", {LockKey(slot)}).status();
}

absl::Status SlotLockedError(const std::string& slot) {
  return pg::WithSqlState(
      absl::UnavailableError(absl::StrCat("another relay is catching up on slot ", slot)), "55006");
}

absl::StatusOr<std::unique_ptr<BulkChangeStream>> BulkChangeStream::Start(
    pg::Connection sql, std::optional<pg::Connection>& replication, BulkOptions options) {
  OUTBOXD_ASSIGN_OR_RETURN(bool mine, TryLockSlot(sql, options.slot));
  if (!mine) return SlotLockedError(options.slot);
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::Result slot,
      sql.ExecParams("SELECT active, confirmed_flush_lsn::text FROM pg_replication_slots "
                     "WHERE slot_name = $1",
                     {options.slot}));
  if (slot.rows() != 1) {
    return absl::NotFoundError(absl::StrCat("replication slot ", options.slot, " does not exist"));
  }
  // Streamed by another relay (one that does not take the lock): stand by like a
  // START_REPLICATION refused with 55006 would.
  if (slot.Get(0, 0) == "t") {
    return pg::WithSqlState(absl::UnavailableError(absl::StrCat("replication slot ", options.slot,
                                                                " is active for another relay")),
                            "55006");
  }
  OUTBOXD_ASSIGN_OR_RETURN(pg::Lsn confirmed, pg::ParseLsn(slot.Get(0, 1)));
  OUTBOXD_ASSIGN_OR_RETURN(std::string slot_literal, sql.QuoteLiteral(options.slot));
  if (options.start > confirmed) {
    // Acknowledged already (feedback lost with the last connection): a peek starts at
    // the slot's position, and would publish those transactions again.
    OUTBOXD_RETURN_IF_ERROR(sql.Exec(AdvanceSql(slot_literal, options.start)).status());
    confirmed = options.start;
  }
  // publication_names is a list of identifiers, as in START_REPLICATION.
  OUTBOXD_ASSIGN_OR_RETURN(std::string publication, sql.QuoteIdentifier(options.publication));
  OUTBOXD_ASSIGN_OR_RETURN(std::string publication_names, sql.QuoteLiteral(publication));
  // BINARY: pg_lsn as 8 bytes and bytea raw, nothing to parse or unescape. The peek
  // runs whole at the first FETCH (a materialising function); the slot is free again
  // once it returns, which is why the lock is held.
  std::string peek_sql = absl::StrCat(
      "BEGIN READ ONLY; DECLARE ", kCursor, " BINARY NO SCROLL CURSOR FOR SELECT lsn, ",
      options.messages ? MessageFilterSql() : "data", " FROM pg_logical_slot_peek_binary_changes(",
      slot_literal, ", '", pg::FormatLsn(options.target), "'::pg_lsn, ", options.chunk_changes,
      ", 'proto_version', '1', 'publication_names', ", publication_names,
      options.messages ? ", 'messages', 'true'" : "", "); FETCH ", options.fetch_rows, " FROM ",
      kCursor);
  pg::Connection replication_conn = std::move(*replication);
  replication.reset();
  std::unique_ptr<BulkChangeStream> stream(
      new BulkChangeStream(std::move(sql), std::move(replication_conn), std::move(options),
                           std::move(slot_literal), std::move(peek_sql)));
  stream->advanced_ = confirmed;
  stream->confirmed_ = confirmed;
  stream->chunk_start_ = confirmed;
  stream->advanced_at_ = absl::Now();
  OUTBOXD_RETURN_IF_ERROR(stream->Send(Query::kOpenChunk, stream->peek_sql_));
  return stream;
}

BulkChangeStream::BulkChangeStream(pg::Connection sql, pg::Connection replication,
                                   BulkOptions options, std::string slot_literal,
                                   std::string peek_sql)
    : sql_(std::move(sql)),
      replication_(std::move(replication)),
      options_(std::move(options)),
      slot_literal_(std::move(slot_literal)),
      peek_sql_(std::move(peek_sql)) {}

BulkChangeStream::~BulkChangeStream() = default;

absl::Status BulkChangeStream::Send(Query query, const std::string& sql) {
  if (PQsendQuery(sql_->get(), sql.c_str()) != 1) {
    return absl::UnavailableError(
        absl::StrCat("bulk catch-up: PostgreSQL connection lost: ", PQerrorMessage(sql_->get())));
  }
  query_ = query;
  query_error_ = absl::OkStatus();
  if (query == Query::kOpenChunk) opened_at_ = absl::Now();
  if (query == Query::kCloseChunk) closing_at_ = absl::Now();
  return absl::OkStatus();
}

absl::Status BulkChangeStream::QueryError(PGresult* result) const {
  const char* state = PQresultErrorField(result, PG_DIAG_SQLSTATE);
  const char* primary = PQresultErrorField(result, PG_DIAG_MESSAGE_PRIMARY);
  const std::string sqlstate = state ? state : "";
  // The slot in use, a lost or closing connection: stand by or reconnect. Anything
  // else the bulk path cannot get past (a privilege, temp_file_limit): the relay then
  // streams instead (relay/catch_up_plan.h).
  const bool transient =
      sqlstate == "55006" || absl::StartsWith(sqlstate, "08") || absl::StartsWith(sqlstate, "57");
  absl::Status error(
      transient ? absl::StatusCode::kUnavailable : absl::StatusCode::kInternal,
      absl::StrCat("bulk catch-up of slot ", options_.slot, ": ",
                   primary ? primary : PQresultErrorMessage(result),
                   sqlstate.empty() ? "" : absl::StrCat(" (SQLSTATE ", sqlstate, ")")));
  if (!transient) error = GiveUpBulk(std::move(error));
  return sqlstate.empty() ? error : pg::WithSqlState(error, sqlstate);
}

absl::Status BulkChangeStream::Pump() {
  if (!sql_) return absl::UnavailableError("bulk catch-up: the stream has ended");
  PGconn* conn = sql_->get();
  while (query_ != Query::kNone) {
    if (PQconsumeInput(conn) != 1) {
      absl::Status lost = absl::UnavailableError(
          absl::StrCat("bulk catch-up: PostgreSQL connection lost: ", PQerrorMessage(conn)));
      // After an error a retry will not fix (the query's, not yet returned).
      return GivesUpBulk(query_error_) ? GiveUpBulk(std::move(lost)) : lost;
    }
    if (PQisBusy(conn)) return absl::OkStatus();
    PGresult* raw = PQgetResult(conn);
    if (raw == nullptr) {
      const Query done = std::exchange(query_, Query::kNone);
      OUTBOXD_RETURN_IF_ERROR(std::exchange(query_error_, absl::OkStatus()));
      OUTBOXD_RETURN_IF_ERROR(Finished(done));
      break;
    }
    pg::Result result(raw);
    const ExecStatusType status = PQresultStatus(raw);
    if (status == PGRES_FATAL_ERROR) {
      if (query_error_.ok()) query_error_ = QueryError(raw);
    } else if (status == PGRES_TUPLES_OK &&
               (query_ == Query::kOpenChunk || query_ == Query::kFetch)) {
      arrived_.emplace(std::move(result));
    }
  }
  if (streaming_ != nullptr) return absl::OkStatus();
  return Schedule();
}

absl::Status BulkChangeStream::Finished(Query query) {
  if (query == Query::kAdvance) {
    advanced_ = advancing_;
    advanced_at_ = absl::Now();
    return absl::OkStatus();
  }
  if (query == Query::kCloseChunk) {
    advanced_ = advancing_;
    auto ms = [](absl::Duration d) { return absl::ToInt64Milliseconds(d); };
    spdlog::debug(
        "bulk catch-up chunk {}: {} changes; peek {} ms, read and published {} ms, last acks "
        "{} ms, advance {} ms",
        chunks_, chunk_rows_, ms(peeked_at_ - opened_at_), ms(read_at_ - peeked_at_),
        ms(closing_at_ - read_at_), ms(absl::Now() - closing_at_));
    advanced_at_ = absl::Now();
    if (LastChunk()) return SwitchToStreaming();
    cursor_done_ = false;
    chunk_rows_ = 0;
    chunk_start_ = advanced_;
    chunk_end_ = 0;
    return Send(Query::kOpenChunk, peek_sql_);
  }
  if (!arrived_) return absl::InternalError("bulk catch-up: a FETCH returned no rows result");
  const PGresult* r = arrived_->get();
  if (PQnfields(r) != 2 || PQfformat(r, 0) != 1 || PQfformat(r, 1) != 1) {
    return absl::InternalError("bulk catch-up: the cursor did not return (lsn, data) in binary");
  }
  const int n = PQntuples(r);
  if (query == Query::kOpenChunk) {
    ++chunks_;
    peeked_at_ = absl::Now();
  }
  chunk_rows_ += n;
  rows_ += n;
  if (options_.metrics != nullptr) options_.metrics->BulkChangesRead(n);
  if (n < options_.fetch_rows) cursor_done_ = true;
  if (current_ && row_ < current_->rows()) {
    next_ = std::move(arrived_);
  } else {
    retired_ = std::move(current_);
    current_ = std::move(arrived_);
    row_ = 0;
  }
  arrived_.reset();
  return absl::OkStatus();
}

absl::Status BulkChangeStream::Schedule() {
  if (query_ != Query::kNone) return absl::OkStatus();
  const bool buffered = (current_ && row_ < current_->rows()) || next_;
  if (!cursor_done_) {
    // Within a large chunk, now and then: a kill -9 then sends again only what was
    // published since, not the whole chunk. The advance reads the WAL from
    // restart_lsn (50-250 ms on a 100,000-transaction backlog), so not more often.
    if (confirmed_ > advanced_ && absl::Now() - advanced_at_ >= kMidChunkAdvance) {
      advancing_ = confirmed_;
      return Send(Query::kAdvance, AdvanceSql(slot_literal_, advancing_));
    }
    // Prefetch: the next rows travel while the pipeline works through these.
    if (!next_) {
      return Send(Query::kFetch, absl::StrCat("FETCH ", options_.fetch_rows, " FROM ", kCursor));
    }
    return absl::OkStatus();
  }
  // The chunk is read; once all of it is acknowledged, the slot moves past it.
  if (buffered) return absl::OkStatus();
  if (read_at_ < peeked_at_) read_at_ = absl::Now();
  if (confirmed_ < chunk_end_) return absl::OkStatus();
  advancing_ = std::max(advanced_, confirmed_);
  // Before the walsender takes over, no COMMIT: the connection closes once the stream
  // holds the slot, and the server drops the cursor then, off the relay's path (a
  // COMMIT spent 51-52 ms freeing a 100,000-transaction result). The advance stays: it
  // decodes without the changes and can move restart_lsn; without it the walsender
  // decoded the whole backlog again, changes included, before it reached new WAL (384
  // ms on 100,000 transactions).
  std::vector<std::string> sql;
  if (!LastChunk()) sql.push_back("COMMIT");
  if (advancing_ > advanced_) sql.push_back(AdvanceSql(slot_literal_, advancing_));
  if (sql.empty()) {
    closing_at_ = absl::Now();
    return Finished(Query::kCloseChunk);
  }
  return Send(Query::kCloseChunk, absl::StrJoin(sql, "; "));
}

bool BulkChangeStream::LastChunk() const {
  // Less than an eighth of a chunk's WAL left: streamed rather than peeked. A peek
  // decodes again from restart_lsn whatever it returns, and START_REPLICATION, which
  // comes next anyway, does too: on a 100,000-transaction backlog the last peek (4
  // changes) took 106-133 ms of a 2.1-2.3 s drain.
  const bool more = options_.chunk_changes > 0 && chunk_rows_ >= options_.chunk_changes &&
                    chunk_end_ > chunk_start_ && chunk_end_ < options_.target &&
                    options_.target - chunk_end_ >= (chunk_end_ - chunk_start_) / 8;
  return !more;
}

absl::Status BulkChangeStream::AwaitFetch() {
  const absl::Time deadline = absl::Now() + kFetchWait;
  while (query_ == Query::kFetch && absl::Now() < deadline) {
    pollfd p{.fd = sql_->socket(), .events = POLLIN, .revents = 0};
    poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(deadline - absl::Now())) + 1);
    OUTBOXD_RETURN_IF_ERROR(Pump());
  }
  return absl::OkStatus();
}

absl::StatusOr<pg::StreamMessage> BulkChangeStream::Next() {
  retired_.reset();  // the row handed out last is done with
  if (streaming_ != nullptr) return streaming_->Next();
  // Rows at hand go out without a look at the socket: the prefetched FETCH is collected
  // once they run out (and at each turn's SendFeedback). Pumping at every row made a
  // recv per row while that answer travelled: 17,953 recvfrom calls (16,267 of them
  // EAGAIN) against 7,568 for a 100,000-event backlog under strace; the relay's CPU per
  // event stayed within the noise (six drains each, 12 partitions: 3.3-5.4 us).
  if (current_ && row_ < current_->rows()) return Row();
  OUTBOXD_RETURN_IF_ERROR(Pump());
  if (streaming_ != nullptr) return streaming_->Next();
  if (current_ && row_ >= current_->rows() && next_) {
    retired_ = std::move(current_);
    current_ = std::move(next_);
    next_.reset();
    row_ = 0;
    OUTBOXD_RETURN_IF_ERROR(Schedule());  // the next prefetch
  }
  if (!(current_ && row_ < current_->rows()) && query_ == Query::kFetch) {
    OUTBOXD_RETURN_IF_ERROR(AwaitFetch());
  }
  if (current_ && row_ < current_->rows()) return Row();
  return pg::NoMessage{};
}

absl::StatusOr<pg::StreamMessage> BulkChangeStream::Row() {
  const PGresult* r = current_->get();
  const int i = row_++;
  if (PQgetisnull(r, i, 0) || PQgetlength(r, i, 0) != 8 || PQgetisnull(r, i, 1)) {
    return absl::DataLossError("bulk catch-up: a peeked row without its lsn or data");
  }
  // pg_lsn in binary format: 8 bytes, big-endian.
  const pg::Lsn lsn = pg::ReadU64(std::string_view(PQgetvalue(r, i, 0), 8), 0);
  const std::string_view data(PQgetvalue(r, i, 1), PQgetlength(r, i, 1));
  // A Commit row's lsn is its transaction's end (the walsender's too): what the
  // pipeline confirms once the transaction is acknowledged.
  if (!data.empty() && data[0] == 'C') chunk_end_ = std::max(chunk_end_, lsn);
  if (!(current_ && row_ < current_->rows()) && !next_) {
    OUTBOXD_RETURN_IF_ERROR(Schedule());
  }
  return pg::XLogData{.wal_start = lsn, .wal_end = lsn, .send_time = 0, .data = data};
}

absl::Status BulkChangeStream::SendFeedback(pg::Lsn received, pg::Lsn confirmed, Reply reply) {
  if (streaming_ != nullptr) return streaming_->SendFeedback(received, confirmed, reply);
  confirmed_ = std::max(confirmed_, confirmed);
  return Pump();
}

absl::Status BulkChangeStream::SwitchToStreaming() {
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::ReplicationStream stream,
      pg::ReplicationStream::Start(std::move(*replication_),
                                   {.slot = options_.slot,
                                    .publication = options_.publication,
                                    .start_lsn = advanced_,
                                    .messages = options_.messages,
                                    .receive_timeout = options_.receive_timeout}));
  replication_.reset();
  streaming_ = std::make_unique<PgChangeStream>(std::move(stream));
  spdlog::info(
      "bulk catch-up done on slot {}: {} changes read through SQL in {} chunks; streaming "
      "from {}",
      options_.slot, rows_, chunks_, pg::FormatLsn(advanced_));
  // The walsender holds the slot now: the lock goes with this connection. The last
  // rows' result stays until the next Next() (retired_).
  retired_ = std::move(current_);
  current_.reset();
  next_.reset();
  sql_.reset();
  return absl::OkStatus();
}

bool BulkChangeStream::wants_write() const {
  return streaming_ != nullptr && streaming_->wants_write();
}

absl::Status BulkChangeStream::Flush() {
  return streaming_ != nullptr ? streaming_->Flush() : absl::OkStatus();
}

int BulkChangeStream::socket() const {
  if (streaming_ != nullptr) return streaming_->socket();
  return sql_ ? sql_->socket() : -1;
}

absl::Status BulkChangeStream::End() {
  if (streaming_ != nullptr) return streaming_->End();
  if (!sql_) return absl::OkStatus();
  PGconn* conn = sql_->get();
  if (query_ != Query::kNone) {
    // A peek can take seconds: cancel it rather than wait for rows nobody will read.
    if (PGcancel* cancel = PQgetCancel(conn)) {
      char error[256];
      PQcancel(cancel, error, sizeof(error));
      PQfreeCancel(cancel);
    }
    while (PGresult* r = PQgetResult(conn)) PQclear(r);
    query_ = Query::kNone;
  }
  (void)sql_->Exec("ROLLBACK");  // the chunk's transaction, if open
  if (confirmed_ > advanced_) {
    OUTBOXD_RETURN_IF_ERROR(sql_->Exec(AdvanceSql(slot_literal_, confirmed_)).status());
    advanced_ = confirmed_;
  }
  spdlog::info("bulk catch-up stopped on slot {}: slot advanced to {}", options_.slot,
               pg::FormatLsn(advanced_));
  sql_.reset();
  return absl::OkStatus();
}

}  // namespace outboxd::relay
