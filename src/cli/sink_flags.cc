#include "cli/sink_flags.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "amqp/sink.h"
#include "base/status_macros.h"
#include "cli/common.h"
#include "cli/logging.h"
#include "cli/secrets.h"

namespace outboxd::cli {
namespace {

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

absl::StatusOr<std::string> ResolveUrl(const SinkFlags& flags) {
  if (!flags.amqp_url.empty() && !flags.amqp_url_file.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--amqp-url and --amqp-url-file both given; keep one (the file for a URL with a "
        "password); see ",
        flags.command, " --help"));
  }
  if (flags.amqp_url.empty() && flags.amqp_url_file.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--sink rabbitmq needs --amqp-url amqp://user:pass@host:5672/vhost (or OUTBOXD_AMQP_URL, "
        "or --amqp-url-file PATH); see ",
        flags.command, " --help"));
  }
  std::string url = flags.amqp_url;
  if (!flags.amqp_url_file.empty()) {
    OUTBOXD_ASSIGN_OR_RETURN(url, ReadSecretFile("amqp-url-file", flags.amqp_url_file));
  }
  RedactFromLogs(UrlPassword(url));
  return url;
}

}  // namespace

void AddSinkFlags(CLI::App* cmd, SinkFlags& flags) {
  flags.command = "outboxd";
  for (const CLI::App* app = cmd; app != nullptr && app->get_parent() != nullptr;
       app = app->get_parent()) {
    flags.command.insert(7, " " + app->get_name());
  }
  Flag(cmd, "sink", flags.sink, "Broker to publish to: kafka or rabbitmq")
      ->check(CLI::IsMember({"kafka", "rabbitmq"}))
      ->capture_default_str();
  Flag(cmd, "amqp-url", flags.amqp_url,
       "RabbitMQ URL amqp://user:pass@host:5672/vhost or amqps://... (--sink rabbitmq)");
  Flag(cmd, "amqp-url-file", flags.amqp_url_file,
       "File holding the RabbitMQ URL, for one with a password (kept out of argv, "
       "environment and logs)");
  Flag(cmd, "exchange", flags.exchange,
       "RabbitMQ durable topic exchange; the routing key is the --topic template's result")
      ->capture_default_str();
  Switch(cmd, "no-declare", flags.no_declare,
         "Only check that the exchange exists (passive declare) instead of declaring it");
  Flag(cmd, "amqp-ca-file", flags.amqp_ca_file,
       "amqps://: CA certificate file that verifies the broker (PEM)");
  Flag(cmd, "amqp-cert-file", flags.amqp_cert_file,
       "amqps://: client certificate (PEM), with --amqp-key-file");
  Flag(cmd, "amqp-key-file", flags.amqp_key_file, "amqps://: client certificate's key (PEM)");
  Switch(cmd, "amqp-no-verify-peer", flags.amqp_no_verify_peer,
         "amqps://: do not verify the broker's certificate (tests only)");
  Switch(cmd, "amqp-no-verify-hostname", flags.amqp_no_verify_hostname,
         "amqps://: do not check the certificate names the URL's host");
}

absl::Status CheckBrokersGiven(const SinkFlags& flags, const kafka::PublisherOptions& kafka) {
  if (!flags.kafka()) return absl::OkStatus();
  if (!kafka.brokers.empty()) return absl::OkStatus();
  for (const auto& [name, value] : kafka.properties) {
    if (name == "bootstrap.servers" || name == "metadata.broker.list") return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--brokers is required with --sink kafka (or set OUTBOXD_BROKERS, or brokers in the "
      "--config file); see ",
      flags.command, " --help"));
}

absl::StatusOr<sink::SinkFactory> AmqpSinkFactory(SinkFlags& flags) {
  OUTBOXD_ASSIGN_OR_RETURN(std::string url, ResolveUrl(flags));
  // The URL parses (the error never quotes it), before anything connects.
  OUTBOXD_ASSIGN_OR_RETURN(flags.redacted_url, amqp::RedactedUrl(url));
  if (!flags.amqp_cert_file.empty() != !flags.amqp_key_file.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--amqp-cert-file and --amqp-key-file go together; give both or neither; see ",
                     flags.command, " --help"));
  }
  amqp::SinkOptions options{
      .publisher = {.url = std::move(url),
                    .exchange = flags.exchange,
                    .exchange_mode = flags.no_declare ? amqp::ExchangeMode::kPassive
                                                      : amqp::ExchangeMode::kDeclare,
                    .tls = {.ca_file = flags.amqp_ca_file,
                            .cert_file = flags.amqp_cert_file,
                            .key_file = flags.amqp_key_file,
                            .verify_peer = !flags.amqp_no_verify_peer,
                            .verify_hostname = !flags.amqp_no_verify_hostname},
                    .connection_name = flags.command}};
  return amqp::Sink::Factory(std::move(options));
}

std::string SinkDescription(const SinkFlags& flags, const kafka::PublisherOptions& kafka) {
  if (flags.kafka()) return absl::StrCat("Kafka brokers ", kafka.brokers);
  return absl::StrCat("RabbitMQ ", flags.redacted_url, " exchange ", flags.exchange);
}

absl::StatusOr<sink::SinkFactory> RetryingSinkFactory(SinkFlags& flags,
                                                      kafka::PublisherOptions& kafka,
                                                      bool allow_unsafe_kafka, bool* unsafe_kafka) {
  *unsafe_kafka = false;
  if (!flags.kafka()) return AmqpSinkFactory(flags);
  OUTBOXD_ASSIGN_OR_RETURN(*unsafe_kafka,
                           CheckKafkaDurability(kafka, kafka::MessageTimeout::kMayBeFinite,
                                                allow_unsafe_kafka));
  kafka.on_log = LogKafka;
  return kafka::Publisher::Factory(kafka);
}

}  // namespace outboxd::cli
