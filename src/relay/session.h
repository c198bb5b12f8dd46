// Session: the relay's PostgreSQL side for one connection's lifetime. Opens the
// replication connection and the regular (control) one, reads the slot (does it
// exist, is its WAL reserved, is a backfill pending), chooses the feedback interval
// from the server's wal_sender_timeout, starts the stream, and runs the chores that
// need the control connection while streaming: the slot's wal_status, the recorded
// position, the dead-letter table. What to do when a session fails (reconnect, stand
// by, give up) is Relay::Run's.
//
//   Session session(options, &stats);
//   OUTBOXD_RETURN_IF_ERROR(session.Open());
//   OUTBOXD_ASSIGN_OR_RETURN(Session::SlotState state, session.InspectSlot());
//   OUTBOXD_RETURN_IF_ERROR(session.CheckSlotForStreaming(state.slot));
//   OUTBOXD_ASSIGN_OR_RETURN(std::unique_ptr<ChangeStream> stream, session.StartStream(lsn));
//   ... each loop turn: OUTBOXD_RETURN_IF_ERROR(session.Upkeep(watermark));
//   session.Close();
#ifndef OUTBOXD_RELAY_SESSION_H_
#define OUTBOXD_RELAY_SESSION_H_

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/stop_signal.h"
#include "outbox/dead_letter.h"
#include "outbox/relay_state.h"
#include "pg/connection.h"
#include "pg/slot.h"
#include "relay/change_stream.h"
#include "relay/dead_letter_gate.h"
#include "relay/position_recorder.h"
#include "relay/relay_options.h"
#include "relay/replication_session.h"
#include "relay/slot_watch.h"
#include "relay/standby_hold.h"

namespace outboxd::relay {

// The feedback timer: the configured interval, shortened to a third of the server's
// wal_sender_timeout (0: none) so a paused reader is never taken for a dead one.
absl::Duration ChooseFeedbackInterval(absl::Duration configured, absl::Duration wal_sender_timeout);
// The stream's receive timeout (--pg-receive-timeout): at least wal_sender_timeout. A
// walsender decoding a large transaction of unpublished tables sends nothing and reads
// our reply requests only every wal_sender_timeout / 2 (PostgreSQL's
// WalSndUpdateProgress); a shorter timeout would take it for a dead path, and each
// reconnect would decode that transaction again, silent again: a relay that never
// gets past it. 0 (off) stays 0.
absl::Duration ChooseReceiveTimeout(absl::Duration configured, absl::Duration wal_sender_timeout);

class Session final : public ReplicationSession {
 public:
  using SlotState = relay::SlotState;

  Session(const RelayOptions& options, RelayStats* stats);

  // A regular connection already open: the next Open() uses it as its control
  // connection instead of opening another.
  void Adopt(pg::Connection conn) override { adopted_control_.emplace(std::move(conn)); }
  // Opens the replication and control connections, and reads the server's history
  // (IDENTIFY_SYSTEM).
  absl::Status Open() override;
  std::string endpoint() const override { return control_->endpoint(); }
  absl::StatusOr<outbox::EmitKey> ReadEmitKey() override;
  // relay/backfill_coordinator.h on this session.
  absl::StatusOr<pg::Lsn> RunBackfill(Pipeline& pipeline, const pg::SlotInfo& slot,
                                      const outbox::BackfillRequest& request,
                                      StopSignal& stop) override;
  // CurrentWalLsn (relay/catch_up.h) on the control connection.
  absl::StatusOr<pg::Lsn> ServerPosition() override;
  // The slot, and a pending backfill: one setup asked for, or, with
  // --recreate-missing-slot, one asked for here when the slot is missing though
  // relays recorded positions for it (a failover to a server without it).
  absl::StatusOr<SlotState> InspectSlot() override;
  // The slot must exist (else NotFound naming the fix, relay/preflight.h), and must
  // not have lost WAL (FailedPrecondition with the recovery); an unreserved one is
  // warned about.
  absl::Status CheckSlotForStreaming(const pg::SlotInfo& slot) override;
  // START_REPLICATION from `start`; the replication connection goes with the stream.
  absl::StatusOr<std::unique_ptr<ChangeStream>> StartStream(pg::Lsn start) override;
  // Why this session's role may not read the slot through SQL, as the bulk catch-up
  // does ("" when it may): CatchUpPlan's Refusal.
  absl::StatusOr<std::string> BulkRefusal() override;
  // The bulk catch-up from `start` up to `target` (relay/bulk_stream.h) on a
  // connection of its own, streaming once there; CatchUpPlan chose it.
  absl::StatusOr<std::unique_ptr<ChangeStream>> StartBulkStream(pg::Lsn start,
                                                                pg::Lsn target) override;
  // While streaming, each loop turn: the slot's wal_status and the recorded position,
  // each when its interval has passed.
  absl::Status Upkeep(pg::Lsn watermark) override;
  // Closes the connections (the stream's went with the pipeline's stream).
  void Close() override;

  // The server's WAL history as of Open(): "<system id>/<timeline>". It changes
  // with a promotion (a failover): LSNs of the old timeline past the switch point
  // name nothing on the new one.
  const std::string& history() const override { return history_; }
  // After a change of history: the horizons queued on the old timeline are dropped.
  void ForgetPositions() override { position_.Forget(); }
  // --standby-slot: how far each named standby has flushed, as last read, in Upkeep
  // every standby_interval (one query for all). What that holds is StandbyHold's.
  const StandbyFlushes& standby_flushes() const override { return standby_flushes_; }
  // --standby-slot: returns once every named standby has flushed past `end`, reading
  // them every standby_interval (Cancelled on a stop). What a backfill publishes was
  // committed before its slot's consistent point: a standby behind it could lose
  // those rows in a failover after they reached the broker.
  absl::Status AwaitStandbys(pg::Lsn end, StopSignal& stop);

  // Valid between Open() and Close(); the replication one until StartStream().
  pg::Connection& control() { return *control_; }
  pg::Connection& replication() { return *replication_; }
  // The dead-letter table, on the control connection.
  DeadLetterTable* dead_letter_table() override { return &dead_letter_table_; }
  const outbox::RelayStateStore& state() const { return state_; }

 private:
  class PgDeadLetterTable final : public DeadLetterTable {
   public:
    // The relay's own letters: filed under its slot, and only those (and letters from
    // before slots were recorded) park its aggregates.
    PgDeadLetterTable(const std::string& outbox_table, const std::string& slot, Session* session)
        : store_(outbox_table, slot), session_(session) {}
    absl::Status Insert(const outbox::DeadLetter& letter) override;
    absl::StatusOr<absl::flat_hash_map<std::string, outbox::FirstDeadLetter>> Aggregates() override;
    absl::StatusOr<absl::Time> Now() override;
    std::string_view name() const override { return store_.table(); }
    void ForgetShape() { store_.ForgetShape(); }

   private:
    outbox::DeadLetterStore store_;
    Session* session_;
  };

  // The control connection, ready for a statement: a slot check in flight on it
  // (SlotWatch) is read first, since running another statement would discard its answer
  // and the check would then end the session ("no answer from the server").
  absl::StatusOr<pg::Connection*> Settled();
  // wal_status "lost": FailedPrecondition with the recovery; "unreserved": a warning.
  absl::Status CheckWalStatus(const pg::SlotInfo& slot);
  // Reads wal_sender_timeout: the feedback interval it allows, and sets
  // stream_receive_timeout_.
  absl::StatusOr<absl::Duration> FeedbackInterval();
  absl::Status IdentifySystem();
  absl::Status ReadStandbys();
  // --recreate-missing-slot: asks for the backfill setup --recreate-slot would.
  absl::StatusOr<std::optional<outbox::BackfillRequest>> RecreateMissingSlot();

  const RelayOptions& options_;
  // --pg-receive-timeout as the stream applies it (ChooseReceiveTimeout), once the
  // server's wal_sender_timeout is read.
  absl::Duration stream_receive_timeout_ = options_.receive_timeout;
  RelayStats* stats_;
  std::optional<pg::Connection> replication_;
  std::optional<pg::Connection> control_;          // regular connection: dead letters, slot checks
  std::optional<pg::Connection> adopted_control_;  // for the first session, if given
  PgDeadLetterTable dead_letter_table_;
  PositionRecorder position_;
  bool slot_seen_ = false;  // this process found the slot (it existed, whatever a new primary says)
  outbox::RelayStateStore state_;
  SlotWatch slot_watch_;
  bool slot_unreserved_ = false;  // as last seen, to warn once per change
  std::string history_;
  std::string database_;  // IDENTIFY_SYSTEM's dbname: the connection's database
  StandbyFlushes standby_flushes_;
  absl::Time next_standby_read_ = absl::InfinitePast();
  std::string standby_problem_;  // as last logged, to warn once per change
};

}  // namespace outboxd::relay

#endif  // OUTBOXD_RELAY_SESSION_H_
