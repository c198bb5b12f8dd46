// The polling relay: the transactional-outbox relay of the pattern, for databases
// that cannot give a replication slot and as the baseline the CDC relay is measured
// against. One PostgreSQL transaction per batch:
//
//   BEGIN
//   SELECT due pending rows, oldest pending per aggregate, ORDER BY seq LIMIT batch
//          FOR UPDATE OF o SKIP LOCKED                      (several relays in parallel)
//   produce them all, wait for every delivery report (bounded by publish_timeout)
//   UPDATE acknowledged rows: publicado_em; failed rows: tentativas + 1, ultimo_erro,
//          proxima_tentativa_em = 2^tentativas s later (at most 300 s)
//   COMMIT
//
// A crash between the broker's ack and COMMIT rolls the marks back. With --dedupe the
// next batch to reserve such a row (kInterrupted in internal/outbox_queries.h) asks
// the broker first (sink::Sink::Held: Kafka reads the topic back for this table's
// messages, the outboxd_slot header naming the poller) and records it as published
// when its message is there. Otherwise, and on brokers that cannot be read back, at
// least once: consumers drop repeats by the `id` header.
//
//   PollRelay relay(PollOptions{.conninfo = "host=db dbname=app",
//                               .make_sink = kafka::Publisher::Factory({.brokers = "kafka:9092"})},
//                   &stats);
//   absl::StatusOr<int> reserved = relay.RunOnce();   // one batch
//   absl::Status s = relay.Run(&stop);                // until stop.Notify()
#ifndef OUTBOXD_POLL_POLL_RELAY_H_
#define OUTBOXD_POLL_POLL_RELAY_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "observe/health.h"
#include "observe/metrics.h"
#include "outbox/event.h"
#include "outbox/message_format.h"
#include "pg/connection.h"
#include "poll/columns.h"
#include "base/stop_signal.h"
#include "outbox/topic_template.h"
#include "sink/sink.h"

namespace outboxd::poll {

namespace internal {
struct OutboxQueries;  // internal/outbox_queries.h: the SQL, built once per connection
}  // namespace internal

struct PollOptions {
  std::string conninfo;
  std::string table = "outbox";  // "name" or "schema.name"
  outbox::ColumnMapping columns;
  PollColumns poll_columns;
  std::string topic_template = "{type}";
  // Value format, payload headers and key (--format, --header, --key-pointer). An
  // event without its key field counts as a failed attempt, like a poison payload.
  outbox::MessageFormat format;
  // The broker (kafka::Publisher::Factory). The relay asks it for a delivery timeout
  // of publish_timeout, so a failed attempt leaves nothing queued that could still
  // reach the broker later and duplicate the retry.
  sink::SinkFactory make_sink;
  int batch = 50;
  // Sleep after a batch that reserved nothing.
  absl::Duration interval = absl::Milliseconds(500);
  // How long one batch waits for its delivery reports; an event not acknowledged by
  // then counts as a failed attempt, never as published.
  absl::Duration publish_timeout = absl::Seconds(30);
  // LISTEN on `channel` and end the sleep when a NOTIFY arrives (needs a trigger on
  // the table, see notify_trigger.h).
  bool notify = false;
  std::string channel = "outboxd_outbox";
  // --dedupe: every message carries the outboxd_slot header "<database>/poll:<schema>.
  // <table>", and an interrupted batch's row is looked for at the broker before it is
  // sent again. False: unmarked, at least once.
  bool dedupe = true;
};

// Live figures for /metrics and logs; written by the relay thread only.
struct PollStats {
  std::atomic<uint64_t> events_published{0};
  std::atomic<uint64_t> events_failed{0};
  std::atomic<uint64_t> batches{0};
  std::atomic<bool> healthy{false};  // the last batch reached COMMIT
  // The same figures for /metrics (plus events by topic, the created-to-ack latency
  // and the oldest pending row's age), and /healthz's inputs.
  observe::Metrics metrics{observe::RelayMode::kPoll};
  observe::HealthState health;
};

class PollRelay {
 public:
  PollRelay(PollOptions options, PollStats* stats);
  ~PollRelay();
  PollRelay(const PollRelay&) = delete;
  PollRelay& operator=(const PollRelay&) = delete;

  // Connects, checks the table and its columns, creates the producer and LISTENs.
  // RunOnce() and Run() call it when needed; call it first to tell configuration
  // errors (missing table or column: NotFound) from later, transient ones.
  absl::Status Start();

  // One batch, one transaction. Returns how many rows it reserved (published or
  // failed). On error the transaction is rolled back and the rows stay as they were.
  absl::StatusOr<int> RunOnce();

  // Runs batches until `stop` is notified; the batch in progress is finished first.
  // Transient errors (PostgreSQL restart, network) are logged and retried after a
  // pause with a new connection; configuration errors are returned.
  absl::Status Run(StopSignal* stop);

 private:
  // One reserved row and what became of it.
  struct Pending {
    int64_t seq = 0;
    std::string id;
    std::optional<absl::Time> created_at;  // for the latency metric
    std::optional<absl::Status> outcome;  // unset: no delivery report yet
  };

  // Table, columns and (with --notify) the channel, before any connection.
  absl::Status CheckNames() const;
  absl::Status Connect();
  absl::Status CreateSink();
  absl::StatusOr<int> ReserveAndPublish();
  absl::Status ProduceRow(const pg::Result& rows, int row, absl::Time deadline);
  // --dedupe: whether the broker holds this interrupted row's message already.
  absl::StatusOr<bool> AlreadyPublished(const sink::OutgoingMessage& message, std::string_view id);
  // A batch's rows that an interrupted batch held: a new read-back window when there
  // are any, bounded by the earliest of their created-at.
  void FindInterrupted(const pg::Result& rows);
  // The first answer about a topic in a batch: its fallbacks, logged and counted.
  void ReportFallbacks(std::string_view topic, const sink::HeldAnswer& answer);
  void AwaitReports(absl::Time deadline);
  void OnDelivery(const sink::DeliveryReport& report);
  absl::Status RecordOutcomes();
  void CountAndLog(size_t published);
  // The in-flight figure, the same for /metrics' gauge and /healthz (which also gets
  // the failed attempts since the last acknowledgement, from CountAndLog).
  void PublishInFlight(int in_flight);
  // The oldest pending row's age, read at most every few seconds (one index probe).
  void SampleOldestPending();
  // What ends a sleep before its timeout: the stop signal, and (with --notify, after
  // an empty batch) a NOTIFY on the channel; never a NOTIFY while the connection is
  // being replaced.
  enum class Wake { kOnStop, kOnStopOrNotify };
  void Sleep(absl::Duration timeout, StopSignal* stop, Wake wake);
  bool DrainNotifications();

  PollOptions options_;
  PollStats* stats_;
  outbox::TopicTemplate topic_;
  std::string table_name_;  // unqualified, for {table}
  std::unique_ptr<const internal::OutboxQueries> queries_;
  std::optional<pg::Connection> conn_;
  std::unique_ptr<sink::Sink> sink_;
  outbox::MessageEncoder encoder_;  // checks the payload too
  // The headers the encoder dropped (a malformed trace context), counted and logged.
  outbox::DroppedHeadersLog dropped_headers_{
      [this](std::string_view header, std::string_view reason) {
        stats_->metrics.HeaderDropped(header, reason);
      }};

  // The batch in progress. Tags are unique over the relay's life, so a report for a
  // message of an earlier batch (acknowledged after that batch gave up on it) is
  // recognised and ignored.
  std::vector<Pending> batch_;
  uint64_t first_tag_ = 0;
  uint64_t next_tag_ = 1;
  int unreported_ = 0;
  // Failed attempts (any cause) since the last acknowledgement: they keep /healthz's
  // stall clock running between batches, when nothing is in flight.
  uint64_t failures_since_ack_ = 0;
  std::string oldest_pending_query_;
  // --dedupe: this poller's mark, the read-back window (one per batch that asks) and
  // the earliest time its messages can have been made, the topics whose fallbacks that
  // window said, and whether the sink cannot be read back.
  std::string mark_;
  uint64_t held_window_ = 0;
  int64_t not_before_ms_ = 0;
  std::vector<std::string> reported_topics_;
  bool unreadable_ = false;
  absl::Time oldest_sampled_ = absl::InfinitePast();

  // Reused per event.
  std::string topic_buffer_;
};

}  // namespace outboxd::poll

#endif  // OUTBOXD_POLL_POLL_RELAY_H_
