// outboxd run: the CDC relay, with /metrics and /healthz.
#include "base/log.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "ops/http_server.h"
#include "ops/metrics.h"
#include "relay/relay.h"

namespace outboxd::cli {
namespace {

struct RunCommand {
  relay::RelayOptions options;
  std::vector<std::string> kafka_properties;
  std::string metrics = "127.0.0.1:9187";
  DurationFlag feedback_interval{"10s"};
  DurationFlag shutdown_timeout{"30s"};

  CLI::App* Register(CLI::App& app) {
    CLI::App* cmd = app.add_subcommand("run", "Relay outbox inserts from the WAL to Kafka");
    Flag(cmd, "pg", options.conninfo, "PostgreSQL conninfo or URI")->required();
    Flag(cmd, "brokers", options.kafka.brokers, "Kafka bootstrap servers HOST:PORT[,...]")
        ->required();
    Flag(cmd, "slot", options.slot, "Logical replication slot")->capture_default_str();
    Flag(cmd, "publication", options.publication, "Publication")->capture_default_str();
    Flag(cmd, "table", options.table, "Outbox table ([schema.]name)")->capture_default_str();
    Flag(cmd, "topic", options.topic_template, "Topic template; placeholders {type} {table}")
        ->capture_default_str();
    Flag(cmd, "kafka", kafka_properties, "librdkafka property KEY=VALUE (repeatable)");
    Flag(cmd, "metrics", metrics, "HOST:PORT for /metrics and /healthz (empty: off)")
        ->capture_default_str();
    Flag(cmd, "id-column", options.columns.id, "Column with the event id")->capture_default_str();
    Flag(cmd, "aggregate-column", options.columns.aggregate_id, "Column with the aggregate id")
        ->capture_default_str();
    Flag(cmd, "type-column", options.columns.type, "Column with the event type")
        ->capture_default_str();
    Flag(cmd, "payload-column", options.columns.payload, "Column with the JSON payload")
        ->capture_default_str();
    Flag(cmd, "created-at-column", options.columns.created_at, "Column with the creation time")
        ->capture_default_str();
    Flag(cmd, "max-in-flight", options.max_in_flight,
         "Pause reading above this many unacked events")
        ->capture_default_str();
    Flag(cmd, "feedback-interval", feedback_interval.text, "Status update interval")
        ->capture_default_str();
    Flag(cmd, "shutdown-timeout", shutdown_timeout.text, "Wait for in-flight acks on SIGTERM")
        ->capture_default_str();
    return cmd;
  }

  int Run() {
    for (absl::Status s : {ResolveDuration(feedback_interval, "feedback-interval"),
                           ResolveDuration(shutdown_timeout, "shutdown-timeout"),
                           ParseKafkaProperties(kafka_properties, options.kafka)}) {
      if (!s.ok()) return Fail(s, true);
    }
    options.feedback_interval = feedback_interval.value;
    options.shutdown_timeout = shutdown_timeout.value;

    relay::StopSignal stop;
    StopOnSignals signals(&stop);

    relay::RelayStats stats;
    ops::HttpServer http;
    if (!metrics.empty()) {
      http.Handle("/metrics", [&stats] {
        return ops::HttpResponse{200, "text/plain; version=0.0.4", ops::RenderMetrics(stats)};
      });
      http.Handle("/healthz", [&stats] {
        return stats.streaming ? ops::HttpResponse{200, "text/plain", "ok\n"}
                               : ops::HttpResponse{503, "text/plain", "not streaming\n"};
      });
      if (absl::Status s = http.Start(metrics); !s.ok()) return Fail(s, true);
      spdlog::info("metrics on http://{}:{}/metrics, health on /healthz",
                   metrics.substr(0, metrics.rfind(':')), http.port());
    }
    relay::Relay relay(options, &stats, &stop);
    absl::Status status = relay.Run();
    if (!status.ok()) return Fail(status, !stats.streaming && stats.confirmed_lsn == 0);
    spdlog::info("stopped cleanly");
    return kExitOk;
  }
};

}  // namespace

Command RegisterRun(CLI::App& app) {
  auto command = std::make_shared<RunCommand>();
  CLI::App* cmd = command->Register(app);
  return [command, cmd] { return cmd->parsed() ? command->Run() : -1; };
}

}  // namespace outboxd::cli
