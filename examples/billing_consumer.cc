// outboxd-example-billing: the billing service as an idempotent consumer
// (src/inbox/): one invoice per `pedido.confirmado`, however many times the broker
// delivers it: Kafka (--brokers), RabbitMQ (--sink rabbitmq --amqp-url URL: the
// queue --group, declared durable and bound to --exchange with each --topic) or NATS
// JetStream (--sink nats --nats-url URL or --nats-url-file PATH: the durable consumer
// --durable, default --group, on --stream, filtered by the one --topic), with the same
// flag names as the relay's. One line per message on stdout:
//
//   processed pedido-1 message 0b6f1a52-... -> fatura 1 (pedido.confirmado[2]@0)
//   duplicate pedido-1 message 0b6f1a52-... -> skipped, no second invoice (pedido.confirmado[2]@1)
//
// Runs until SIGINT/SIGTERM (exit 0). Exit 1 when a message has no usable `id` header
// (it is never skipped silently: its offset stays uncommitted, it is never acked), 2
// for bad flags or an unreachable database, RabbitMQ or NATS.
#include <csignal>
#include <iostream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "base/duration.h"
#include "base/read_file.h"
#include "examples/billing.h"
#include "examples/password_file.h"
#include "inbox/consumer.h"
#include "outbox/trace_context.h"

namespace {

using outboxd::inbox::Delivery;

volatile std::sig_atomic_t g_stop = 0;

struct Flags {
  outboxd::inbox::ConsumerOptions consumer{.group_id = "billing", .topics = {"pedido.confirmado"}};
  std::string pg;
  std::string pg_password_file;
  std::vector<std::string> kafka;
  std::string sink = "kafka";
  std::string nats_url_file;
  std::string ack_wait = "30s";
};

absl::Status ParseKafka(const std::vector<std::string>& pairs,
                        outboxd::inbox::ConsumerOptions& options) {
  for (const std::string& pair : pairs) {
    const size_t eq = pair.find('=');
    if (eq == std::string::npos || eq == 0) {
      return absl::InvalidArgumentError("--kafka " + pair + ": expected KEY=VALUE");
    }
    options.properties.emplace_back(pair.substr(0, eq), pair.substr(eq + 1));
  }
  return absl::OkStatus();
}

void AddNatsFlags(CLI::App& app, Flags& flags) {
  app.add_option("--nats-url", flags.consumer.nats_url,
                 "NATS: nats://host:4222, several comma-separated, tls://... for TLS")
      ->envname("OUTBOXD_NATS_URL");
  app.add_option("--nats-url-file", flags.nats_url_file,
                 "NATS: file holding the URL, for one with nats://user:password@...")
      ->envname("OUTBOXD_NATS_URL_FILE");
  app.add_option("--nats-creds-file", flags.consumer.nats_creds_file,
                 "NATS: credentials file (user JWT and NKey seed)")
      ->envname("OUTBOXD_NATS_CREDS_FILE");
  app.add_option("--stream", flags.consumer.stream, "NATS: the relay's JetStream stream")
      ->envname("OUTBOXD_STREAM")
      ->capture_default_str();
  app.add_option("--durable", flags.consumer.durable,
                 "NATS: the durable JetStream consumer (default: --group)");
  app.add_option("--ack-wait", flags.ack_wait,
                 "NATS: a message not acked within this is delivered again (set when the "
                 "durable consumer is created)")
      ->capture_default_str();
}

// The URL from --nats-url-file (one trailing newline stripped), so that a password in
// it stays out of argv and the environment.
absl::Status ResolveNats(Flags& flags) {
  outboxd::inbox::ConsumerOptions& c = flags.consumer;
  if (!flags.nats_url_file.empty()) {
    absl::StatusOr<std::string> url = outboxd::ReadFile(flags.nats_url_file, 64 * 1024);
    if (!url.ok()) {
      return absl::InvalidArgumentError("--nats-url-file " + flags.nats_url_file +
                                        ": cannot read it; give a file this user can read");
    }
    c.nats_url = std::string(absl::StripTrailingAsciiWhitespace(*url));
  }
  if (c.nats_url.empty()) {
    return absl::InvalidArgumentError("--nats-url or --nats-url-file is required with --sink nats");
  }
  absl::StatusOr<absl::Duration> ack_wait = outboxd::ParseDuration(flags.ack_wait);
  if (!ack_wait.ok() || *ack_wait <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--ack-wait " + flags.ack_wait +
                                      ": expected a positive duration such as 30s");
  }
  c.ack_wait = *ack_wait;
  return absl::OkStatus();
}

// Only the chosen broker's URL is kept (another may come from the environment).
absl::Status ChooseSink(Flags& flags) {
  outboxd::inbox::ConsumerOptions& c = flags.consumer;
  if (flags.sink != "rabbitmq") c.amqp_url.clear();
  if (flags.sink != "nats") c.nats_url.clear();
  if (flags.sink == "kafka" && c.brokers.empty()) {
    return absl::InvalidArgumentError("--brokers is required with --sink kafka");
  }
  if (flags.sink == "rabbitmq" && c.amqp_url.empty()) {
    return absl::InvalidArgumentError("--amqp-url is required with --sink rabbitmq");
  }
  if (flags.sink == "nats") return ResolveNats(flags);
  return absl::OkStatus();
}

// The trace id of the event's W3C traceparent header, or "" when it has none (the
// relay publishes only a valid one: docs/tracing.md). What a service would hand its
// tracer to continue the writer's trace; here it is logged beside the event.
std::string_view TraceId(const outboxd::inbox::Message& m) {
  for (const auto& [name, value] : m.headers) {
    if (name == outboxd::outbox::kTraceparent && !outboxd::outbox::TraceparentDefect(value)) {
      return std::string_view(value).substr(3, 32);
    }
  }
  return {};
}

void Print(const Delivery& d, int64_t invoice) {
  const outboxd::inbox::Message& m = d.message;
  std::cout << outboxd::inbox::ResultName(d.result) << " " << m.key << " message " << m.id;
  if (const std::string_view trace = TraceId(m); !trace.empty()) std::cout << " trace " << trace;
  std::cout << " -> ";
  if (d.result == Delivery::Result::kProcessed) std::cout << "fatura " << invoice;
  if (d.result == Delivery::Result::kDuplicate) std::cout << "skipped, no second invoice";
  if (d.result == Delivery::Result::kFailed) {
    std::cout << "attempt " << d.attempt << " rolled back (" << d.error.message() << "), retrying";
  }
  if (m.partition < 0) {  // RabbitMQ: the delivery tag; NATS: the stream sequence
    std::cout << " (" << m.topic << " delivery " << m.offset << ")" << std::endl;
  } else {
    std::cout << " (" << m.topic << "[" << m.partition << "]@" << m.offset << ")" << std::endl;
  }
}

int Fail(const absl::Status& status, int code) {
  std::cerr << "outboxd-example-billing: " << status.message() << std::endl;
  return code;
}

int Consume(outboxd::inbox::Consumer& consumer, const int64_t& last_invoice) {
  while (!g_stop) {
    absl::StatusOr<std::optional<Delivery>> delivery = consumer.PollOnce(absl::Milliseconds(200));
    if (!delivery.ok()) return Fail(delivery.status(), 1);
    if (*delivery) Print(**delivery, last_invoice);
  }
  consumer.Close();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  CLI::App app{"Bills each confirmed order once, through the inbox table"};
  app.add_option("--pg", flags.pg, "PostgreSQL conninfo or URI")->required()->envname("OUTBOXD_PG");
  app.add_option("--pg-password-file", flags.pg_password_file,
                 "File holding the PostgreSQL password (kept out of argv and environment)")
      ->envname("OUTBOXD_PG_PASSWORD_FILE");
  app.add_option("--sink", flags.sink, "The broker: kafka, rabbitmq or nats")
      ->envname("OUTBOXD_SINK")
      ->check(CLI::IsMember({"kafka", "rabbitmq", "nats"}))
      ->capture_default_str();
  app.add_option("--brokers", flags.consumer.brokers, "Kafka bootstrap servers")
      ->envname("OUTBOXD_BROKERS");
  app.add_option("--amqp-url", flags.consumer.amqp_url,
                 "RabbitMQ: amqp://user:pass@host:port/vhost")
      ->envname("OUTBOXD_AMQP_URL");
  app.add_option("--exchange", flags.consumer.exchange, "RabbitMQ: the relay's exchange")
      ->envname("OUTBOXD_EXCHANGE")
      ->capture_default_str();
  AddNatsFlags(app, flags);
  app.add_option("--group", flags.consumer.group_id,
                 "Consumer group (RabbitMQ: the queue; NATS: the durable consumer)")
      ->capture_default_str();
  app.add_option("--topic", flags.consumer.topics,
                 "Topic(s) to consume (RabbitMQ: the queue's binding keys; NATS: one subject)")
      ->capture_default_str();
  app.add_option("--kafka", flags.kafka, "librdkafka property KEY=VALUE (repeatable)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (absl::Status s = ParseKafka(flags.kafka, flags.consumer); !s.ok()) return Fail(s, 2);
  if (absl::Status s = ChooseSink(flags); !s.ok()) return Fail(s, 2);

  absl::StatusOr<std::string> pg =
      outboxd::examples::WithPasswordFile(flags.pg, flags.pg_password_file);
  if (!pg.ok()) return Fail(pg.status(), 2);
  absl::StatusOr<outboxd::pg::Connection> conn = outboxd::pg::Connection::Open(*pg);
  if (!conn.ok()) return Fail(conn.status(), 2);
  if (absl::Status s = outboxd::examples::EnsureInvoicesTable(*conn); !s.ok()) return Fail(s, 2);

  int64_t last_invoice = 0;
  outboxd::inbox::Handler bill = [&last_invoice](outboxd::pg::Connection& c,
                                                 const outboxd::inbox::Message& m) {
    absl::StatusOr<int64_t> invoice = outboxd::examples::IssueInvoice(c, m);
    if (invoice.ok()) last_invoice = *invoice;
    return invoice.status();
  };
  auto consumer =
      outboxd::inbox::Consumer::Create(std::move(*conn), flags.consumer, std::move(bill));
  if (!consumer.ok()) return Fail(consumer.status(), 2);
  std::signal(SIGINT, [](int) { g_stop = 1; });
  std::signal(SIGTERM, [](int) { g_stop = 1; });
  return Consume(**consumer, last_invoice);
}
