// The broker a relay publishes to, for run, poll and dead-letter replay: --sink
// kafka|rabbitmq and the RabbitMQ flags (--amqp-url or --amqp-url-file, --exchange,
// --no-declare, the TLS files), turned into the sink::SinkFactory the relays hold.
// The Kafka flags stay with each command (--brokers, --kafka, ...); only whether
// --brokers is needed depends on --sink.
//
//   SinkFlags sink;
//   AddSinkFlags(cmd, sink);                                   // in Register
//   OUTBOXD_RETURN_IF_ERROR(CheckBrokersGiven(sink, kafka_options));
//   if (sink.kafka()) { ... kafka checks ...; options.make_sink = kafka::Publisher::Factory(..); }
//   else OUTBOXD_ASSIGN_OR_RETURN(options.make_sink, AmqpSinkFactory(sink));
//   spdlog::info("... {}", SinkDescription(sink, kafka_options));
#ifndef OUTBOXD_CLI_SINK_FLAGS_H_
#define OUTBOXD_CLI_SINK_FLAGS_H_

#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kafka/publisher.h"
#include "sink/sink.h"

namespace outboxd::cli {

struct SinkFlags {
  std::string sink = "kafka";
  std::string amqp_url;
  std::string amqp_url_file;
  std::string exchange = "outboxd";
  bool no_declare = false;
  std::string amqp_ca_file;
  std::string amqp_cert_file;
  std::string amqp_key_file;
  bool amqp_no_verify_peer = false;
  bool amqp_no_verify_hostname = false;
  std::string command;       // "outboxd run", for the errors' "see ... --help"
  std::string redacted_url;  // set by AmqpSinkFactory, for the log

  bool kafka() const { return sink == "kafka"; }
};

// --sink, --amqp-url, --amqp-url-file, --exchange, --no-declare, --amqp-ca-file,
// --amqp-cert-file, --amqp-key-file, --amqp-no-verify-peer, --amqp-no-verify-hostname,
// each with its OUTBOXD_* variable.
void AddSinkFlags(CLI::App* cmd, SinkFlags& flags);

// InvalidArgument (exit 2) for an unknown --sink, and for --sink kafka without
// --brokers (nor bootstrap.servers in --kafka): the flag is required for Kafka only.
absl::Status CheckBrokersGiven(const SinkFlags& flags, const kafka::PublisherOptions& kafka);

// The RabbitMQ sink's factory: the URL from --amqp-url or --amqp-url-file (a secret
// file, as --pg-password-file: its password is redacted from every log line), checked
// but not connected to. InvalidArgument naming the flag and the fix otherwise.
absl::StatusOr<sink::SinkFactory> AmqpSinkFactory(SinkFlags& flags);

// The sink of a command whose failed attempts leave the row to be tried again (poll,
// dead-letter replay), so a finite Kafka message timeout is safe: RabbitMQ's
// (AmqpSinkFactory), or Kafka's once CheckKafkaDurability passed `kafka` (its on_log set
// here). `unsafe_kafka`: whether an allowed unsafe Kafka setting is in force.
//   OUTBOXD_ASSIGN_OR_RETURN(options.make_sink,
//       RetryingSinkFactory(sink, kafka_options, allow_unsafe_kafka, &unsafe_kafka));
absl::StatusOr<sink::SinkFactory> RetryingSinkFactory(SinkFlags& flags,
                                                      kafka::PublisherOptions& kafka,
                                                      bool allow_unsafe_kafka, bool* unsafe_kafka);

// For the start line (after AmqpSinkFactory), never with a password: "Kafka brokers k1:9092" or
// "RabbitMQ amqp://127.0.0.1:5672/ exchange outboxd".
std::string SinkDescription(const SinkFlags& flags, const kafka::PublisherOptions& kafka);

}  // namespace outboxd::cli

#endif  // OUTBOXD_CLI_SINK_FLAGS_H_
