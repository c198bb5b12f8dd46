// outboxd poll: the polling relay (SELECT ... FOR UPDATE SKIP LOCKED batches), for
// databases without logical replication; same message contract as `run` without the
// lsn header. Several instances may run on one table.
#include "base/log.h"
#include "base/startup_retry.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "cli/relay_flags.h"
#include "observe/endpoints.h"
#include "observe/http_server.h"
#include "observe/stall_watch.h"
#include "pg/connection.h"
#include "poll/notify_trigger.h"
#include "poll/poll_relay.h"

namespace outboxd::cli {
namespace {

// Its line in `outboxd --help`.
constexpr char kPollSummary[] =
    "Relay pending outbox rows to Kafka, RabbitMQ or NATS JetStream by polling";

struct PollCommand {
  poll::PollOptions options;
  // The sink: options.make_sink. --metrics off by default: several instances often
  // share a host.
  RelayFlags flags;
  DurationFlag interval{"500ms"};
  DurationFlag publish_timeout{"30s"};
  DurationFlag healthz_stall{"30s"};
  bool install_notify_trigger = false;
  std::string dedupe = "auto";

  CLI::App* Register(CLI::App& app) {
    CLI::App* cmd = AddRelayCommand(app, "poll", kPollSummary, options.conninfo);
    Flag(cmd, "batch", options.batch, "Rows reserved per transaction")->capture_default_str();
    Flag(cmd, "interval", interval, "Sleep after an empty batch")->capture_default_str();
    Flag(cmd, "publish-timeout", publish_timeout,
         "Wait this long for a batch's acks; unacknowledged events count as failed")
        ->capture_default_str();
    Switch(cmd, "notify", options.notify, "LISTEN and wake from the sleep on NOTIFY");
    Flag(cmd, "notify-channel", options.channel, "Channel for --notify")->capture_default_str();
    Switch(cmd, "install-notify-trigger", install_notify_trigger,
           "Create (or replace) the AFTER INSERT trigger that NOTIFYs the channel, then poll");
    AddOutboxFlags(cmd, options.table, options.topic_template);
    AddRelayFlags(cmd, flags, options.columns);
    AddHeadersColumnFlag(cmd, options.columns);
    Flag(cmd, "healthz-stall", healthz_stall,
         "/healthz answers 503 once events have been in flight or failing this long with no "
         "acknowledgement")
        ->capture_default_str();
    AddDedupeFlag(cmd, dedupe,
                  "Mark each message as this table's poller's, and before sending again a row "
                  "that an interrupted batch (a crash, a lost connection) held, look for it "
                  "at the broker");
    return cmd;
  }

  int Run() {
    if (absl::Status s = ResolveRelayFlags(flags, options.conninfo, options.table, options.format);
        !s.ok()) {
      return Fail(s, Phase::kStarting);
    }
    if (absl::Status s = CheckDedupe(dedupe, flags.sink); !s.ok()) return Fail(s, Phase::kStarting);
    options.dedupe = dedupe != "off";
    // A failed attempt leaves the row pending (poll sets message.timeout.ms itself).
    flags.sink.topic_template = options.topic_template;
    absl::StatusOr<sink::SinkFactory> make_sink =
        MakeSinkFactory(flags.sink, kafka::MessageTimeout::kMayBeFinite);
    if (!make_sink.ok()) return Fail(make_sink.status(), Phase::kStarting);
    options.make_sink = *std::move(make_sink);
    options.interval = interval.value;
    options.publish_timeout = publish_timeout.value;
    if (install_notify_trigger) {
      if (absl::Status s = InstallTrigger(); !s.ok()) return Fail(s, Phase::kStarting);
    }

    StopSignal stop;
    StopOnSignals signals(&stop);
    poll::PollStats stats;
    stats.metrics.SetUnsafeKafkaConfig(flags.sink.kafka.unsafe);
    poll::PollRelay relay(options, &stats);
    // A database that is not up yet is waited for (logged at each attempt), not exit 2.
    if (absl::Status s = RetryWhileTransient(stop, [&] { return relay.Start(); });
        !s.ok()) {
      if (!stop.requested()) return Fail(s, Phase::kStarting);
      spdlog::info("stopped before PostgreSQL was available");
      return kExitOk;
    }
    // After the checks Start() makes: a configuration error stays the only line.
    spdlog::info("starting outboxd {} poll: table {}, topic {}, {}, PostgreSQL {}", OUTBOXD_VERSION,
                 options.table, options.topic_template, SinkDescription(flags.sink),
                 pg::RedactConninfo(options.conninfo));
    // After the start line, as `run` does: "metrics on" first read as a start.
    observe::HttpServer http;
    if (absl::Status s = ServeMetrics(http, stats); !s.ok()) return Fail(s, Phase::kStarting);
    observe::StallWatch stall_watch(stats.health, healthz_stall.value);
    stall_watch.Start();
    if (absl::Status s = relay.Run(&stop); !s.ok()) return Fail(s, Phase::kRunning);
    spdlog::info("stopped cleanly; published {} events, {} failed attempts",
                 stats.events_published.load(), stats.events_failed.load());
    return kExitOk;
  }

  absl::Status InstallTrigger() {
    absl::StatusOr<pg::Connection> conn = pg::Connection::Open(options.conninfo);
    if (!conn.ok()) return conn.status();
    if (absl::Status s = poll::InstallNotifyTrigger(*conn, options.table, options.channel);
        !s.ok()) {
      return s;
    }
    spdlog::info("NOTIFY trigger {} on {} notifies channel {}", poll::kNotifyTriggerName,
                 options.table, options.channel);
    return absl::OkStatus();
  }

  absl::Status ServeMetrics(observe::HttpServer& http, const poll::PollStats& stats) {
    if (flags.metrics.empty()) return absl::OkStatus();
    observe::AddMetricsEndpoints(
        http, stats.metrics, stats.health,
        {.stall_threshold = healthz_stall.value,
         .disconnected_reason = "no batch committed yet, or the last one failed (PostgreSQL "
                                "unreachable?)"});
    return http.Start(flags.metrics);
  }
};

}  // namespace

Command RegisterPoll(CLI::App& app) { return RegisterCommand<PollCommand>(app); }

}  // namespace outboxd::cli
