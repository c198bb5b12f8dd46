#include "cli/sink_flags.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "amqp/sink.h"
#include "base/annotate.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "cli/common.h"
#include "cli/logging.h"
#include "cli/secrets.h"

namespace outboxd::cli {
namespace {

void AddKafkaFlags(CLI::App* cmd, KafkaFlags& flags, const std::string& brokers_help) {
  Flag(cmd, "brokers", flags.options.brokers, brokers_help);
  Flag(cmd, "kafka", flags.properties, "librdkafka property KEY=VALUE (repeatable)");
  Flag(cmd, "kafka-secret-file", flags.secret_files,
       "librdkafka property KEY=PATH read from a file, e.g. sasl.password=/run/secrets/kafka "
       "(repeatable)");
  Switch(cmd, "allow-unsafe-kafka", flags.allow_unsafe,
         "Accept --kafka settings that can lose or reorder events (enable.idempotence=false, "
         "acks other than all, ...); logged at every start and exported as "
         "outboxd_unsafe_kafka_config");
}

// --X-url and --X-url-file (`prefix` X: "amqp" or "nats"): the URL inline, or read from
// a secret file (ResolveUrl below), `file_holds` saying what the file holds.
void AddUrlFlags(CLI::App* cmd, const std::string& prefix, std::string& url, std::string& url_file,
                 const std::string& url_help, const std::string& file_holds) {
  Flag(cmd, prefix + "-url", url, url_help);
  Flag(cmd, prefix + "-url-file", url_file,
       absl::StrCat("File holding the ", file_holds, " (kept out of argv, environment and logs)"));
}

void AddNatsFlags(CLI::App* cmd, NatsFlags& flags) {
  AddUrlFlags(cmd, "nats", flags.options.url, flags.url_file,
              "NATS URL nats://host:4222, several comma-separated (--sink nats)",
              "NATS URL(s), for ones with nats://user:password@...");
  Flag(cmd, "nats-creds-file", flags.options.creds_file,
       "NATS credentials file (user JWT and NKey seed) for the connection");
  Flag(cmd, "stream", flags.options.stream.name,
       "NATS JetStream stream; the subject is the --topic template's result. run and poll "
       "create it when missing (file storage, 2-minute duplicate window) taking the "
       "template's tokens before its first placeholder then >: orders.{type} gives "
       "orders.>, {type} gives >; dead-letter replay only checks it")
      ->capture_default_str();
}

void AddAmqpFlags(CLI::App* cmd, AmqpFlags& flags) {
  AddUrlFlags(cmd, "amqp", flags.options.url, flags.url_file,
              "RabbitMQ URL amqp://user:pass@host:5672/vhost or amqps://... (--sink rabbitmq)",
              "RabbitMQ URL, for one with a password");
  Flag(cmd, "exchange", flags.options.exchange,
       "RabbitMQ durable topic exchange; the routing key is the --topic template's result")
      ->capture_default_str();
  Flag(cmd, "amqp-ca-file", flags.options.tls.ca_file,
       "amqps://: CA certificate file that verifies the broker (PEM)");
  Flag(cmd, "amqp-cert-file", flags.options.tls.cert_file,
       "amqps://: client certificate (PEM), with --amqp-key-file");
  Flag(cmd, "amqp-key-file", flags.options.tls.key_file,
       "amqps://: client certificate's key (PEM)");
  Switch(cmd, "amqp-no-verify-peer", flags.no_verify_peer,
         "amqps://: do not verify the broker's certificate (tests only)");
  Switch(cmd, "amqp-no-verify-hostname", flags.no_verify_hostname,
         "amqps://: do not check the certificate names the URL's host");
}

// --kafka KEY=VALUE pairs, then each --kafka-secret-file property (after them, so a
// file wins); every secret-looking property value is marked for redaction.
absl::Status ResolveKafkaFlags(KafkaFlags& flags) {
  for (const std::string& pair : flags.properties) {
    size_t eq = pair.find('=');
    if (eq == std::string::npos || eq == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--kafka \"", pair, "\": expected KEY=VALUE, e.g. --kafka linger.ms=5"));
    }
    flags.options.properties.emplace_back(pair.substr(0, eq), pair.substr(eq + 1));
  }
  for (const std::string& pair : flags.secret_files) {
    const size_t eq = pair.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == pair.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--kafka-secret-file \"", pair,
          "\": expected KEY=PATH, e.g. --kafka-secret-file sasl.password=/run/secrets/kafka"));
    }
    OUTBOXD_ASSIGN_OR_RETURN(std::string value,
                             ReadSecretFile("kafka-secret-file", pair.substr(eq + 1)));
    RedactFromLogs(value);
    flags.options.properties.emplace_back(pair.substr(0, eq), std::move(value));
  }
  for (const auto& [name, value] : flags.options.properties) {
    if (kafka::IsSecretProperty(name)) RedactFromLogs(value);
  }
  return absl::OkStatus();
}

absl::Status CheckBrokersGiven(const SinkFlags& flags) {
  if (!flags.is_kafka()) return absl::OkStatus();
  const kafka::PublisherOptions& kafka = flags.kafka.options;
  if (!kafka.brokers.empty()) return absl::OkStatus();
  for (const auto& [name, value] : kafka.properties) {
    if (name == "bootstrap.servers" || name == "metadata.broker.list") return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--brokers is required with --sink kafka (or set OUTBOXD_BROKERS, or brokers in the "
      "--config file); see ",
      flags.command, " --help"));
}

// The --kafka settings that void "every event delivered, in order per aggregate"
// (kafka::UnsafeSettings) are refused with one line naming them and
// --allow-unsafe-kafka (InvalidArgument, exit 2); with `allow` they are named in a
// warning instead, at every start. Returns whether one is in force (the
// outboxd_unsafe_kafka_config gauge).
absl::StatusOr<bool> CheckKafkaDurability(const kafka::PublisherOptions& options,
                                          kafka::MessageTimeout timeout, bool allow) {
  absl::StatusOr<std::vector<kafka::UnsafeSetting>> checked =
      kafka::UnsafeSettings(options, timeout);
  if (!checked.ok()) {
    return Annotate(checked.status(), "",
                    "; fix that --kafka setting (names and values as in librdkafka's "
                    "CONFIGURATION.md)");
  }
  const std::vector<kafka::UnsafeSetting>& unsafe = *checked;
  if (unsafe.empty()) return false;
  std::string settings;
  for (const kafka::UnsafeSetting& u : unsafe) {
    absl::StrAppend(&settings, settings.empty() ? "" : ", ", u.setting, " (", u.risk, ")");
  }
  if (!allow) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--kafka ", settings,
        " voids outboxd's promise that every event is delivered, in order per aggregate; "
        "remove it, or pass --allow-unsafe-kafka to run with it anyway"));
  }
  spdlog::warn("--allow-unsafe-kafka: running with --kafka {}; events may be lost or reordered",
               settings);
  return true;
}

absl::StatusOr<sink::SinkFactory> KafkaSinkFactory(KafkaFlags& flags,
                                                   kafka::MessageTimeout timeout) {
  OUTBOXD_ASSIGN_OR_RETURN(flags.unsafe,
                           CheckKafkaDurability(flags.options, timeout, flags.allow_unsafe));
  flags.options.on_log = LogKafka;
  return kafka::Publisher::Factory(flags.options);
}

// The password of amqp://user:password@host/..., as written (percent-encoded), or "".
std::string UrlPassword(const std::string& url) {
  const size_t scheme = url.find("://");
  if (scheme == std::string::npos) return "";
  const size_t start = scheme + 3;
  const size_t at = url.find('@', start);
  if (at == std::string::npos) return "";
  const size_t colon = url.find(':', start);
  if (colon == std::string::npos || colon > at) return "";
  return url.substr(colon + 1, at - colon - 1);
}

// The URL from --X-url or --X-url-file (a secret file), exactly one of them, its
// passwords marked for redaction; `prefix` is "amqp" or "nats", `example` the URL the
// error shows. Several comma-separated URLs (NATS) each have theirs redacted.
absl::Status ResolveUrl(std::string& url, const std::string& url_file, const std::string& prefix,
                        const std::string& sink, const std::string& example,
                        const std::string& command) {
  if (!url.empty() && !url_file.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", prefix, "-url and --", prefix,
                     "-url-file both given; keep one (the file for a URL with a password); see ",
                     command, " --help"));
  }
  if (url.empty() && url_file.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--sink ", sink, " needs --", prefix, "-url ", example, " (or ", EnvName(prefix + "-url"),
        ", or --", prefix, "-url-file PATH); see ", command, " --help"));
  }
  if (!url_file.empty()) {
    OUTBOXD_ASSIGN_OR_RETURN(url, ReadSecretFile(prefix + "-url-file", url_file));
  }
  RedactFromLogs(UrlPassword(url));
  for (absl::string_view one : absl::StrSplit(url, ',')) {
    RedactFromLogs(UrlPassword(std::string(absl::StripAsciiWhitespace(one))));
  }
  return absl::OkStatus();
}

absl::StatusOr<sink::SinkFactory> AmqpSinkFactory(AmqpFlags& flags, bool no_declare,
                                                  const std::string& command) {
  OUTBOXD_RETURN_IF_ERROR(ResolveUrl(flags.options.url, flags.url_file, "amqp", "rabbitmq",
                                     "amqp://user:pass@host:5672/vhost", command));
  // The URL parses (the error never quotes it), before anything connects.
  OUTBOXD_ASSIGN_OR_RETURN(flags.redacted_url, amqp::RedactedUrl(flags.options.url));
  amqp::TlsOptions& tls = flags.options.tls;
  if (!tls.cert_file.empty() != !tls.key_file.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--amqp-cert-file and --amqp-key-file go together; give both or neither; see ",
                     command, " --help"));
  }
  tls.verify_peer = !flags.no_verify_peer;
  tls.verify_hostname = !flags.no_verify_hostname;
  flags.options.exchange_mode =
      no_declare ? amqp::ExchangeMode::kPassive : amqp::ExchangeMode::kDeclare;
  flags.options.connection_name = command;
  return sink::FactoryOf(&amqp::NewSink, amqp::SinkOptions{.publisher = flags.options});
}

// What a missing stream's error tells the person to do. run and poll create the stream
// unless --no-declare; dead-letter replay never does (it has no --topic template for
// its subjects), whatever --no-declare says: the letters go to the relay's stream.
std::string NatsStreamFix(const SinkFlags& sink) {
  if (sink.topic_template.empty()) {
    return absl::StrCat(sink.command,
                        " publishes only to an existing stream: pass --stream with the stream "
                        "the relay publishes to, or create it (outboxd run --sink nats creates "
                        "it at start)");
  }
  return "create it, or leave out --no-declare and outboxd creates it";
}

absl::StatusOr<sink::SinkFactory> NatsSinkFactory(NatsFlags& flags, const SinkFlags& sink) {
  nats::SinkOptions& options = flags.options;
  OUTBOXD_RETURN_IF_ERROR(
      ResolveUrl(options.url, flags.url_file, "nats", "nats", "nats://host:4222", sink.command));
  flags.redacted_url = nats::RedactedUrl(options.url);
  if (!options.creds_file.empty()) {
    // libnats reads the file itself; this read only checks it as every secret file is
    // checked (readable, not readable by others), before anything connects.
    OUTBOXD_RETURN_IF_ERROR(ReadSecretFile("nats-creds-file", options.creds_file).status());
  }
  if (options.stream.name.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--stream is empty; name the JetStream stream; see ", sink.command, " --help"));
  }
  const bool create = !sink.no_declare && !sink.topic_template.empty();
  options.stream.declare = create ? nats::Declare::kCreateIfMissing : nats::Declare::kPassive;
  if (create) options.stream.subjects = {StreamSubjects(sink.topic_template)};
  options.stream.fix_if_missing = NatsStreamFix(sink);
  return sink::FactoryOf(&nats::NewSink, options);
}

// "outboxd dead-letter replay" for `cmd` the replay subcommand: the program, then each
// subcommand from the top down to `cmd` (the root App's own name is not the program's).
std::string CommandLine(const CLI::App* cmd) {
  std::vector<std::string> names;
  for (const CLI::App* app = cmd; app != nullptr && app->get_parent() != nullptr;
       app = app->get_parent()) {
    names.push_back(app->get_name());
  }
  names.emplace_back("outboxd");
  std::reverse(names.begin(), names.end());
  return absl::StrJoin(names, " ");
}

}  // namespace

void AddSinkFlags(CLI::App* cmd, SinkFlags& flags, const std::string& brokers_help) {
  flags.command = CommandLine(cmd);
  Flag(cmd, "sink", flags.sink, "Broker to publish to: kafka, rabbitmq or nats (JetStream)")
      ->check(CLI::IsMember({"kafka", "rabbitmq", "nats"}))
      ->capture_default_str();
  AddKafkaFlags(cmd, flags.kafka, brokers_help);
  AddAmqpFlags(cmd, flags.amqp);
  AddNatsFlags(cmd, flags.nats);
  Switch(cmd, "no-declare", flags.no_declare,
         "Only check that RabbitMQ's exchange (passive declare) or NATS' stream exists "
         "instead of declaring or creating it");
}

absl::Status ResolveSinkFlags(SinkFlags& flags) {
  OUTBOXD_RETURN_IF_ERROR(ResolveKafkaFlags(flags.kafka));
  return CheckBrokersGiven(flags);
}

absl::StatusOr<sink::SinkFactory> MakeSinkFactory(SinkFlags& flags, kafka::MessageTimeout timeout) {
  if (flags.is_kafka()) return KafkaSinkFactory(flags.kafka, timeout);
  if (flags.sink == "nats") return NatsSinkFactory(flags.nats, flags);
  return AmqpSinkFactory(flags.amqp, flags.no_declare, flags.command);
}

std::string SinkDescription(const SinkFlags& flags) {
  if (flags.is_kafka()) return absl::StrCat("Kafka brokers ", flags.kafka.options.brokers);
  if (flags.sink == "nats") {
    return absl::StrCat("NATS ", flags.nats.redacted_url, " stream ",
                        flags.nats.options.stream.name);
  }
  return absl::StrCat("RabbitMQ ", flags.amqp.redacted_url, " exchange ",
                      flags.amqp.options.exchange);
}

std::string StreamSubjects(const std::string& topic_template) {
  std::vector<std::string> tokens;
  for (absl::string_view token : absl::StrSplit(topic_template, '.')) {
    if (absl::StrContains(token, '{')) {
      tokens.push_back(">");
      break;
    }
    tokens.emplace_back(token);
  }
  return absl::StrJoin(tokens, ".");
}

}  // namespace outboxd::cli
