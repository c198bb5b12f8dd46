// outboxd: the command line. Each subcommand maps flags (and their OUTBOXD_*
// environment variables; a flag wins) onto one module's options and turns the
// module's Status into an exit code: 0 clean stop, 2 configuration or environment
// error, 1 anything else.
#include <csignal>
#include <cstdio>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/duration.h"
#include "ops/http_server.h"
#include "ops/metrics.h"
#include "ops/setup.h"
#include "pg/connection.h"
#include "relay/relay.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "base/log.h"

namespace outboxd::cli {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitConfig = 2;

relay::StopSignal* g_stop = nullptr;

void OnSignal(int) {
  if (g_stop != nullptr) g_stop->Notify();
}

// Errors a user fixes in configuration or in the database's setup.
bool IsConfigError(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kAlreadyExists:
      return true;
    default:
      return false;
  }
}

int Fail(const absl::Status& status, bool starting) {
  spdlog::error("{}", status.message());
  // Before the relay streams, an unreachable server is an environment problem too.
  if (IsConfigError(status) || (starting && status.code() == absl::StatusCode::kUnavailable)) {
    return kExitConfig;
  }
  return kExitFailure;
}

// Adds an option with its OUTBOXD_<NAME> environment variable.
template <typename T>
CLI::Option* Flag(CLI::App* app, const std::string& name, T& value, const std::string& help) {
  std::string env = "OUTBOXD_";
  for (char c : name) env += c == '-' ? '_' : static_cast<char>(std::toupper(c));
  return app->add_option("--" + name, value, help)->envname(env);
}

struct DurationFlag {
  std::string text;
  absl::Duration value;
};

absl::Status ResolveDuration(DurationFlag& flag, absl::string_view name) {
  absl::StatusOr<absl::Duration> parsed = ParseDuration(flag.text);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--", name, ": ", parsed.status().message()));
  }
  flag.value = *parsed;
  return absl::OkStatus();
}

absl::Status ParseKafkaProperties(const std::vector<std::string>& pairs,
                                  kafka::PublisherOptions& options) {
  for (const std::string& pair : pairs) {
    size_t eq = pair.find('=');
    if (eq == std::string::npos || eq == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--kafka \"", pair, "\": expected KEY=VALUE, e.g. --kafka linger.ms=5"));
    }
    options.properties.emplace_back(pair.substr(0, eq), pair.substr(eq + 1));
  }
  return absl::OkStatus();
}

struct SetupCommand {
  std::string pg;
  ops::SetupOptions options;

  CLI::App* Register(CLI::App& app) {
    CLI::App* cmd = app.add_subcommand("setup", "Create the outbox tables, publication and slot");
    Flag(cmd, "pg", pg, "PostgreSQL conninfo or URI")->required();
    Flag(cmd, "table", options.table, "Outbox table")->capture_default_str();
    Flag(cmd, "publication", options.publication, "Publication name")->capture_default_str();
    Flag(cmd, "slot", options.slot, "Logical replication slot name")->capture_default_str();
    return cmd;
  }

  int Run() {
    absl::StatusOr<pg::Connection> conn = pg::Connection::Open(pg);
    if (!conn.ok()) return Fail(conn.status(), true);
    absl::Status status = ops::Setup(*conn, options);
    if (!status.ok()) return Fail(status, true);
    spdlog::info("ready: table {}, publication {}, slot {}", options.table, options.publication,
                 options.slot);
    return kExitOk;
  }
};

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
    Flag(cmd, "max-in-flight", options.max_in_flight, "Pause reading above this many unacked events")
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
    g_stop = &stop;
    std::signal(SIGTERM, OnSignal);
    std::signal(SIGINT, OnSignal);

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
    g_stop = nullptr;
    if (!status.ok()) return Fail(status, !stats.streaming && stats.confirmed_lsn == 0);
    spdlog::info("stopped cleanly");
    return kExitOk;
  }
};

int Main(int argc, char** argv) {
  auto logger = spdlog::stderr_color_mt("outboxd");
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e%z %^%l%$ %v");
  spdlog::set_default_logger(logger);

  CLI::App app{"outboxd: publishes transactional-outbox events from PostgreSQL's WAL to Kafka"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "outboxd 0.1.0");
  SetupCommand setup;
  CLI::App* setup_cmd = setup.Register(app);
  RunCommand run;
  CLI::App* run_cmd = run.Register(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? kExitOk : kExitConfig;
  }
  if (setup_cmd->parsed()) return setup.Run();
  if (run_cmd->parsed()) return run.Run();
  return kExitConfig;
}

}  // namespace
}  // namespace outboxd::cli

int main(int argc, char** argv) { return outboxd::cli::Main(argc, argv); }
