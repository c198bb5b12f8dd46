#include "cli/relay_flags.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "pg/connection.h"

namespace outboxd::cli {

CLI::App* AddRelayCommand(CLI::App& app, const std::string& name, const std::string& description,
                          std::string& conninfo) {
  CLI::App* cmd = app.add_subcommand(name, description);
  Flag(cmd, "pg", conninfo, "PostgreSQL conninfo or URI")->required();
  return cmd;
}

void AddOutboxFlags(CLI::App* cmd, std::string& table, std::string& topic_template) {
  Flag(cmd, "table", table, "Outbox table ([schema.]name)")->capture_default_str();
  Flag(cmd, "topic", topic_template, "Topic template; placeholders {type} {table}")
      ->capture_default_str();
}

void AddRelayFlags(CLI::App* cmd, RelayFlags& flags, outbox::ColumnMapping& columns) {
  AddSinkFlags(cmd, flags.sink);
  AddPgSecretFlags(cmd, flags.secrets);
  AddFormatFlags(cmd, flags.format);
  Flag(cmd, "metrics", flags.metrics, "HOST:PORT for /metrics and /healthz (empty: off)")
      ->capture_default_str();
  AddColumnFlags(cmd, columns);
}

absl::Status ResolveRelayFlags(RelayFlags& flags, std::string& conninfo, std::string_view table,
                               outbox::MessageFormat& format) {
  format.ce_source = pg::DefaultCloudEventSource(conninfo, table);  // before the password
  OUTBOXD_RETURN_IF_ERROR(ApplyPgSecrets(flags.secrets, conninfo));
  OUTBOXD_RETURN_IF_ERROR(ResolveSinkFlags(flags.sink));
  format.ce_prefix = CloudEventsPrefix(flags.sink);
  return ResolveFormat(flags.format, format);
}

std::string CloudEventsPrefix(const SinkFlags& sink) {
  if (sink.sink == "rabbitmq") return "cloudEvents_";  // the AMQP binding's
  if (sink.sink == "nats") return "ce-";               // the NATS binding's
  return "ce_";                                        // the Kafka binding's
}

void AddDedupeFlag(CLI::App* cmd, std::string& dedupe, std::string_view what) {
  Flag(cmd, "dedupe", dedupe,
       absl::StrCat(std::string(what),
                    " (Kafka: the topic read back, each event by id): auto (where the "
                    "broker can be read back, a notice where not), on (Kafka only; a partition "
                    "that cannot be read back is a warning) or off (at least once)"))
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
}

absl::Status CheckDedupe(std::string_view dedupe, const SinkFlags& sink) {
  if (dedupe != "on" || sink.is_kafka()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      "--dedupe on needs --sink kafka: only Kafka can be read back (RabbitMQ stays at "
      "least once; NATS deduplicates by message id on the server); use --dedupe auto");
}

}  // namespace outboxd::cli
