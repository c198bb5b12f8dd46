// The CDC relay: reads the outbox table's inserts from a logical replication slot
// (pgoutput), publishes each as a broker message through a sink::Sink (Kafka), and
// confirms the slot only up to the AckTracker's watermark.
//
//   PostgreSQL --XLogData--> Decode --> EventMapper --> Sink.Produce
//        ^                                                   |
//        '-- SendFeedback(flush = watermark) <-- AckTracker <-' delivery reports
//
// One thread: the loop reads a batch from the stream (after a large one it naps 1 ms
// to let a backlog gather; after a small one it has the sink send at once), serves
// delivery reports (Sink::Poll), sends feedback, then sleeps in select() on the
// PostgreSQL socket, the sink's wake fd and the stop signal.
//
//   Relay relay(options, &stats, &stop);
//   absl::Status s = relay.Run();   // returns after stop.Notify() (OK) or an error
#ifndef OUTBOXD_RELAY_RELAY_H_
#define OUTBOXD_RELAY_RELAY_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "observe/health.h"
#include "observe/metrics.h"
#include "outbox/dead_letter.h"
#include "outbox/event.h"
#include "outbox/message_format.h"
#include "outbox/relay_state.h"
#include "pg/replication_stream.h"
#include "pg/slot.h"
#include "pgoutput/decoder.h"
#include "relay/ack_tracker.h"
#include "relay/position_recorder.h"
#include "relay/slot_watch.h"
#include "base/stop_signal.h"
#include "outbox/topic_template.h"
#include "sink/sink.h"

namespace outboxd::relay {

struct RelayOptions {
  std::string conninfo;
  std::string slot = "outboxd";
  std::string publication = "outboxd";
  std::string table = "outbox";  // "name" or "schema.name"
  outbox::ColumnMapping columns;
  std::string topic_template = "{type}";
  // Value format, payload headers and key (--format, --header, --key-pointer).
  outbox::MessageFormat format;
  // Makes the broker sink (again after a fatal error): kafka::Publisher::Factory.
  sink::SinkFactory make_sink;
  absl::Duration feedback_interval = absl::Seconds(10);
  absl::Duration shutdown_timeout = absl::Seconds(30);
  uint64_t max_in_flight = 100000;  // events; reading pauses above it
  // Key, value and header bytes of produced, unacknowledged events; reading pauses
  // above it too, so memory stays bounded whatever the events' size.
  uint64_t max_in_flight_bytes = uint64_t{64} << 20;
  // How often the slot's wal_status is read while streaming (unreserved: warn;
  // lost: stop).
  absl::Duration slot_check_interval = absl::Seconds(5);
  // Test-only: after this many produced events (once per process), raise a fatal
  // idempotent-producer error, to exercise the producer's recreation. 0: never.
  uint64_t test_fatal_error_after = 0;
  // Reconnects after a lost stream: capped exponential backoff with jitter.
  absl::Duration reconnect_base = absl::Milliseconds(200);
  absl::Duration reconnect_cap = absl::Seconds(30);
  // While another relay holds the slot, retry this often.
  absl::Duration standby_poll = absl::Seconds(1);
  // How often the acknowledged position is recorded for cleanup and status.
  absl::Duration position_interval = absl::Seconds(1);
};

// Live figures for /metrics and logs; written by the relay thread only.
struct RelayStats {
  std::atomic<uint64_t> events_published{0};
  std::atomic<uint64_t> events_failed{0};
  std::atomic<uint64_t> events_dead_lettered{0};
  std::atomic<uint64_t> events_in_flight{0};
  std::atomic<uint64_t> received_lsn{0};
  std::atomic<uint64_t> confirmed_lsn{0};
  std::atomic<int64_t> oldest_unacked_commit_us{0};  // 0: nothing unacknowledged
  std::atomic<uint64_t> reconnects{0};
  std::atomic<bool> streaming{false};
  // Events left unacknowledged when the relay stopped (shutdown timeout, brokers
  // down): the next start sends them again.
  std::atomic<uint64_t> events_abandoned{0};
  // Flow control: bytes held for unacknowledged events, and the most events and
  // bytes ever in flight at once (never above the limits by more than one event).
  std::atomic<uint64_t> bytes_in_flight{0};
  std::atomic<uint64_t> events_in_flight_peak{0};
  std::atomic<uint64_t> bytes_in_flight_peak{0};
  // The same figures for /metrics (plus events by topic and the commit-to-ack
  // latency), and /healthz's inputs.
  observe::Metrics metrics{observe::RelayMode::kCdc};
  observe::HealthState health;
};

class Relay {
 public:
  Relay(RelayOptions options, RelayStats* stats, StopSignal* stop);
  ~Relay();

  // Runs until the stop signal (then: stop reading, wait up to shutdown_timeout for
  // in-flight acks, confirm, end the stream, return OK) or an error. A lost stream
  // reconnects with backoff; a slot held by another relay means standing by; a fatal
  // producer error recreates the producer. Errors before the first stream, and
  // configuration errors at any time, are returned.
  absl::Status Run();

  // A regular connection already open (the CLI's preflight one): the first session
  // uses it as its control connection instead of opening another; later sessions open
  // their own. Saves one connection's set-up (~40 ms here) before streaming starts.
  void AdoptControlConnection(pg::Connection conn) { adopted_control_.emplace(std::move(conn)); }

 private:
  // An aggregate with dead letters, and where its first one sits: its events after
  // that point follow it to the table, those before it (replayed after a restart)
  // are published.
  struct DeadAggregate {
    pg::Lsn lsn = 0;  // commit LSN of the first dead letter
    std::string first_id;
    AckTracker::TxId passed_in = 0;  // the transaction in which the relay met it
  };

  absl::Status CreateSink();
  absl::Status Connect();
  void EndSession();
  // wal_status "lost": FailedPrecondition with the recovery; "unreserved": a warning.
  absl::Status CheckWalStatus(const pg::SlotInfo& slot);
  // The periodic wal_status check while streaming, through SlotWatch.
  absl::Status WatchSlot();
  // The feedback timer: the configured interval, shortened to a third of the
  // server's wal_sender_timeout so a paused reader is never taken for a dead one.
  absl::Status ChooseFeedbackInterval(pg::Connection& conn);
  // Flow control: a limit (events or bytes in flight) is reached; stop reading.
  bool InFlightFull() const;
  void WaitFor(absl::Duration duration);
  absl::Status ProducerHealth();
  absl::Status Loop();
  // Reads up to kReadBatch messages; returns how many it read.
  absl::StatusOr<int> ReadBatch(bool& reply_requested);
  absl::Status HandleData(std::string_view data);
  absl::Status HandleRelation(const pgoutput::Relation& relation);
  absl::Status HandleInsert(const pgoutput::Insert& insert);
  // The current transaction's commit time, rendered once per transaction: the
  // created_at of events from a table without a created-at column.
  std::string_view CommitTimeText();
  // One outbox row, from the stream or a backfill: to Kafka, or to the dead letters.
  absl::Status Publish(const outbox::OutboxEvent& event);
  // Creates the slot and publishes the rows `request` covers before it streams;
  // returns the position to stream from.
  absl::StatusOr<pg::Lsn> Backfill(pg::Connection& conn, const pg::SlotInfo& slot,
                                   const outbox::BackfillRequest& request);
  // Serves delivery reports until nothing is in flight (`all`), or until the
  // in-flight limits leave room for one more event.
  absl::Status Drain(bool all);
  // `payload`: the event's own, for a dead letter (the value may be encoded).
  absl::Status Produce(const sink::OutgoingMessage& message, std::string_view payload);
  // Flow-control peaks, and the test-only fatal error.
  void AfterProduce();
  // Stores an event that can never be published in the dead-letter table, then
  // counts it as handled (acknowledged) so the watermark moves past it. The letter
  // keeps `payload`, not the encoded value, so a replay encodes it again.
  absl::Status DeadLetter(const sink::OutgoingMessage& message, std::string_view payload,
                          const absl::Status& error);
  absl::Status RefreshDeadAggregates();
  // Whether `event`, of an aggregate with dead letters, comes after the first one.
  bool FollowsDeadLetter(DeadAggregate& dead, std::string_view event_id);
  void OnDelivery(const sink::DeliveryReport& report);
  void RecordAck(const sink::DeliveryReport& report);
  absl::Status MaybeSendFeedback(bool force);
  absl::Status Shutdown();
  // Drops what the producer still holds, unreported (it is sent again after a
  // restart), and destroys it: the last step of a stop.
  void CloseProducer();
  void Wait(bool want_stream, absl::Duration timeout);
  void PublishStats();
  bool IsOutboxTable(const pgoutput::Relation& relation) const;

  RelayOptions options_;
  RelayStats* stats_;
  StopSignal* stop_;
  outbox::TopicTemplate topic_;
  std::string table_name_;    // unqualified, for {table}
  std::string table_schema_;  // empty: any schema

  std::unique_ptr<pg::ReplicationStream> stream_;
  std::optional<pg::Connection> control_;  // regular connection: dead letters, slot checks
  std::optional<pg::Connection> adopted_control_;  // for the first session, if given
  outbox::DeadLetterStore dead_letters_;
  absl::flat_hash_map<std::string, DeadAggregate> dead_aggregates_;
  absl::Time dead_refreshed_ = absl::InfinitePast();
  absl::Status pending_error_;  // raised in a delivery callback, returned by the loop
  std::unique_ptr<sink::Sink> sink_;
  AckTracker tracker_;
  PositionRecorder position_;
  outbox::RelayStateStore state_;
  pgoutput::RelationCache relations_;
  outbox::EventMapper mapper_;
  outbox::MessageEncoder encoder_;  // checks the payload too
  pgoutput::Message message_;  // reused across DecodeInto calls
  uint32_t outbox_relation_id_ = 0;
  bool warned_foreign_insert_ = false;

  SlotWatch slot_watch_;
  bool slot_unreserved_ = false;  // as last seen, to warn once per change
  absl::Duration feedback_interval_;
  uint64_t produced_ = 0;  // events handed to producers, for test_fatal_error_after
  uint64_t events_in_flight_peak_ = 0;
  uint64_t bytes_in_flight_peak_ = 0;

  // Current transaction.
  AckTracker::TxId tx_ = 0;
  pg::Lsn tx_lsn_ = 0;
  std::string tx_lsn_text_;  // commit LSN "X/Y" for the lsn header
  int64_t tx_commit_us_ = 0;    // Unix microseconds
  std::string tx_commit_text_;  // "" until CommitTimeText() renders it

  pg::Lsn received_ = 0;
  pg::Lsn last_sent_flush_ = 0;
  absl::Time last_feedback_ = absl::InfinitePast();

  // Reused per event.
  std::string topic_buffer_;
};

}  // namespace outboxd::relay

#endif  // OUTBOXD_RELAY_RELAY_H_
