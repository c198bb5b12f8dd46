// The relay's PostgreSQL side: connections, the slot's checks, the stream's start.
#include "relay/session.h"

#include <algorithm>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/log.h"
#include "base/startup_retry.h"
#include "base/status_macros.h"
#include "pg/lsn.h"
#include "pg/replication_stream.h"
#include "pg/table_name.h"
#include "relay/backfill_coordinator.h"
#include "relay/bulk_stream.h"
#include "relay/catch_up.h"
#include "relay/preflight.h"

namespace outboxd::relay {

absl::Duration ChooseFeedbackInterval(absl::Duration configured,
                                      absl::Duration wal_sender_timeout) {
  // While flow control pauses reading, the walsender's keepalive requests wait unread
  // behind the data in the socket: only our own timer keeps the connection alive
  // (docs/architecture.md trap "silent client killed by wal_sender_timeout").
  if (wal_sender_timeout > absl::ZeroDuration() && wal_sender_timeout / 3 < configured) {
    return wal_sender_timeout / 3;
  }
  return configured;
}

absl::Duration ChooseReceiveTimeout(absl::Duration configured, absl::Duration wal_sender_timeout) {
  if (configured <= absl::ZeroDuration()) return configured;
  return std::max(configured, wal_sender_timeout);
}

Session::Session(const RelayOptions& options, RelayStats* stats)
    : options_(options),
      stats_(stats),
      dead_letter_table_(options.table, options.slot, this),
      position_(options.table, options.slot, options.position_interval),
      state_(options.table),
      slot_watch_(options.slot, options.slot_check_interval) {}

absl::Status Session::Open() {
  dead_letter_table_.ForgetShape();  // setup may have migrated it meanwhile
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::Connection conn,
      pg::Connection::Open(options_.conninfo, pg::ConnectionKind::kReplication));
  replication_.emplace(std::move(conn));
  if (adopted_control_) {
    control_.emplace(std::move(*adopted_control_));
    adopted_control_.reset();
  } else {
    OUTBOXD_ASSIGN_OR_RETURN(pg::Connection control, pg::Connection::Open(options_.conninfo));
    control_.emplace(std::move(control));
  }
  if (options_.receive_timeout > absl::ZeroDuration()) {
    // Each query of the relay's loop is short: an answer that takes this long comes
    // from a dead path, and would stall the stream's own silence check behind it.
    replication_->set_reply_timeout(options_.receive_timeout);
    control_->set_reply_timeout(options_.receive_timeout);
  }
  slot_watch_.Restart();  // whatever it had in flight went with the old connection
  OUTBOXD_RETURN_IF_ERROR(CheckPrimary(*control_));
  return IdentifySystem();
}

absl::StatusOr<outbox::EmitKey> Session::ReadEmitKey() {
  OUTBOXD_ASSIGN_OR_RETURN(const pg::TableName table, pg::TableName::Parse(options_.table));
  return outbox::EmitKeyStore(table).Read(*control_, options_.publication);
}

absl::StatusOr<pg::Lsn> Session::RunBackfill(Pipeline& pipeline, const pg::SlotInfo& slot,
                                             const outbox::BackfillRequest& request,
                                             StopSignal& stop) {
  return Backfill(options_, *this, pipeline, slot, request, stop);
}

absl::StatusOr<pg::Lsn> Session::ServerPosition() {
  OUTBOXD_ASSIGN_OR_RETURN(pg::Connection * control, Settled());
  return CurrentWalLsn(*control);
}

absl::StatusOr<pg::Connection*> Session::Settled() {
  if (!control_) return absl::UnavailableError("no connection to PostgreSQL (between sessions)");
  OUTBOXD_RETURN_IF_ERROR(slot_watch_.Settle(*control_));
  return &*control_;
}

absl::Status Session::IdentifySystem() {
  OUTBOXD_ASSIGN_OR_RETURN(pg::Result r, replication_->Exec("IDENTIFY_SYSTEM"));
  if (r.rows() != 1 || r.columns() < 2) {
    return absl::InternalError("unexpected answer to IDENTIFY_SYSTEM");
  }
  history_ = absl::StrCat(std::string(r.Get(0, 0)), "/", std::string(r.Get(0, 1)));
  database_ = r.columns() >= 4 ? std::string(r.Get(0, 3)) : std::string();
  return absl::OkStatus();
}

absl::StatusOr<Session::SlotState> Session::InspectSlot() {
  SlotState state;
  OUTBOXD_ASSIGN_OR_RETURN(state.slot, pg::QuerySlot(*replication_, options_.slot));
  const pg::SlotInfo& slot = state.slot;
  state.database = slot.exists ? slot.database : database_;
  if (!slot.active) {  // else another relay holds it: a standby retries every second, quietly
    spdlog::info(
        "connected to PostgreSQL at {} as {}; slot {} {}", replication_->endpoint(),
        replication_->user(), options_.slot,
        slot.exists ? absl::StrCat("confirmed up to ", pg::FormatLsn(slot.confirmed_flush_lsn),
                                   ", lag ", slot.lag_bytes, " bytes, wal_status ", slot.wal_status)
                    : std::string("does not exist yet"));
  }
  if (slot.exists) slot_seen_ = true;
  OUTBOXD_ASSIGN_OR_RETURN(state.backfill, state_.PendingBackfill(*control_, options_.slot));
  if (!slot.exists && !state.backfill && options_.recreate_missing_slot) {
    OUTBOXD_ASSIGN_OR_RETURN(state.backfill, RecreateMissingSlot());
  }
  OUTBOXD_ASSIGN_OR_RETURN(state.feedback_interval, FeedbackInterval());
  return state;
}

absl::StatusOr<std::optional<outbox::BackfillRequest>> Session::RecreateMissingSlot() {
  OUTBOXD_ASSIGN_OR_RETURN(bool recorded, state_.HasRecordedPosition(*control_, options_.slot));
  // A fresh install: CheckSlotForStreaming says so. Unless this process saw the slot:
  // a failover soon after the start reaches a standby that never received a recorded
  // position (issue 28 point 4), and then every row of the table is republished.
  if (!recorded && !slot_seen_) return std::nullopt;
  // Recorded as setup --recreate-slot records it, so a relay stopped mid-backfill
  // starts it again instead of streaming from a slot that skipped the rows.
  OUTBOXD_RETURN_IF_ERROR(state_.RequestBackfill(*control_, options_.slot, /*after_acked=*/true));
  OUTBOXD_ASSIGN_OR_RETURN(std::optional<outbox::BackfillRequest> request,
                           state_.PendingBackfill(*control_, options_.slot));
  if (!request) return absl::InternalError("the backfill request just made is not there");
  int64_t rows = 0;
  {
    // A count of every row of a large outbox may take a healthy server long.
    pg::NoReplyTimeout patient(*control_);
    OUTBOXD_ASSIGN_OR_RETURN(
        rows, state_.CountBackfill(*control_, options_.table, "publicado_em", *request));
  }
  spdlog::warn(
      "replication slot {} is missing on {} though {} (a failover?): re-creating it and "
      "republishing the {} outbox rows {}; those already published arrive again as duplicates",
      options_.slot, control_->endpoint(),
      recorded ? "relays recorded positions for it" : "this relay streamed from it", rows,
      request->after_xid
          ? absl::StrCat("after the last acknowledged position (xid ", *request->after_xid, ")")
          : std::string("of the table (no acknowledged position is recorded "
                        "on this server)"));
  return request;
}

absl::StatusOr<absl::Duration> Session::FeedbackInterval() {
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::Result result,
      replication_->Exec("SELECT setting FROM pg_settings WHERE name = 'wal_sender_timeout'"));
  int64_t timeout_ms = 0;
  if (result.rows() != 1 || !absl::SimpleAtoi(std::string(result.Get(0, 0)), &timeout_ms)) {
    return absl::InternalError("cannot read wal_sender_timeout from pg_settings");
  }
  const absl::Duration interval =
      ChooseFeedbackInterval(options_.feedback_interval, absl::Milliseconds(timeout_ms));
  if (interval != options_.feedback_interval) {
    spdlog::info("feedback every {} (a third of wal_sender_timeout {}ms)",
                 absl::FormatDuration(interval), timeout_ms);
  }
  stream_receive_timeout_ =
      ChooseReceiveTimeout(options_.receive_timeout, absl::Milliseconds(timeout_ms));
  if (stream_receive_timeout_ != options_.receive_timeout) {
    spdlog::info(
        "the stream's receive timeout is wal_sender_timeout {}ms, not --pg-receive-timeout {}: "
        "a walsender decoding a large transaction of other tables answers only every half of it",
        timeout_ms, absl::FormatDuration(options_.receive_timeout));
  }
  return interval;
}

absl::Status Session::CheckSlotForStreaming(const pg::SlotInfo& slot) {
  if (!slot.exists) return MissingSlotError(*control_, options_);
  return CheckWalStatus(slot);
}

absl::Status Session::CheckWalStatus(const pg::SlotInfo& slot) {
  stats_->metrics.SetSlotWalStatus(slot.wal_status, slot.safe_wal_size);
  if (slot.wal_status == "lost") {
    // Streaming on would skip whatever the removed WAL held: stop, loudly.
    return absl::FailedPreconditionError(
        absl::StrCat("replication slot ", options_.slot,
                     " has lost WAL it needed (max_slot_wal_keep_size "
                     "exceeded); events committed after ",
                     pg::FormatLsn(slot.confirmed_flush_lsn),
                     " may be missing from it: stop the relays on it and run outboxd setup "
                     "--recreate-slot --slot ",
                     options_.slot,
                     ", then start outboxd run: it republishes the outbox rows after the last "
                     "acknowledged position first"));
  }
  // safe_wal_size too: it runs out exactly when wal_status turns unreserved, and a
  // slot whose WAL is already removed still reads `unreserved` while its walsender
  // lives (PostgreSQL 15), with a negative safe_wal_size.
  const bool unreserved = slot.wal_status == "unreserved" ||
                          (slot.safe_wal_size.has_value() && *slot.safe_wal_size <= 0);
  if (unreserved) {
    std::string problem = absl::StrCat(
        "replication slot ", options_.slot, " is about to lose WAL (wal_status ", slot.wal_status,
        ", safe_wal_size ",
        slot.safe_wal_size ? absl::StrCat(*slot.safe_wal_size) : std::string("unknown"),
        " bytes, lag ", slot.lag_bytes,
        " bytes): the relay must catch up before the next checkpoint");
    // Warned once per change, not at every check; /healthz says it at every probe.
    if (!slot_unreserved_) spdlog::warn("{}", problem);
    stats_->health.SetSlotProblem(std::move(problem));
  } else if (slot_unreserved_) {
    spdlog::info("replication slot {} holds its WAL again (wal_status {})", options_.slot,
                 slot.wal_status);
    stats_->health.SetSlotProblem("");
  }
  slot_unreserved_ = unreserved;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ChangeStream>> Session::StartStream(pg::Lsn start) {
  // A relay catching up in bulk holds the slot's lock while its slot is not active
  // (between two peeks): held here until the walsender has the slot.
  OUTBOXD_ASSIGN_OR_RETURN(pg::Connection * control, Settled());
  OUTBOXD_ASSIGN_OR_RETURN(const bool mine, TryLockSlot(*control, options_.slot));
  if (!mine) return SlotLockedError(options_.slot);
  pg::Connection conn = std::move(*replication_);
  replication_.reset();
  absl::StatusOr<pg::ReplicationStream> stream =
      pg::ReplicationStream::Start(std::move(conn), {.slot = options_.slot,
                                                     .publication = options_.publication,
                                                     .start_lsn = start,
                                                     .messages = options_.source != Source::kTable,
                                                     .receive_timeout = stream_receive_timeout_});
  OUTBOXD_RETURN_IF_ERROR(UnlockSlot(*control, options_.slot));
  if (!stream.ok()) return stream.status();
  return std::make_unique<PgChangeStream>(std::move(*stream));
}

absl::StatusOr<std::string> Session::BulkRefusal() {
  // peek and advance need what START_REPLICATION needs (REPLICATION, or superuser).
  OUTBOXD_ASSIGN_OR_RETURN(pg::Connection * control, Settled());
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::Result role,
      control->Exec(
          "SELECT rolsuper OR rolreplication FROM pg_roles WHERE rolname = current_user"));
  if (role.rows() == 1 && role.Get(0, 0) == "t") return std::string();
  return absl::StrCat("bulk catch-up needs the REPLICATION attribute on role ", control_->user(),
                      " (ALTER ROLE ", pg::SqlIdentifier(control_->user()), " REPLICATION)");
}

absl::StatusOr<std::unique_ptr<ChangeStream>> Session::StartBulkStream(pg::Lsn start,
                                                                       pg::Lsn target) {
  OUTBOXD_ASSIGN_OR_RETURN(pg::Connection sql, pg::Connection::Open(options_.conninfo));
  OUTBOXD_ASSIGN_OR_RETURN(std::unique_ptr<BulkChangeStream> stream,
                           BulkChangeStream::Start(std::move(sql), replication_,
                                                   {.slot = options_.slot,
                                                    .publication = options_.publication,
                                                    .messages = options_.source != Source::kTable,
                                                    .start = start,
                                                    .target = target,
                                                    .chunk_changes = options_.bulk_catch_up_chunk,
                                                    .metrics = &stats_->metrics,
                                                    .receive_timeout = stream_receive_timeout_}));
  return stream;
}

absl::Status Session::Upkeep(pg::Lsn watermark) {
  if (!control_) return absl::OkStatus();
  if (!options_.standby_slots.empty() && absl::Now() >= next_standby_read_) {
    next_standby_read_ = absl::Now() + options_.standby_interval;
    OUTBOXD_RETURN_IF_ERROR(ReadStandbys());
  }
  OUTBOXD_ASSIGN_OR_RETURN(std::optional<pg::SlotInfo> slot, slot_watch_.Poll(*control_));
  // A slot that vanished while we stream cannot happen (an active slot cannot be
  // dropped); the stream itself reports whatever follows.
  if (slot && slot->exists) OUTBOXD_RETURN_IF_ERROR(CheckWalStatus(*slot));
  if (position_.Due()) {
    OUTBOXD_ASSIGN_OR_RETURN(pg::Connection * control, Settled());
    OUTBOXD_RETURN_IF_ERROR(position_.Tick(*control, watermark));
  }
  return absl::OkStatus();
}

absl::Status Session::AwaitStandbys(pg::Lsn end, StopSignal& stop) {
  if (options_.standby_slots.empty()) return absl::OkStatus();
  bool said = false;
  while (true) {
    OUTBOXD_RETURN_IF_ERROR(ReadStandbys());
    const std::vector<std::string> behind = StandbysBehind(standby_flushes_, end);
    if (behind.empty()) break;
    if (!said) {
      spdlog::warn("backfill waits for standby slot(s) {} to flush past {}",
                   absl::StrJoin(behind, ", "), pg::FormatLsn(end));
      said = true;
    }
    SleepUnlessStopped(stop, options_.standby_interval);
    if (stop.requested()) {
      return absl::CancelledError("stopped while the backfill waited for the standbys");
    }
  }
  if (said) spdlog::info("the standbys flushed past {}: backfilling", pg::FormatLsn(end));
  return absl::OkStatus();
}

absl::Status Session::ReadStandbys() {
  // restart_lsn of a physical slot is what its standby reported flushed.
  OUTBOXD_ASSIGN_OR_RETURN(pg::Connection * control, Settled());
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::Result r,
      control->ExecParams(
          "SELECT n.name, r.restart_lsn::text, (pg_current_wal_lsn() - r.restart_lsn)::bigint "
          "FROM unnest($1::text[]) n(name) LEFT JOIN pg_replication_slots r "
          "ON r.slot_name = n.name AND r.slot_type = 'physical'",
          {absl::StrCat("{", absl::StrJoin(options_.standby_slots, ","), "}")}));
  std::string problem;
  standby_flushes_.clear();
  for (int i = 0; i < r.rows(); ++i) {
    const std::string name(r.Get(i, 0));
    absl::StatusOr<pg::Lsn> lsn =
        r.IsNull(i, 1) ? absl::NotFoundError("") : pg::ParseLsn(r.Get(i, 1));
    standby_flushes_.push_back({.slot = name, .flush = lsn.value_or(0)});
    if (!lsn.ok()) {
      stats_->metrics.SetStandbyLag(name, std::nullopt);
      absl::StrAppend(&problem, problem.empty() ? "" : "; ", "standby slot ", name,
                      " does not exist on ", control_->endpoint(), " (or has no position)");
      continue;
    }
    int64_t lag = 0;
    (void)absl::SimpleAtoi(std::string(r.Get(i, 2)), &lag);
    stats_->metrics.SetStandbyLag(name, lag);
  }
  if (problem != standby_problem_) {
    if (!problem.empty()) {
      spdlog::warn("{}: publishing is held until every --standby-slot has the transactions",
                   problem);
    } else {
      spdlog::info("every --standby-slot is back; publishing resumes");
    }
    standby_problem_ = problem;
  }
  return absl::OkStatus();
}

void Session::Close() {
  replication_.reset();
  control_.reset();
}

absl::Status Session::PgDeadLetterTable::Insert(const outbox::DeadLetter& letter) {
  OUTBOXD_ASSIGN_OR_RETURN(pg::Connection * control, session_->Settled());
  return store_.Insert(*control, letter);
}

absl::StatusOr<absl::flat_hash_map<std::string, outbox::FirstDeadLetter>>
Session::PgDeadLetterTable::Aggregates() {
  OUTBOXD_ASSIGN_OR_RETURN(pg::Connection * control, session_->Settled());
  return store_.Aggregates(*control);
}

absl::StatusOr<absl::Time> Session::PgDeadLetterTable::Now() {
  OUTBOXD_ASSIGN_OR_RETURN(pg::Connection * control, session_->Settled());
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::Result r,
      control->Exec("SELECT (extract(epoch FROM statement_timestamp()) * 1e6)::int8"));
  int64_t micros = 0;
  if (r.rows() != 1 || !absl::SimpleAtoi(std::string(r.Get(0, 0)), &micros)) {
    return absl::InternalError("the server's time could not be read");
  }
  return absl::FromUnixMicros(micros);
}

}  // namespace outboxd::relay
