// The relay's state machine around sessions, and its loop.
#include "relay/relay.h"

#include <memory>
#include <utility>

#include "absl/algorithm/container.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "base/backoff.h"
#include "base/log.h"
#include "base/startup_retry.h"
#include "base/status_macros.h"
#include "outbox/emit_key.h"
#include "outbox/message_format.h"
#include "pg/lsn.h"
#include "relay/session.h"

namespace outboxd::relay {
namespace {

// SQLSTATE object_in_use: another relay holds the slot (or is backfilling it).
constexpr std::string_view kSlotInUse = "55006";

}  // namespace

std::unique_ptr<ReplicationSession> Relay::MakeSession(const RelayOptions& options,
                                                       RelayStats* stats) {
  return std::make_unique<Session>(options, stats);
}

Relay::Relay(RelayOptions options, RelayStats* stats, StopSignal* stop, SessionFactory make_session)
    : options_(std::move(options)),
      stats_(stats),
      stop_(stop),
      session_(make_session(options_, stats)),
      gate_(session_->dead_letter_table()),
      pipeline_(options_, &gate_, stats, stop),
      catch_up_(&stats->metrics) {
  // Each named standby's series from the start, so a dashboard tells 0 from absent.
  for (const std::string& slot : options_.standby_slots) {
    stats_->metrics.SetStandbyWaiting(slot, false);
  }
}

Relay::~Relay() = default;

absl::Status Relay::Run() {
  OUTBOXD_RETURN_IF_ERROR(pipeline_.Start());
  Backoff backoff(options_.reconnect_base, options_.reconnect_cap);
  // Streamed, or found the slot held by another relay: either way the configuration
  // and the environment work, and a later failure (PostgreSQL restarting) is retried.
  bool reached_slot = false;
  bool standing_by = false;
  while (!stop_->requested()) {
    absl::Status status = Connect();
    // /readyz counts a standby as ready (observe/health.h).
    stats_->health.SetStandingBy(pg::SqlStateOf(status) == kSlotInUse);
    if (status.ok()) {
      reached_slot = true;
      standing_by = false;
      backoff.Reset();
      status = Loop();
      if (status.ok()) {
        status = pipeline_.Shutdown();
        pipeline_.CloseSink();
        return status;
      }
      // The bulk stream's errors surface in the pipeline's turns, hence here.
      status = catch_up_plan_.SessionEnded(std::move(status));
      SessionFailed(status);
    }
    EndSession();
    if (stop_->requested()) break;
    if (pg::SqlStateOf(status) == kSlotInUse) {
      // Another relay holds the slot: stand by and take over when it goes away.
      stats_->health.SetStandingBy(true);  // also when a bulk peek found the slot taken
      if (!standing_by) spdlog::info("standing by: {}", status);
      standing_by = true;
      reached_slot = true;
      WaitFor(options_.standby_poll);
      continue;
    }
    // Before the slot was reached, an error is the configuration's or the
    // environment's (exit 2), unless it is a server not up yet (see base/startup_retry.h);
    // later, only those that retrying cannot fix end the relay.
    if (IsConfigurationError(status) || (!reached_slot && !IsTransientDatabaseError(status))) {
      return status;
    }
    if (status.code() == absl::StatusCode::kAborted) {
      spdlog::warn("{}; recreating the producer, resuming from {}", status,
                   pg::FormatLsn(pipeline_.watermark()));
      OUTBOXD_RETURN_IF_ERROR(pipeline_.RecreateSink().status());
      continue;
    }
    absl::Duration wait = backoff.Next();
    stats_->metrics.Reconnected();
    spdlog::warn("{}: {}; reconnecting in {} (attempt {})",
                 reached_slot ? "replication stream lost" : "PostgreSQL is not available yet",
                 status, absl::FormatDuration(absl::Trunc(wait, absl::Milliseconds(1))),
                 backoff.attempts());
    WaitFor(wait);
  }
  pipeline_.CloseSink();
  return absl::OkStatus();
}

absl::Status Relay::Connect() {
  OUTBOXD_RETURN_IF_ERROR(session_->Open());
  const bool failover = !history_.empty() && session_->history() != history_;
  const std::string endpoint = session_->endpoint();
  if (failover) {
    spdlog::warn(
        "PostgreSQL failed over: the primary is now {} (system id/timeline {} -> {}); "
        "resuming from the slot's position, not from {} acknowledged on the old timeline",
        endpoint, history_, session_->history(), pg::FormatLsn(pipeline_.watermark()));
    pipeline_.ForgetPosition();
    session_->ForgetPositions();
  }
  history_ = session_->history();
  const size_t colon = endpoint.rfind(':');
  stats_->metrics.SetPrimary(endpoint.substr(0, colon),
                             colon == std::string::npos ? "" : endpoint.substr(colon + 1),
                             failover);
  OUTBOXD_RETURN_IF_ERROR(gate_.Refresh());
  if (options_.source != Source::kTable) {
    // Each session: a key replaced by setup is in use from the next reconnect.
    OUTBOXD_ASSIGN_OR_RETURN(outbox::EmitKey key, session_->ReadEmitKey());
    pipeline_.SetEmitKey(std::move(key));
  }
  OUTBOXD_ASSIGN_OR_RETURN(SlotState state, session_->InspectSlot());
  // Every message says which relay sent it (the slot's database and name), for a
  // later read-back; a backfill's rows too, before it creates the slot.
  if (!state.database.empty()) {
    pipeline_.SetSlotMark(outbox::SlotMark(state.database, options_.slot));
  }
  pg::Lsn start = 0;
  if (state.backfill) {
    OUTBOXD_ASSIGN_OR_RETURN(start,
                             session_->RunBackfill(pipeline_, state.slot, *state.backfill, *stop_));
  } else {
    OUTBOXD_RETURN_IF_ERROR(session_->CheckSlotForStreaming(state.slot));
    start = pipeline_.ResumeFrom(state.slot.confirmed_flush_lsn);
  }
  // Best effort: without the server's position there is only no progress to show,
  // and no bulk catch-up.
  absl::StatusOr<pg::Lsn> server = session_->ServerPosition();
  OUTBOXD_ASSIGN_OR_RETURN(
      const CatchUpPlan::Decision plan,
      catch_up_plan_.Choose(start, server, [this] { return session_->BulkRefusal(); }));
  if (plan.warn) spdlog::warn("{}", plan.reason);
  const bool bulk = plan.mode == CatchUpPlan::Mode::kBulk;
  OUTBOXD_ASSIGN_OR_RETURN(
      std::unique_ptr<ChangeStream> stream,
      bulk ? session_->StartBulkStream(start, *server) : session_->StartStream(start));
  pipeline_.Stream(std::move(stream), start, state.feedback_interval);
  spdlog::info("{} slot {} publication {} from {}",
               bulk ? "catching up through SQL (bulk) on" : "streaming", options_.slot,
               options_.publication, pg::FormatLsn(start));
  if (server.ok()) {
    catch_up_.Begin(start, *server);
    pipeline_.CatchUpTo(*server);
    pipeline_.ResumeWindow(start, *server);
  }
  return absl::OkStatus();
}

absl::Status Relay::Loop() {
  while (!stop_->requested()) {
    OUTBOXD_ASSIGN_OR_RETURN(const Pipeline::Turn turn, pipeline_.Step());
    if (repeated_.Confirmed(pipeline_.watermark())) {
      spdlog::info("no longer stuck: confirmed {}", pg::FormatLsn(pipeline_.watermark()));
      ShowStuck();
    }
    OUTBOXD_RETURN_IF_ERROR(session_->Upkeep(pipeline_.watermark()));
    catch_up_.Observe(pipeline_.received(), pipeline_.watermark());
    pipeline_.SetStandbys(session_->standby_flushes());
    if (!options_.standby_slots.empty()) ReportStandbyWait();
    if (turn == Pipeline::Turn::kIdle) pipeline_.WaitForWork();
  }
  return absl::OkStatus();
}

void Relay::SessionFailed(const absl::Status& status) {
  if (stop_->requested()) return;
  const bool was_stuck = repeated_.stuck();
  if (!repeated_.SessionFailed(pipeline_.failure_point(), status)) return;
  if (!was_stuck) spdlog::error("{}", repeated_.reason());
  if (was_stuck && !repeated_.stuck()) {
    spdlog::info("no longer stuck: this session failed at {}, past where the others did",
                 pg::FormatLsn(pipeline_.watermark()));
  }
  ShowStuck();
}

void Relay::ShowStuck() {
  stats_->health.SetStuck(repeated_.reason());
  pipeline_.SetStuck(repeated_.stuck_commit_us());
}

void Relay::ReportStandbyWait() {
  const StandbyHold& hold = pipeline_.standby_hold();
  if (hold.end() == 0 && held_by_.empty()) return;  // most turns: nothing to say
  const std::vector<std::string> behind = hold.WaitingFor();
  std::string held_by = absl::StrJoin(behind, ",");
  if (held_by == held_by_) return;
  for (const std::string& slot : options_.standby_slots) {
    stats_->metrics.SetStandbyWaiting(slot, absl::c_linear_search(behind, slot));
  }
  stats_->health.SetHeldBy(held_by);
  held_by_ = std::move(held_by);
}

void Relay::EndSession() {
  catch_up_.End();
  pipeline_.EndSession();
  if (!options_.standby_slots.empty()) ReportStandbyWait();  // nothing is held any more
  session_->Close();
}

void Relay::WaitFor(absl::Duration duration) { pipeline_.IdleFor(duration); }

}  // namespace outboxd::relay
