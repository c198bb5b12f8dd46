// Pipeline: the relay's data path. Messages from the ChangeStream are decoded
// (pgoutput) and mapped to outbox events by the TransactionIntake
// (relay/transaction_intake.h), passed through the DeadLetterGate and handed to the
// sink; the AckTracker turns the sink's delivery reports into the position
// confirmed back to the stream. Flow control (reading pauses at the in-flight event
// and byte limits) and sending the feedback relay/feedback_rule.h decides live here
// too. It opens no connection: the session hands it each stream (relay/session.h),
// so tests drive it with a scripted stream and a fake sink (tests/relay/).
//
//   PostgreSQL --XLogData--> Decode --> EventMapper --> gate --> Sink.Produce
//        ^                                                          |
//        '-- SendFeedback(flush = watermark) <-- AckTracker <-------' delivery reports
//
//   Pipeline pipeline(options, &gate, &stats, &stop);
//   OUTBOXD_RETURN_IF_ERROR(pipeline.Start());                       // makes the sink
//   pipeline.Stream(std::move(stream), pipeline.ResumeFrom(slot_confirmed), interval);
//   while (...) {
//     OUTBOXD_ASSIGN_OR_RETURN(Pipeline::Turn turn, pipeline.Step());
//     if (turn == Pipeline::Turn::kIdle) pipeline.WaitForWork();
//   }
#ifndef OUTBOXD_RELAY_PIPELINE_H_
#define OUTBOXD_RELAY_PIPELINE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/stop_signal.h"
#include "outbox/emitted_event.h"
#include "outbox/event.h"
#include "outbox/message_format.h"
#include "outbox/topic_template.h"
#include "pg/lsn.h"
#include "relay/ack_tracker.h"
#include "relay/change_stream.h"
#include "relay/dead_letter_gate.h"
#include "relay/feedback_rule.h"
#include "relay/relay_options.h"
#include "relay/repeated_failure.h"
#include "relay/resume_dedupe.h"
#include "relay/standby_hold.h"
#include "relay/transaction_intake.h"
#include "sink/sink.h"

namespace outboxd::relay {

// Why a turn's read ended: the stream had nothing more (or flow control or a held
// transaction stopped it), or the turn's limit of messages or bytes was reached.
enum class ReadEnd { kStreamIdle, kTurnLimit };

// How long the loop naps after a backlog read (Pipeline::Pace): longer while the
// stream is below the position the session caught up to (Pipeline::CatchUpTo), none
// after a read that stopped at the turn's limit, since more is waiting already.
absl::Duration BacklogNap(ReadEnd end, pg::Lsn received, pg::Lsn catch_up_to);

class Pipeline final : private IntakeTarget {
 public:
  using Clock = std::function<absl::Time()>;
  // How the loop naps (Pace); tests pass one that records the naps.
  using Sleep = std::function<void(absl::Duration)>;
  // What a Step() did: read messages (go on at once), or found none (wait for work).
  enum class Turn { kRead, kIdle };
  // How long Drain() serves delivery reports.
  enum class DrainUntil { kRoomForOne, kNothingInFlight };

  // `clock` is what feedback timing, refresh timing and latency figures read, `sleep`
  // what a backlog nap calls; tests pass their own.
  Pipeline(const RelayOptions& options, DeadLetterGate* gate, RelayStats* stats, StopSignal* stop,
           Clock clock = absl::Now, Sleep sleep = absl::SleepFor);
  ~Pipeline() override;

  // Parses the topic template and makes the first sink.
  absl::Status Start();
  // Makes a new sink, then closes the old one without a flush: what it held is
  // dropped, unreported, as a kill -9 would drop it. Returns how many messages that
  // was. After a fatal sink error (Aborted), and at a session's end (EndSession).
  absl::StatusOr<int> RecreateSink();

  // Where a new session streams from: the slot's confirmed position, or further if
  // this process had already acknowledged more (the watermark never goes back).
  pg::Lsn ResumeFrom(pg::Lsn slot_confirmed);
  // The server's history changed (a promotion): forgets the positions acknowledged
  // on the old timeline, so the next ResumeFrom or BeginBackfill takes the slot's.
  // Kept, a position past the new timeline's switch point would skip its WAL up to
  // there, in START_REPLICATION and in the feedback that confirms the slot.
  void ForgetPosition();
  // Takes the session's stream, started at `start`, and its feedback interval.
  void Stream(std::unique_ptr<ChangeStream> stream, pg::Lsn start,
              absl::Duration feedback_interval);
  // The session started behind: the server's WAL was at `server` when it connected.
  // Until the stream has been read that far, a turn reads more and a backlog read
  // naps longer (Pace), so each produce request carries more events. Stream()
  // forgets it.
  void CatchUpTo(pg::Lsn server) { catch_up_to_ = server; }
  // One turn of the loop: read a batch, serve delivery reports, send feedback.
  absl::StatusOr<Turn> Step();
  // Sleeps until the stream (unless flow control holds it), the sink or the stop
  // signal has something, or feedback falls due.
  void WaitForWork();
  // Waits `duration` or until stopped, serving delivery reports meanwhile (standing
  // by, backing off between sessions).
  void IdleFor(absl::Duration duration);
  // The session is over (lost stream, fatal sink error): waits briefly for reports
  // of what was produced (AwaitLastReports), drops from the sink what is still
  // unreported (DropSinkBacklog), and forgets it: the next session sends it again.
  void EndSession();
  // A stop: waits up to shutdown_timeout for the in-flight acks, sends the final
  // feedback and ends the stream.
  absl::Status Shutdown();
  // Drops what the sink still holds, unreported (sent again after a restart), and
  // destroys it: the last step of a stop.
  void CloseSink();

  // Backfill (relay/backfill_coordinator.h): the rows form one tracked transaction
  // ending at the new slot's consistent point.
  void BeginBackfill(pg::Lsn consistent_point);
  absl::Status PublishBackfilled(const outbox::OutboxEvent& event);
  absl::Status EndBackfill(pg::Lsn consistent_point);

  // --standby-slot: how far the named standbys have flushed (Session::standby_flushes).
  // A transaction is held, and reading with it, until every one passed its commit.
  void SetStandbys(const StandbyFlushes& standbys) { hold_.SetStandbys(standbys); }
  bool holding() const { return hold_.committed(); }
  // What is held and whom it waits for (relay/standby_hold.h).
  const StandbyHold& standby_hold() const { return hold_; }

  // Where the session is, for RepeatedFailure when it fails: call before EndSession.
  FailurePoint failure_point() const {
    return {.position = tracker_.watermark(), .commit_us = tracker_.unconfirmed_commit_time()};
  }
  // RepeatedFailure found the relay stuck on a transaction committed at `commit_us`
  // (nullopt: not stuck): /metrics counts one event in flight since then, so the age
  // and stall alerts see what no session gets past.
  void SetStuck(std::optional<int64_t> commit_us) {
    stuck_commit_us_ = commit_us;
    PublishStats();
  }

  // --source messages|both: the key outboxd_emit signs with (outbox/emit_key.h), read
  // by each session; a message it did not sign is rejected, never published.
  void SetEmitKey(outbox::EmitKey key) { intake_.SetEmitKey(std::move(key)); }

  // The outboxd_slot header (outbox::SlotMark) on every message from now on.
  void SetSlotMark(std::string mark) {
    slot_mark_ = mark;
    encoder_.SetSlotMark(std::move(mark));
  }
  // --dedupe: the stream resumed at `start` while the server's WAL was at `server`;
  // what lies between may already be at the broker (relay/resume_dedupe.h).
  void ResumeWindow(pg::Lsn start, pg::Lsn server) {
    dedupe_.Begin({.since = start,
                   .until = server,
                   .mark = slot_mark_,
                   .max_messages = ReadBackLimit(options_.max_in_flight)});
  }

  pg::Lsn watermark() const { return tracker_.watermark(); }
  pg::Lsn received() const { return received_; }  // newest position read from the stream
  uint64_t events_in_flight() const { return tracker_.events_in_flight(); }

 private:
  struct Batch {
    int read = 0;
    bool reply_requested = false;  // a keepalive asked for an answer at once
    ReadEnd end = ReadEnd::kStreamIdle;
  };

  absl::StatusOr<Batch> ReadBatch();
  // --standby-slot: a message of the current transaction into hold_ (ReadBatch takes
  // them out once the standbys have its commit).
  absl::Status Hold(std::string_view data);
  // Catching up: nap so a backlog gathers; live traffic: have the sink send now,
  // without waiting for it.
  void Pace(const Batch& batch);
  // Delivery reports, the sink's health, errors raised in a delivery callback.
  absl::Status ServeDeliveries();
  // Serves delivery reports until nothing is in flight, or until the in-flight
  // limits leave room for one more event.
  absl::Status Drain(DrainUntil until);
  // Flow control: a limit (events or bytes in flight) is reached; stop reading.
  bool InFlightFull() const;
  // IntakeTarget: the AckTracker's transactions; one outbox event, from the stream or a
  // backfill: to the sink, or to the dead letters.
  AckTracker::TxId BeginTransaction(pg::Lsn commit_lsn, int64_t commit_us) override;
  void CommitTransaction(pg::Lsn end_lsn) override;
  absl::Status Publish(const outbox::OutboxEvent& event, Transaction& tx) override;
  absl::Status DeadLetterRow(const outbox::OutboxEvent& event, const Transaction& tx,
                             const absl::Status& error) override;
  // `event`: its payload and headers, for a dead letter (the value may be encoded).
  absl::Status Produce(const sink::OutgoingMessage& message, const outbox::OutboxEvent& event,
                       Transaction& tx);
  void ObservePickup(Transaction& tx);  // its first event: outboxd_pickup_seconds
  void LogSent(const sink::OutgoingMessage& message, const Transaction& tx);  // --log-level debug
  // One line for the dead letters that followed an already parked aggregate since the
  // last one: every kFollowersLogInterval, or `now`.
  void LogParkedFollowers(bool now);
  // Flow-control peaks, and the test-only fatal error.
  void AfterProduce();
  // Stores an event that can never be published in the dead-letter table, then
  // counts it as handled (acknowledged) so the watermark moves past it. The letter
  // keeps `payload`, not the encoded value, so a replay encodes it again, and the
  // row's `headers` (their JSON text).
  absl::Status DeadLetter(const sink::OutgoingMessage& message, std::string_view payload,
                          std::string_view headers, const absl::Status& error);
  absl::Status SinkHealth() const;
  void OnDelivery(const sink::DeliveryReport& report);
  void RecordAck(const sink::DeliveryReport& report);
  // Sends what the FeedbackRule says is due.
  absl::Status SendFeedback(FeedbackRule::Urgency urgency);
  void PublishStats();
  // EndSession: reports for what is already sent still count, so wait for them while
  // they keep coming (kEndSessionGrace at most, kReportGap without one: a broker that
  // is down or fails every request is not waited for).
  void AwaitLastReports();
  // EndSession: whatever the sink still holds must never reach the broker later, for
  // the slot is free now and another relay may take it and read the broker back at
  // once (relay/resume_dedupe.h). A new sink replaces it (RecreateSink). Purging only
  // the unsent queue would not do: a request on the wire, retried, could then overtake
  // what was purged and break an aggregate's order.
  void DropSinkBacklog();

  const RelayOptions& options_;
  DeadLetterGate* gate_;
  RelayStats* stats_;
  StopSignal* stop_;
  Clock clock_;
  Sleep sleep_;
  outbox::TopicTemplate topic_;
  std::string table_name_;  // unqualified, for {table}

  std::unique_ptr<ChangeStream> stream_;
  std::unique_ptr<sink::Sink> sink_;
  absl::Status pending_error_;  // raised in a delivery callback, returned by Step()
  AckTracker tracker_;
  outbox::MessageEncoder encoder_;  // checks the payload too
  TransactionIntake intake_;        // decode, the current transaction, row -> event

  uint64_t produced_ = 0;  // events handed to sinks, for test_fatal_error_after
  uint64_t events_in_flight_peak_ = 0;
  uint64_t bytes_in_flight_peak_ = 0;

  uint64_t followers_unlogged_ = 0;  // LogParkedFollowers
  absl::Time followers_logged_at_ = absl::InfinitePast();
  // The headers the encoder dropped (a malformed trace context), counted and logged.
  outbox::DroppedHeadersLog dropped_headers_{
      [this](std::string_view header, std::string_view reason) {
        stats_->metrics.HeaderDropped(header, reason);
      }};

  pg::Lsn received_ = 0;
  pg::Lsn catch_up_to_ = 0;  // CatchUpTo
  FeedbackRule feedback_{options_.feedback_interval};

  std::string topic_buffer_;  // reused per event

  // --standby-slot: the transaction kept back until the standbys have it (ReadBatch
  // takes its messages out once they do).
  StandbyHold hold_{options_.max_in_flight_bytes};

  std::optional<int64_t> stuck_commit_us_;  // SetStuck

  std::string slot_mark_;  // SetSlotMark
  ResumeDedupe dedupe_{options_.dedupe, &stats_->metrics};
};

}  // namespace outboxd::relay

#endif  // OUTBOXD_RELAY_PIPELINE_H_
