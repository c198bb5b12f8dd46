// outboxd run: the CDC relay, with /metrics and /healthz and the cleanup job.
#include <cstdint>
#include <limits>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/startup_retry.h"
#include "base/status_macros.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/relay_flags.h"
#include "observe/endpoints.h"
#include "observe/http_server.h"
#include "observe/query_sampler.h"
#include "observe/stall_watch.h"
#include "ops/cleanup.h"
#include "outbox/topic_template.h"
#include "pg/connection.h"
#include "pg/identifier.h"
#include "relay/preflight.h"
#include "relay/relay.h"
#include "relay/resume_dedupe.h"

namespace outboxd::cli {
namespace {

// Its line in `outboxd --help`.
constexpr char kRunSummary[] =
    "Relay outbox inserts from the WAL to Kafka, RabbitMQ or NATS JetStream";
// The WAL the slot retains, for outboxd_slot_lag_bytes: one row of a system view.
constexpr char kSlotLagQuery[] =
    "SELECT (pg_current_wal_lsn() - confirmed_flush_lsn)::float8 FROM pg_replication_slots "
    "WHERE slot_name = $1";
constexpr absl::Duration kSlotLagInterval = absl::Seconds(5);

struct RunCommand {
  relay::RelayOptions options;
  RelayFlags flags{.metrics = "127.0.0.1:9187"};  // the sink: options.make_sink
  DurationFlag feedback_interval{"10s"};
  DurationFlag receive_timeout{"30s"};
  DurationFlag shutdown_timeout{"30s"};
  DurationFlag cleanup_interval{"1h"};
  int partitions_ahead = 3;
  DurationFlag retention{"7d"};
  DurationFlag inbox_retention{"30d"};
  DurationFlag slot_check_interval{"5s"};
  DurationFlag healthz_stall{"30s"};
  relay::PreflightFindings findings;
  std::string source = "table";
  std::string dedupe = "auto";
  // Not given (by flag, variable or file): the sink's default, set in CheckFlags.
  static constexpr uint64_t kSinkDefault = std::numeric_limits<uint64_t>::max();
  uint64_t max_in_flight = kSinkDefault;

  CLI::App* Register(CLI::App& app) {
    CLI::App* cmd = AddRelayCommand(app, "run", kRunSummary, options.conninfo);
    Flag(cmd, "slot", options.slot, "Logical replication slot")->capture_default_str();
    Flag(cmd, "publication", options.publication, "Publication")->capture_default_str();
    AddOutboxFlags(cmd, options.table, options.topic_template);
    Flag(cmd, "source", source,
         "Where events come from: table (outbox rows), messages (outboxd_emit's WAL-only "
         "events: no table, so no backfill after a lost slot) or both, in commit order")
        ->check(CLI::IsMember({"table", "messages", "both"}))
        ->capture_default_str();
    Switch(cmd, "allow-wal-only-with-slot-limit", options.allow_wal_only_with_slot_limit,
           "Run --source messages or both although max_slot_wal_keep_size lets PostgreSQL "
           "remove WAL the slot needs: emitted events in it are then lost for good");
    AddRelayFlags(cmd, flags, options.columns);
    AddHeadersColumnFlag(cmd, options.columns);
    Flag(cmd, "max-in-flight", max_in_flight, "Pause reading above this many unacked events")
        ->default_str("100000; 10000 with --sink rabbitmq or nats");
    Flag(cmd, "max-in-flight-bytes", options.max_in_flight_bytes,
         "Pause reading above this many bytes (key+value+headers) of unacked events, e.g. 64MiB")
        ->transform(CLI::AsSizeValue(false))
        ->default_str("64MiB");
    Flag(cmd, "feedback-interval", feedback_interval, "Status update interval")
        ->capture_default_str();
    Flag(cmd, "pg-receive-timeout", receive_timeout,
         "Reconnect when PostgreSQL sends nothing for this long though asked to reply (a "
         "half-open connection: a dead host, NAT box or proxy); the stream's is at least the "
         "server's wal_sender_timeout; 0s: never")
        ->capture_default_str();
    Flag(cmd, "shutdown-timeout", shutdown_timeout, "Wait for in-flight acks on SIGTERM")
        ->capture_default_str();
    Flag(cmd, "cleanup-interval", cleanup_interval,
         "Run outboxd cleanup this often (0s: never)")
        ->capture_default_str();
    Flag(cmd, "retention", retention, "Cleanup: acknowledged outbox rows older than this")
        ->capture_default_str();
    Flag(cmd, "inbox-retention", inbox_retention,
         "Cleanup: inbox rows processed longer ago than this")
        ->capture_default_str();
    Flag(cmd, "partitions-ahead", partitions_ahead,
         "Cleanup, on a partitioned outbox or inbox: partitions kept ready after the current one")
        ->capture_default_str();
    Flag(cmd, "standby-slot", options.standby_slots,
         "Physical slot of a standby (repeatable): a transaction is published only once "
         "every named standby has flushed it, so a failover leaves no event in the broker "
         "that the new primary lacks; a missing standby holds publishing");
    Flag(cmd, "bulk-catch-up", options.bulk_catch_up_threshold,
         "Catch up in bulk through SQL (pg_logical_slot_peek_binary_changes in chunks, the "
         "slot advanced as they are acknowledged, then streaming) when at least this much "
         "WAL waits at connect, e.g. 16MiB; 0: always stream")
        ->transform(CLI::AsSizeValue(false))
        ->default_str("16MiB");
    Flag(cmd, "bulk-catch-up-chunk", options.bulk_catch_up_chunk,
         "Changes per peek of a bulk catch-up (0: the whole backlog in one peek)")
        ->capture_default_str();
    AddDedupeFlag(cmd, dedupe,
                  "After a restart or reconnect, skip the events of the re-read window that "
                  "the broker already holds");
    Switch(cmd, "recreate-missing-slot", options.recreate_missing_slot,
           "When the slot is missing though relays recorded positions for it (a failover to "
           "a server without it), re-create it and republish the rows after the last "
           "acknowledged position (duplicates, never a loss), instead of exiting 2");
    // Hidden (group ""): for tests, which need seconds, not the defaults.
    Flag(cmd, "slot-check-interval", slot_check_interval,
         "How often the slot's wal_status is read while streaming")
        ->group("");
    // Test-only: provokes the fatal idempotent-producer error path for real.
    Flag(cmd, "test-fatal-error-after", options.test_fatal_error_after,
         "TEST ONLY: raise a fatal producer error once, after N produced events")
        ->group("");
    Flag(cmd, "healthz-stall", healthz_stall,
         "/healthz answers 503 once events have been in flight this long with no "
         "acknowledgement")
        ->capture_default_str();
    return cmd;
  }

  // Flag values that parsed but cannot work; checked before anything connects.
  absl::Status CheckFlags() {
    OUTBOXD_RETURN_IF_ERROR(
        ResolveRelayFlags(flags, options.conninfo, options.table, options.format));
    OUTBOXD_RETURN_IF_ERROR(outbox::TopicTemplate::Parse(options.topic_template).status());
    options.source = source == "messages" ? relay::Source::kMessages
                     : source == "both"   ? relay::Source::kBoth
                                          : relay::Source::kTable;
    OUTBOXD_ASSIGN_OR_RETURN(options.dedupe, relay::ParseDedupe(dedupe));
    OUTBOXD_RETURN_IF_ERROR(CheckDedupe(dedupe, flags.sink));
    if (feedback_interval.value <= absl::ZeroDuration()) {
      return absl::InvalidArgumentError("--feedback-interval must be more than 0s, e.g. 10s");
    }
    if (max_in_flight == 0) {
      // Zero would never read the stream: a relay that hangs doing nothing.
      return absl::InvalidArgumentError("--max-in-flight must be at least 1, e.g. 100000");
    }
    if (max_in_flight != kSinkDefault) {
      options.max_in_flight = max_in_flight;
    } else if (!flags.sink.is_kafka()) {
      options.max_in_flight = relay::RelayOptions::kAmqpMaxInFlight;
    }
    if (options.max_in_flight_bytes == 0) {
      return absl::InvalidArgumentError("--max-in-flight-bytes must be at least 1, e.g. 64MiB");
    }
    if (options.bulk_catch_up_chunk < 0 || options.bulk_catch_up_chunk > INT32_MAX) {
      return absl::InvalidArgumentError(
          "--bulk-catch-up-chunk must be between 0 (one peek) and 2147483647, e.g. 500000");
    }
    for (const std::string& slot : options.standby_slots) {
      OUTBOXD_RETURN_IF_ERROR(pg::CheckSlotName(slot, "--standby-slot"));
    }
    if (slot_check_interval.value <= absl::ZeroDuration()) {
      return absl::InvalidArgumentError("--slot-check-interval must be more than 0s, e.g. 5s");
    }
    options.slot_check_interval = slot_check_interval.value;
    // Under a second, a round trip and a busy server's scheduling would make a healthy
    // stream look dead, and the relay would reconnect for ever.
    if (receive_timeout.value != absl::ZeroDuration() && receive_timeout.value < absl::Seconds(1)) {
      return absl::InvalidArgumentError(
          "--pg-receive-timeout must be 0s (never) or at least 1s, e.g. 30s");
    }
    options.receive_timeout = receive_timeout.value;
    options.feedback_interval = feedback_interval.value;
    options.shutdown_timeout = shutdown_timeout.value;
    // Before CheckKafka: acks=1 is named as unsafe, not as librdkafka's conflict with
    // idempotence. A timed-out event would be dead-lettered and passed: run needs the
    // infinite message timeout.
    flags.sink.topic_template = options.topic_template;
    OUTBOXD_ASSIGN_OR_RETURN(options.make_sink,
                             MakeSinkFactory(flags.sink, kafka::MessageTimeout::kMustBeInfinite));
    return flags.sink.is_kafka() ? CheckKafka() : absl::OkStatus();
  }

  // librdkafka checks property names and values as they are set, and some
  // combinations (acks=1 with idempotence) only when the producer is built: build one
  // and discard it, so a bad --kafka ends the run before anything else starts.
  absl::Status CheckKafka() {
    kafka::PublisherOptions quiet = flags.sink.kafka.options;
    // Its log lines (it may already try the brokers) stay queued and are dropped.
    quiet.on_log = [](int, std::string_view, std::string_view) {};
    absl::StatusOr<std::unique_ptr<kafka::Publisher>> producer =
        kafka::Publisher::Create(quiet, [](const kafka::DeliveryReport&) {});
    if (producer.ok() || producer.status().code() != absl::StatusCode::kInvalidArgument ||
        !absl::StartsWith(producer.status().message(), "Kafka ")) {
      return producer.status();
    }
    return absl::InvalidArgumentError(
        absl::StrCat(producer.status().message(),
                     "; fix that --kafka setting (names and values as in librdkafka's "
                     "CONFIGURATION.md)"));
  }

  // The database can serve the relay: one line naming the problem and the fix if not.
  // The connection goes on to serve the relay.
  absl::StatusOr<pg::Connection> CheckDatabase() {
    OUTBOXD_ASSIGN_OR_RETURN(pg::Connection conn, pg::Connection::Open(options.conninfo));
    OUTBOXD_RETURN_IF_ERROR(relay::Preflight(conn, options, &findings));
    return conn;
  }

  // Said once, after the start line: a table without the created-at column (a
  // Debezium outbox table) is relayed, and the features that need it go without.
  void AdaptToTable() {
    if (!findings.created_at_missing) return;
    spdlog::warn("{}", outbox::MissingCreatedAtNote(options.table, options.columns.created_at));
    options.columns.created_at.clear();
  }
  // The cleanup job looks for the column as given, as `outboxd cleanup` does: without
  // it the job keeps the outbox rows and still cleans the inbox (the relay's own copy
  // of the mapping is emptied by AdaptToTable).
  std::string created_at_column;

  int Run() {
    if (absl::Status s = CheckFlags(); !s.ok()) return Fail(s, Phase::kStarting);
    created_at_column = options.columns.created_at;
    StopSignal stop;
    StopOnSignals signals(&stop);
    // A database that is not up yet is waited for (logged at each attempt), not exit 2.
    std::optional<pg::Connection> checked;
    absl::Status reached = RetryWhileTransient(stop, [&]() -> absl::Status {
      absl::StatusOr<pg::Connection> conn = CheckDatabase();
      if (conn.ok()) checked.emplace(*std::move(conn));
      return conn.status();
    });
    if (!reached.ok() && stop.requested()) {
      spdlog::info("stopped before PostgreSQL was available");
      return kExitOk;
    }
    if (!reached.ok()) return Fail(reached, Phase::kStarting);
    // After the checks: a configuration error stays the only line (README Guarantees,
    // "clear failure").
    spdlog::info(
        "starting outboxd {} run: slot {}, publication {}, table {}, source {}, topic {}, {}, "
        "PostgreSQL {}",
        OUTBOXD_VERSION, options.slot, options.publication, options.table, source,
        options.topic_template, SinkDescription(flags.sink), pg::RedactConninfo(options.conninfo));
    AdaptToTable();

    relay::RelayStats stats;
    stats.metrics.SetUnsafeKafkaConfig(flags.sink.kafka.unsafe);
    observe::HttpServer http;
    std::optional<observe::QuerySampler> slot_lag;  // stopped before `stats` goes
    if (!flags.metrics.empty()) {
      observe::AddMetricsEndpoints(
          http, stats.metrics, stats.health,
          {.stall_threshold = healthz_stall.value,
           .disconnected_reason = "not streaming from PostgreSQL (unreachable, reconnecting, "
                                  "or another relay holds the slot)"});
      if (absl::Status s = http.Start(flags.metrics); !s.ok()) return Fail(s, Phase::kStarting);
      // Its own connection and thread: a slow server never holds up the relay's loop.
      slot_lag.emplace(options.conninfo, kSlotLagQuery, std::vector<std::string>{options.slot},
                       kSlotLagInterval, [&stats](std::optional<double> bytes) {
                         if (bytes) stats.metrics.SetSlotLagBytes(static_cast<int64_t>(*bytes));
                       });
      slot_lag->Start();
    }
    std::optional<ops::CleanupJob> cleanup;
    if (cleanup_interval.value > absl::ZeroDuration()) {
      cleanup.emplace(options.conninfo,
                      ops::CleanupOptions{.table = options.table,
                                          .created_at_column = created_at_column,
                                          .retention = retention.value,
                                          .inbox_retention = inbox_retention.value,
                                          .partitions_ahead = partitions_ahead,
                                          .on_done =
                                              [&stats](const ops::CleanupResult& done) {
                                                stats.metrics.CleanupRoundDone(
                                                    done.default_deleted + done.default_rows);
                                              }},
                      cleanup_interval.value);
    }
    observe::StallWatch stall_watch(stats.health, healthz_stall.value);
    stall_watch.Start();
    relay::Relay relay(options, &stats, &stop);
    relay.AdoptControlConnection(std::move(*checked));
    absl::Status status = relay.Run();
    if (!status.ok()) {
      const bool started = stats.streaming || stats.confirmed_lsn != 0;
      return Fail(status, started ? Phase::kRunning : Phase::kStarting);
    }
    // Exit 0 either way: the stop was asked for and nothing is lost, but "cleanly" only
    // when nothing is left to send again.
    if (const uint64_t abandoned = stats.events_abandoned; abandoned > 0) {
      spdlog::warn(
          "stopped after --shutdown-timeout {} with {} events unacknowledged; the next start "
          "sends them again (consumers drop repeats by id)",
          shutdown_timeout.text, abandoned);
    } else {
      spdlog::info("stopped cleanly");
    }
    return kExitOk;
  }
};

}  // namespace

Command RegisterRun(CLI::App& app) { return RegisterCommand<RunCommand>(app); }

}  // namespace outboxd::cli
