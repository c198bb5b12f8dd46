// The CDC relay: reads the outbox table's inserts from a logical replication slot
// (pgoutput), produces each as a broker message to a sink::Sink (Kafka or RabbitMQ:
// the relay knows only the interface), and confirms the slot only up to the
// AckTracker's watermark.
//
//   PostgreSQL --XLogData--> Decode --> EventMapper --> gate --> Sink.Produce
//        ^                                                          |
//        '-- SendFeedback(flush = watermark) <-- AckTracker <-------' sink::DeliveryReport
//
// One thread. Relay itself is the state machine around sessions (connect, stream,
// reconnect with backoff, stand by while another relay holds the slot, recreate a
// sink after a fatal error, stop); its parts, one job each:
//   relay/session.h               connections, slot checks, feedback interval, stream start
//                                 (behind relay/replication_session.h, scripted in tests)
//   relay/pipeline.h              decode -> map -> gate -> sink, acks, flow control, feedback
//   relay/dead_letter_gate.h      an aggregate's events follow its first dead letter
//   relay/backfill_coordinator.h  rows a new slot will not stream, published before it
//   relay/bulk_stream.h           a backlog read through SQL in chunks, then streaming
// Each loop turn the pipeline reads a batch from the stream (after a large one of old
// transactions it naps 1 ms to let a backlog gather; after live traffic, once nothing
// more waits on the socket, it has the sink send at once), serves delivery reports,
// sends feedback; then the session's chores run, and an idle turn sleeps in select()
// on the stream's socket, the sink's wake fd and the stop signal.
//
//   Relay relay(options, &stats, &stop);
//   absl::Status s = relay.Run();   // returns after stop.Notify() (OK) or an error
#ifndef OUTBOXD_RELAY_RELAY_H_
#define OUTBOXD_RELAY_RELAY_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "base/stop_signal.h"
#include "pg/connection.h"
#include "relay/catch_up.h"
#include "relay/catch_up_plan.h"
#include "relay/dead_letter_gate.h"
#include "relay/pipeline.h"
#include "relay/relay_options.h"
#include "relay/repeated_failure.h"
#include "relay/replication_session.h"

namespace outboxd::relay {

class Relay {
 public:
  // Makes each relay's PostgreSQL side: Session in production, a scripted one in
  // tests (tests/relay/fake_session.h).
  using SessionFactory =
      std::function<std::unique_ptr<ReplicationSession>(const RelayOptions&, RelayStats*)>;
  static std::unique_ptr<ReplicationSession> MakeSession(const RelayOptions& options,
                                                         RelayStats* stats);

  Relay(RelayOptions options, RelayStats* stats, StopSignal* stop,
        SessionFactory make_session = MakeSession);
  ~Relay();

  // Runs until the stop signal (then: stop reading, wait up to shutdown_timeout for
  // in-flight acks, confirm, end the stream, return OK) or an error. A lost stream
  // reconnects with backoff; a slot held by another relay means standing by; a sink
  // that can deliver nothing more (Health() Aborted) is recreated through the
  // SinkFactory, resuming from the watermark. Errors before the first stream, and
  // configuration errors at any time, are returned.
  absl::Status Run();

  // A regular connection already open (the CLI's preflight one): the first session
  // uses it as its control connection instead of opening another; later sessions open
  // their own. Saves one connection's set-up (~40 ms here) before streaming starts.
  void AdoptControlConnection(pg::Connection conn) { session_->Adopt(std::move(conn)); }

 private:
  // Opens a session and hands its stream to the pipeline (after a backfill, if one
  // is pending).
  absl::Status Connect();
  // Streams until the stop signal (OK) or an error.
  absl::Status Loop();
  void EndSession();
  // A session that streamed ended with `status`: RepeatedFailure's count, and when it
  // says stuck, /healthz and the metrics.
  void SessionFailed(const absl::Status& status);
  // Shows RepeatedFailure's state in /healthz and the age and stall metrics.
  void ShowStuck();
  // --standby-slot: which named standbys the held transaction waits for, in the
  // metrics (outboxd_standby_waiting) and /healthz, when that changes.
  void ReportStandbyWait();
  // Waits `duration` or until stopped, serving the sink's reports meanwhile.
  void WaitFor(absl::Duration duration);

  RelayOptions options_;
  RelayStats* stats_;
  StopSignal* stop_;
  std::unique_ptr<ReplicationSession> session_;
  DeadLetterGate gate_;
  Pipeline pipeline_;
  CatchUp catch_up_;
  RepeatedFailure repeated_;
  std::string history_;  // the previous session's server history (Session::history)
  std::string held_by_;  // as last reported by ReportStandbyWait
  CatchUpPlan catch_up_plan_{options_.bulk_catch_up_threshold};  // streamed or in bulk
};

}  // namespace outboxd::relay

#endif  // OUTBOXD_RELAY_RELAY_H_
