// What a CDC relay is configured with (RelayOptions, from `outboxd run`'s flags) and
// what it reports while running (RelayStats: the metrics and health the HTTP endpoint
// serves, and the few figures the CLI reads after Run() returns). Shared by the
// relay's parts (relay/session.h, relay/pipeline.h, relay/backfill_coordinator.h).
#ifndef OUTBOXD_RELAY_RELAY_OPTIONS_H_
#define OUTBOXD_RELAY_RELAY_OPTIONS_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "observe/health.h"
#include "observe/metrics.h"
#include "outbox/event.h"
#include "outbox/message_format.h"
#include "sink/sink.h"

namespace outboxd::relay {

// Where events come from (--source): outbox rows, transactional logical decoding
// messages written by outboxd_emit (outbox/emitted_event.h), or both, in commit order.
enum class Source { kTable, kMessages, kBoth };

// --dedupe (relay/resume_dedupe.h): auto (read back where the sink can; a broker that
// cannot be read back, RabbitMQ, or a topic that cannot, is a one-line notice), on (the
// same, each fallback a warning; the CLI refuses it for a sink that cannot read back),
// off.
enum class Dedupe { kAuto, kOn, kOff };

struct RelayOptions {
  std::string conninfo;
  std::string slot = "outboxd";
  std::string publication = "outboxd";
  std::string table = "outbox";  // "name" or "schema.name"
  outbox::ColumnMapping columns;
  std::string topic_template = "{type}";
  Source source = Source::kTable;
  // --source messages|both on a server where max_slot_wal_keep_size can remove WAL the
  // slot still needs: accepted only when asked for, since no table can backfill a
  // message the slot lost (--allow-wal-only-with-slot-limit).
  bool allow_wal_only_with_slot_limit = false;
  // After a (re)connect, skip the events of the re-read window the broker already holds.
  Dedupe dedupe = Dedupe::kAuto;
  // Value format, payload headers and key (--format, --header, --key-pointer).
  outbox::MessageFormat format;
  // Makes the broker sink (again after a fatal error): kafka::Publisher::Factory or
  // sink::FactoryOf(&amqp::NewSink, ...), as the CLI's --sink chose; the relay sees only
  // sink::Sink.
  sink::SinkFactory make_sink;
  absl::Duration feedback_interval = absl::Seconds(10);
  // How long PostgreSQL may stay silent (the stream, or an answer on the control
  // connection) before the connection is given up as dead and opened again
  // (--pg-receive-timeout; 0: never). A walsender answers a reply request at once,
  // and the relay asks at least every feedback interval (and at half of this), so
  // 30 s of silence is a dead path, not a busy server: a blackhole is noticed in
  // 30 s plus the reconnect, where TCP would wait for its retransmissions.
  absl::Duration receive_timeout = absl::Seconds(30);
  absl::Duration shutdown_timeout = absl::Seconds(30);
  uint64_t max_in_flight = 100000;  // events; reading pauses above it (run's default with Kafka)
  // Key, value and header bytes of produced, unacknowledged events; reading pauses
  // above it too, so memory stays bounded whatever the events' size.
  uint64_t max_in_flight_bytes = uint64_t{64} << 20;
  // run's --max-in-flight default with --sink rabbitmq. A queue confirms at the
  // broker's pace (one Erlang process per queue, ~20,000 events/s here), so a backlog
  // ahead of it only costs memory: draining 100,000 single-row transactions, six runs
  // alternating, 10,000 in flight took 6.0-6.9 s against 5.8-6.9 s with 100,000, at a
  // peak RSS of 21.9 against 45-47 MiB (the sink keeps each unconfirmed message to
  // publish it again after a reconnect).
  static constexpr uint64_t kAmqpMaxInFlight = 10000;
  // How often the slot's wal_status is read while streaming (unreserved: warn;
  // lost: stop).
  absl::Duration slot_check_interval = absl::Seconds(5);
  // Test-only: after this many produced events (once per process), make the sink fail
  // as on a fatal error (Sink::RaiseFatalErrorForTesting; Kafka: a fatal
  // idempotent-producer error), to exercise the sink's recreation. 0: never.
  uint64_t test_fatal_error_after = 0;
  // Reconnects after a lost stream: capped exponential backoff with jitter.
  absl::Duration reconnect_base = absl::Milliseconds(200);
  absl::Duration reconnect_cap = absl::Seconds(30);
  // While another relay holds the slot, retry this often.
  absl::Duration standby_poll = absl::Seconds(1);
  // How often the acknowledged position is recorded for cleanup and status.
  absl::Duration position_interval = absl::Seconds(1);
  // A slot missing while the relay-state table records positions for it (a failover
  // to a server without it): re-create it and republish the rows after the last
  // acknowledged position (--recreate-missing-slot), instead of exiting 2.
  bool recreate_missing_slot = false;
  // Physical slots of standbys (--standby-slot): a transaction goes to the sink only
  // once every one has flushed past its commit, read every standby_interval.
  std::vector<std::string> standby_slots;
  absl::Duration standby_interval = absl::Milliseconds(20);
  // A session that finds at least this much WAL between its resume position and the
  // server's catches up through SQL (relay/bulk_stream.h), then streams
  // (--bulk-catch-up; 0: always stream). Below it the walsender's start-up and pace
  // are as good: 16 MiB is about 65,000 single-row transactions' WAL here.
  uint64_t bulk_catch_up_threshold = uint64_t{16} << 20;
  // Changes per peek (--bulk-catch-up-chunk; 0: the whole backlog in one). Every peek
  // decodes again from the slot's restart_lsn, which moves only at running_xacts
  // records (every 15 s of writing, and checkpoints): smaller chunks re-decode the
  // same WAL more often; a larger one spills a bigger result to server temp files
  // (23 MB measured for 300,000 changes of single-row transactions). Measured on a
  // 100,000-transaction backlog (300,000 changes, load 11 on 2 cores), SQL alone, peek
  // and advance: one peek 1.0-1.2 s, 300,000 per peek 1.4-1.9 s, 100,000 1.4-1.6 s,
  // 50,000 1.4-1.6 s, 20,000 1.9-2.5 s, 10,000 2.9 s. The relay's drain
  // (scripts/bench --only-catchup, load 5): chunks of 100,000 2.38-2.62 s, one peek
  // 1.58-1.73 s, streaming 2.95-3.57 s, pg_recvlogical 2.89 s. Within a chunk the slot
  // is advanced every 5 s (relay/bulk_stream.cc), so a large one does not widen what
  // a crash sends again.
  int64_t bulk_catch_up_chunk = 500000;
};

// Live figures: observe::Metrics and observe::HealthState are their one home (/metrics,
// /healthz, logs). The three atomics are what `outboxd run` reads once Run() has
// returned (src/cli/run_command.cc): whether an error came before any streaming, and
// how many events a stop left to be sent again.
struct RelayStats {
  std::atomic<uint64_t> confirmed_lsn{0};
  std::atomic<bool> streaming{false};
  // Events left unacknowledged when the relay stopped (shutdown timeout, brokers
  // down): the next start sends them again.
  std::atomic<uint64_t> events_abandoned{0};
  observe::Metrics metrics{observe::RelayMode::kCdc};
  observe::HealthState health;
};

}  // namespace outboxd::relay

#endif  // OUTBOXD_RELAY_RELAY_OPTIONS_H_
