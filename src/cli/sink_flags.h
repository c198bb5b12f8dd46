// The broker a relay publishes to, for run, poll and dead-letter replay: --sink
// kafka|rabbitmq and each sink's flags beside each other, turned into the
// sink::SinkFactory the relays hold. Kafka's: --brokers, --kafka, --kafka-secret-file,
// --allow-unsafe-kafka; RabbitMQ's: --amqp-url or --amqp-url-file, --exchange, the TLS
// files; NATS JetStream's: --nats-url or --nats-url-file, --nats-creds-file, --stream;
// --no-declare for both. Another broker adds its flags struct, its Add and its factory
// here, and one case to MakeSinkFactory.
//
//   SinkFlags sink;
//   AddSinkFlags(cmd, sink);                                   // in Register
//   sink.topic_template = options.topic_template;              // run, poll: NATS subjects
//   OUTBOXD_RETURN_IF_ERROR(ResolveSinkFlags(sink));           // with the other checks
//   OUTBOXD_ASSIGN_OR_RETURN(options.make_sink,
//                            MakeSinkFactory(sink, kafka::MessageTimeout::kMustBeInfinite));
//   spdlog::info("... {}", SinkDescription(sink));
#ifndef OUTBOXD_CLI_SINK_FLAGS_H_
#define OUTBOXD_CLI_SINK_FLAGS_H_

#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "amqp/publisher.h"
#include "kafka/publisher.h"
#include "nats/sink.h"
#include "sink/sink.h"

namespace outboxd::cli {

// --brokers, --kafka, --kafka-secret-file, --allow-unsafe-kafka.
struct KafkaFlags {
  kafka::PublisherOptions options;        // --brokers; ResolveSinkFlags adds the rest
  std::vector<std::string> properties;    // --kafka KEY=VALUE
  std::vector<std::string> secret_files;  // --kafka-secret-file KEY=PATH
  bool allow_unsafe = false;              // --allow-unsafe-kafka
  bool unsafe = false;                    // allowed, and in force: outboxd_unsafe_kafka_config
};

// --amqp-url, --amqp-url-file, --exchange, --amqp-ca-file, --amqp-cert-file,
// --amqp-key-file, --amqp-no-verify-peer, --amqp-no-verify-hostname.
struct AmqpFlags {
  amqp::PublisherOptions options;  // the URL (from either flag), exchange and TLS files
  std::string url_file;
  bool no_verify_peer = false;
  bool no_verify_hostname = false;
  std::string redacted_url;  // set by MakeSinkFactory, for the log
};

// --nats-url, --nats-url-file, --nats-creds-file, --stream.
struct NatsFlags {
  nats::SinkOptions options;  // the URL (from either flag), creds file and stream name
  std::string url_file;
  std::string redacted_url;  // set by MakeSinkFactory, for the log
};

struct SinkFlags {
  std::string sink = "kafka";
  KafkaFlags kafka;
  AmqpFlags amqp;
  NatsFlags nats;
  // --no-declare: RabbitMQ's exchange and NATS' stream are only checked, not made.
  bool no_declare = false;
  // Set by run and poll before MakeSinkFactory: the --topic template, whose subjects a
  // NATS stream created at start takes (StreamSubjects). Left empty by dead-letter
  // replay, which only checks that the stream exists.
  std::string topic_template;
  std::string command;  // "outboxd run", for the errors' "see ... --help"

  bool is_kafka() const { return sink == "kafka"; }
};

// --sink, then Kafka's flags and RabbitMQ's, each with its OUTBOXD_* variable.
// `brokers_help`: --brokers' line in this command's --help.
void AddSinkFlags(CLI::App* cmd, SinkFlags& flags,
                  const std::string& brokers_help =
                      "Kafka bootstrap servers HOST:PORT[,...] (required with --sink kafka)");

// The checks of the flags themselves, before anything connects: --kafka pairs and
// --kafka-secret-file files read into the Kafka options (secrets marked for
// redaction), and --brokers (or bootstrap.servers in --kafka) given with --sink kafka.
// InvalidArgument (exit 2) with the fix.
absl::Status ResolveSinkFlags(SinkFlags& flags);

// The chosen sink's factory, after ResolveSinkFlags. Kafka: its durability checked
// (CheckKafkaDurability with `timeout`: kMustBeInfinite for run, whose timed-out event
// would be dead-lettered and passed; kMayBeFinite for poll and dead-letter replay,
// whose failed attempt leaves the row to be tried again), librdkafka's log routed to
// ours. RabbitMQ: the URL from --amqp-url or --amqp-url-file (a secret file, as
// --pg-password-file: its password is redacted from every log line), checked but not
// connected to. NATS: the same for --nats-url / --nats-url-file, --nats-creds-file
// checked as a secret file, and the stream created with StreamSubjects(topic_template)
// unless --no-declare or no template (replay). InvalidArgument (exit 2) naming the flag
// and the fix otherwise.
absl::StatusOr<sink::SinkFactory> MakeSinkFactory(SinkFlags& flags, kafka::MessageTimeout timeout);

// For the start line (after MakeSinkFactory), never with a password: "Kafka brokers
// k1:9092", "RabbitMQ amqp://127.0.0.1:5672/ exchange outboxd" or "NATS
// nats://127.0.0.1:4222 stream OUTBOXD".
std::string SinkDescription(const SinkFlags& flags);

// The subject a created stream takes for a --topic template: its dot-separated tokens
// up to the first one with a {placeholder}, then ">" (a placeholder's value may hold
// dots, as "pedido.confirmado" does, so one "*" would not cover it):
//   StreamSubjects("orders.{type}")     -> "orders.>"
//   StreamSubjects("{type}")            -> ">"
//   StreamSubjects("cdc.{table}.{type}") -> "cdc.>"
//   StreamSubjects("audit")             -> "audit"
std::string StreamSubjects(const std::string& topic_template);

}  // namespace outboxd::cli

#endif  // OUTBOXD_CLI_SINK_FLAGS_H_
