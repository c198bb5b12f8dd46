// outboxd-bench-probe: an independent Kafka consumer that measures insert -> broker
// latency for scripts/bench, without touching the relay.
//
//   $ outboxd-bench-probe --brokers B --topic bench.run --expect 15000
//         --ready-file /tmp/ready --raw /tmp/latencies.tsv
//   {"count":15000,"recv_ms":{"p50":..,"p99":..,"p999":..,"max":..},"create_ms":{...}}
//
// Every payload carries {"t": <insert time, epoch microseconds>} taken from
// clock_timestamp() in the inserting statement. For each message the probe records two
// latencies against that time:
//   - recv: when this consumer received the message (CLOCK_REALTIME, same machine).
//     The broker had stored, so acknowledged-or-about-to, the message before it could
//     serve it: an UPPER bound of insert -> ack (plus up to fetch.wait.max.ms = 1 ms).
//   - create: the message's CreateTime, stamped by the relay's librdkafka when it
//     enqueued the message: a LOWER bound of insert -> ack (the mock cluster of
//     librdkafka 2.0.2 cannot stamp LogAppendTime).
// It reads partition 0 from the beginning (scripts/bench uses one-partition topics)
// until it has seen --expect messages or nothing arrived for --idle seconds, then prints
// one JSON line. When the count is only known once the load has ended (pgbench -T),
// pass --expect-file instead: the probe reads the count from that file once it appears
// (write it whole, e.g. by rename). Exit code 0 when all expected messages arrived, 1
// otherwise, 2 on bad flags.
//
// With --amqp-url (and --exchange, --queue, --routing-key) it reads RabbitMQ instead:
// it declares the relay's durable topic exchange, a durable queue bound with the
// routing key, and consumes it (no-ack). Only recv is measured there (AMQP's
// timestamp has whole seconds; create_ms is null), and it is not an upper bound of
// the publisher confirm: RabbitMQ may deliver a persistent message to a consumer
// before it has written it to disk and confirmed it. The confirm itself is in the
// relay's outboxd_commit_to_ack_seconds histogram, which scripts/bench reports beside.
//
//   $ outboxd-bench-probe --amqp-url amqp://guest:guest@127.0.0.1:5672/%2f --exchange bench
//         --queue live_1000_rabbitmq --routing-key live_1000_rabbitmq --expect-file F
//
// With --nats-url (and --stream, --stream-subjects, --subject) it reads NATS JetStream:
// it creates the stream when missing (file storage, as the relay creates it, taking
// --stream-subjects) and reads --subject through an ordered push consumer from the
// stream's start. recv is as for Kafka, an upper bound of insert -> PubAck (the stream
// stored the message before delivering it); create is the stream's own store
// timestamp (the server's clock, on this machine), which the PubAck follows by one
// message from the server: the closest to insert -> PubAck of the three brokers.
//
//   $ outboxd-bench-probe --nats-url nats://127.0.0.1:4222 --stream BENCH
//         --stream-subjects 'bench.>' --subject bench.live_1000_nats --expect-file F
#include <amqp.h>
#include <amqp_framing.h>
#include <librdkafka/rdkafka.h>
#include <nats/nats.h>
#include <sys/time.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "amqp/connection.h"
#include "nats/connection.h"

namespace {

namespace amqp = outboxd::amqp;
namespace nats = outboxd::nats;

struct Flags {
  std::string brokers;
  std::string topic;
  long expect = 0;
  std::string expect_file;
  double idle_s = 10;
  std::string ready_file;
  std::string raw;
  // RabbitMQ instead of Kafka.
  std::string amqp_url;
  std::string exchange = "outboxd";
  std::string queue;
  std::string routing_key;
  // NATS JetStream instead of Kafka.
  std::string nats_url;
  std::string stream;
  std::string stream_subjects = ">";
  std::string subject;
};

// One message as the probe got it: the payload and, from Kafka, its CreateTime (the
// middle of its millisecond), from NATS the stream's store time, in epoch microseconds.
struct Got {
  std::string payload;
  std::optional<int64_t> created_us;
};
// Waits up to timeout_ms for one message; std::nullopt when none came.
using PollFn = std::function<std::optional<Got>(int timeout_ms)>;

int64_t NowMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The value of "t" in a payload like {"t": 1764693961123456}; -1 if absent.
int64_t InsertMicros(const char* data, size_t len) {
  const std::string s(data, len);
  const size_t key = s.find("\"t\"");
  if (key == std::string::npos) return -1;
  size_t i = s.find(':', key);
  if (i == std::string::npos) return -1;
  return std::strtoll(s.c_str() + i + 1, nullptr, 10);
}

// Nearest-rank percentile of sorted values, in milliseconds.
double Percentile(const std::vector<int64_t>& sorted, double p) {
  if (sorted.empty()) return -1;
  size_t rank = static_cast<size_t>(std::ceil(p * sorted.size()));
  rank = std::clamp<size_t>(rank, 1, sorted.size());
  return sorted[rank - 1] / 1000.0;
}

std::string Summary(std::vector<int64_t> us) {
  std::sort(us.begin(), us.end());
  char buf[256];
  std::snprintf(buf, sizeof(buf), "{\"p50\":%.3f,\"p99\":%.3f,\"p999\":%.3f,\"max\":%.3f}",
                Percentile(us, 0.50), Percentile(us, 0.99), Percentile(us, 0.999),
                Percentile(us, 1.0));
  return buf;
}

bool Set(rd_kafka_conf_t* conf, const char* name, const std::string& value) {
  char errstr[512];
  if (rd_kafka_conf_set(conf, name, value.c_str(), errstr, sizeof(errstr)) == RD_KAFKA_CONF_OK) {
    return true;
  }
  std::fprintf(stderr, "outboxd-bench-probe: %s: %s\n", name, errstr);
  return false;
}

rd_kafka_t* NewConsumer(const Flags& flags) {
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  // assign() in 2.0.2 wants a group id; we never subscribe, so it is never joined.
  const bool ok =
      Set(conf, "bootstrap.servers", flags.brokers) &&
      Set(conf, "group.id", "outboxd-bench-probe") && Set(conf, "enable.auto.commit", "false") &&
      // The mock answers an empty fetch after a fixed MaxWait instead of when
      // data arrives: keep that wait (the error on recv) at 1 ms.
      Set(conf, "fetch.wait.max.ms", "1") && Set(conf, "max.partition.fetch.bytes", "4194304") &&
      Set(conf, "log.connection.close", "false");
  char errstr[512];
  rd_kafka_t* rk = ok ? rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr)) : nullptr;
  if (rk == nullptr) {
    if (ok) std::fprintf(stderr, "outboxd-bench-probe: %s\n", errstr);
    rd_kafka_conf_destroy(conf);
    return nullptr;
  }
  rd_kafka_poll_set_consumer(rk);
  return rk;
}

// Connects to the partition's leader before the load starts, so the first messages'
// latency is not the consumer's connection set-up.
bool AssignFromStart(rd_kafka_t* rk, const std::string& topic) {
  int64_t low = 0;
  int64_t high = 0;
  rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR;
  for (int attempt = 0; attempt < 100; ++attempt) {
    err = rd_kafka_query_watermark_offsets(rk, topic.c_str(), 0, &low, &high, 1000);
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR) break;
  }
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    std::fprintf(stderr, "outboxd-bench-probe: topic %s partition 0: %s\n", topic.c_str(),
                 rd_kafka_err2str(err));
    return false;
  }
  rd_kafka_topic_partition_list_t* parts = rd_kafka_topic_partition_list_new(1);
  rd_kafka_topic_partition_list_add(parts, topic.c_str(), 0)->offset = RD_KAFKA_OFFSET_BEGINNING;
  err = rd_kafka_assign(rk, parts);
  rd_kafka_topic_partition_list_destroy(parts);
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    std::fprintf(stderr, "outboxd-bench-probe: assign: %s\n", rd_kafka_err2str(err));
    return false;
  }
  return true;
}

// The count in FILE, or 0 while it does not exist yet (or holds no number).
long ExpectFromFile(const std::string& file) {
  FILE* f = std::fopen(file.c_str(), "r");
  if (f == nullptr) return 0;
  long expect = 0;
  if (std::fscanf(f, "%ld", &expect) != 1) expect = 0;
  std::fclose(f);
  return expect;
}

void Ready(const Flags& flags) {
  if (!flags.ready_file.empty()) {
    if (FILE* f = std::fopen(flags.ready_file.c_str(), "w")) std::fclose(f);
  }
}

// Reads messages until the expected count or --idle; prints the JSON line and returns
// the exit code.
int Collect(const Flags& flags, const PollFn& poll) {
  FILE* raw = flags.raw.empty() ? nullptr : std::fopen(flags.raw.c_str(), "w");
  std::vector<int64_t> recv_us;
  std::vector<int64_t> create_us;
  recv_us.reserve(flags.expect > 0 ? flags.expect : 1024);
  create_us.reserve(recv_us.capacity());
  long unparsed = 0;
  int64_t last_arrival = NowMicros();
  const int64_t idle_us = static_cast<int64_t>(flags.idle_s * 1e6);
  long expect = flags.expect;
  int64_t next_file_check = 0;
  while (expect <= 0 || static_cast<long>(recv_us.size()) < expect) {
    const int64_t loop_start = NowMicros();
    if (loop_start - last_arrival > idle_us) break;
    if (expect <= 0 && !flags.expect_file.empty() && loop_start >= next_file_check) {
      // Every 100 ms, not once per message; the count may already be reached.
      expect = ExpectFromFile(flags.expect_file);
      next_file_check = loop_start + 100000;
      if (expect > 0) continue;
    }
    std::optional<Got> got = poll(100);
    if (!got) continue;
    const int64_t now = NowMicros();
    last_arrival = now;
    const int64_t inserted = InsertMicros(got->payload.data(), got->payload.size());
    if (inserted <= 0) {
      ++unparsed;
      continue;
    }
    recv_us.push_back(now - inserted);
    if (got->created_us) create_us.push_back(*got->created_us - inserted);
    if (raw != nullptr) {
      std::fprintf(raw, "%" PRId64 "\t%" PRId64 "\n", recv_us.back(),
                   got->created_us ? create_us.back() : int64_t{-1});
    }
  }
  if (raw != nullptr) std::fclose(raw);
  const long count = static_cast<long>(recv_us.size());
  std::printf("{\"count\":%ld,\"unparsed\":%ld,\"recv_ms\":%s,\"create_ms\":%s}\n", count, unparsed,
              Summary(recv_us).c_str(), create_us.empty() ? "null" : Summary(create_us).c_str());
  // With --expect-file, a count that never came is a failure, not "stop on idle".
  const bool complete =
      flags.expect_file.empty() ? expect <= 0 || count >= expect : expect > 0 && count >= expect;
  return complete && unparsed == 0 ? 0 : 1;
}

int RunKafka(const Flags& flags) {
  rd_kafka_t* rk = NewConsumer(flags);
  if (rk == nullptr || !AssignFromStart(rk, flags.topic)) return 2;
  Ready(flags);
  const int code = Collect(flags, [rk](int timeout_ms) -> std::optional<Got> {
    rd_kafka_message_t* m = rd_kafka_consumer_poll(rk, timeout_ms);
    if (m == nullptr) return std::nullopt;
    std::optional<Got> got;
    if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
      rd_kafka_timestamp_type_t type;
      // CreateTime has millisecond resolution: compare at the middle of that ms.
      got = Got{.payload = std::string(static_cast<const char*>(m->payload), m->len),
                .created_us = rd_kafka_message_timestamp(m, &type) * 1000 + 500};
    }
    rd_kafka_message_destroy(m);
    return got;
  });
  rd_kafka_consumer_close(rk);
  rd_kafka_destroy(rk);
  return code;
}

// Connects (amqp/connection.h, as the relay does), declares the exchange, the durable
// queue and its binding, and starts a no-ack consumer on it; nullptr after printing
// why not.
std::unique_ptr<amqp::Connection> AmqpConsumer(const Flags& flags) {
  absl::StatusOr<std::unique_ptr<amqp::Connection>> conn =
      amqp::Connection::Open({.url = flags.amqp_url,
                              .heartbeat = absl::ZeroDuration(),
                              .connection_name = "outboxd-bench-probe"});
  const std::string keys[] = {flags.routing_key};
  absl::Status s = conn.status();
  if (s.ok()) s = (*conn)->DeclareExchange(flags.exchange, amqp::ExchangeMode::kDeclare);
  if (s.ok()) s = (*conn)->DeclareBoundQueue(flags.exchange, flags.queue, keys);
  if (s.ok()) {
    amqp_basic_consume((*conn)->get(), amqp::kChannel, amqp_cstring_bytes(flags.queue.c_str()),
                       amqp_empty_bytes, 0, /*no_ack=*/1, 0, amqp_empty_table);
    s = (*conn)->LastReply("basic.consume");
  }
  if (!s.ok()) {
    std::fprintf(stderr, "outboxd-bench-probe: %s\n", std::string(s.message()).c_str());
    return nullptr;
  }
  return *std::move(conn);
}

int RunAmqp(const Flags& flags) {
  std::unique_ptr<amqp::Connection> connection = AmqpConsumer(flags);
  if (connection == nullptr) return 2;
  amqp_connection_state_t conn = connection->get();
  Ready(flags);
  const int code = Collect(flags, [conn](int timeout_ms) -> std::optional<Got> {
    amqp_maybe_release_buffers(conn);
    timeval timeout{.tv_sec = 0, .tv_usec = timeout_ms * 1000};
    amqp_envelope_t envelope;
    amqp_rpc_reply_t reply = amqp_consume_message(conn, &envelope, &timeout, 0);
    if (reply.reply_type != AMQP_RESPONSE_NORMAL) return std::nullopt;
    Got got{.payload = std::string(static_cast<const char*>(envelope.message.body.bytes),
                                   envelope.message.body.len)};
    amqp_destroy_envelope(&envelope);
    return got;
  });
  connection->Close();
  return code;
}

// The stream as the relay would create it, when missing: file storage, 2-minute
// duplicate window. False after printing why not.
bool EnsureStream(jsCtx* js, const Flags& flags) {
  jsStreamInfo* info = nullptr;
  jsErrCode code = static_cast<jsErrCode>(0);
  if (js_GetStreamInfo(&info, js, flags.stream.c_str(), nullptr, &code) == NATS_OK) {
    jsStreamInfo_Destroy(info);
    return true;
  }
  jsStreamConfig config;
  jsStreamConfig_Init(&config);
  const char* subjects[] = {flags.stream_subjects.c_str()};
  config.Name = flags.stream.c_str();
  config.Subjects = subjects;
  config.SubjectsLen = 1;
  config.Storage = js_FileStorage;
  config.Duplicates = 120LL * 1000 * 1000 * 1000;
  if (js_AddStream(&info, js, &config, nullptr, &code) != NATS_OK) {
    std::fprintf(stderr, "outboxd-bench-probe: cannot create stream %s: %s (%d)\n",
                 flags.stream.c_str(), nats_GetLastError(nullptr), static_cast<int>(code));
    return false;
  }
  jsStreamInfo_Destroy(info);
  return true;
}

int RunNats(const Flags& flags) {
  absl::StatusOr<std::unique_ptr<nats::Connection>> connection = nats::Connection::Open(
      {.url = flags.nats_url, .name = "outboxd-bench-probe", .unreachable = nats::Unreachable::kFail});
  if (!connection.ok()) {
    std::fprintf(stderr, "outboxd-bench-probe: %s\n", connection.status().ToString().c_str());
    return 2;
  }
  jsCtx* js = nullptr;
  natsSubscription* sub = nullptr;
  jsSubOptions so;
  jsSubOptions_Init(&so);
  so.Stream = flags.stream.c_str();
  so.Ordered = true;  // push, no acks, from the stream's first message
  jsErrCode code = static_cast<jsErrCode>(0);
  bool ok = natsConnection_JetStream(&js, (*connection)->get(), nullptr) == NATS_OK &&
            EnsureStream(js, flags) &&
            js_SubscribeSync(&sub, js, flags.subject.c_str(), nullptr, &so, &code) == NATS_OK;
  int exit_code = 2;
  if (!ok) {
    std::fprintf(stderr, "outboxd-bench-probe: NATS at %s: %s\n", (*connection)->where().c_str(),
                 nats_GetLastError(nullptr));
  } else {
    Ready(flags);
    exit_code = Collect(flags, [sub](int timeout_ms) -> std::optional<Got> {
      natsMsg* m = nullptr;
      if (natsSubscription_NextMsg(&m, sub, timeout_ms) != NATS_OK) return std::nullopt;
      Got got{.payload = std::string(natsMsg_GetData(m), natsMsg_GetDataLength(m))};
      jsMsgMetaData* meta = nullptr;
      if (natsMsg_GetMetaData(&meta, m) == NATS_OK) {
        got.created_us = meta->Timestamp / 1000;
        jsMsgMetaData_Destroy(meta);
      }
      natsMsg_Destroy(m);
      return got;
    });
  }
  natsSubscription_Destroy(sub);
  jsCtx_Destroy(js);
  return exit_code;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  CLI::App app("Measures insert -> broker latency of outbox events (scripts/bench)");
  app.add_option("--brokers", flags.brokers, "Bootstrap servers");
  app.add_option("--topic", flags.topic, "Topic (partition 0 is read)");
  app.add_option("--amqp-url", flags.amqp_url, "Read RabbitMQ at this URL instead of Kafka");
  app.add_option("--exchange", flags.exchange, "RabbitMQ: the relay's exchange");
  app.add_option("--queue", flags.queue, "RabbitMQ: the queue to declare, bind and read");
  app.add_option("--routing-key", flags.routing_key, "RabbitMQ: the queue's binding key");
  app.add_option("--nats-url", flags.nats_url, "Read NATS JetStream at this URL instead of Kafka");
  app.add_option("--stream", flags.stream, "NATS: the stream (created when missing)");
  app.add_option("--stream-subjects", flags.stream_subjects, "NATS: a created stream's subjects");
  app.add_option("--subject", flags.subject, "NATS: the subject to read");
  app.add_option("--expect", flags.expect, "Stop after this many messages (0: on idle)");
  app.add_option("--expect-file", flags.expect_file,
                 "Stop after as many messages as the number this file holds once it appears");
  app.add_option("--idle", flags.idle_s, "Stop after this many seconds without a message");
  app.add_option("--ready-file", flags.ready_file, "Created once the consumer is assigned");
  app.add_option("--raw", flags.raw, "Write recv_us<TAB>create_us per message here");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (!flags.nats_url.empty()) {
    if (flags.stream.empty() || flags.subject.empty()) {
      std::fprintf(stderr, "outboxd-bench-probe: --nats-url needs --stream and --subject\n");
      return 2;
    }
    return RunNats(flags);
  }
  if (!flags.amqp_url.empty()) {
    if (flags.queue.empty() || flags.routing_key.empty()) {
      std::fprintf(stderr, "outboxd-bench-probe: --amqp-url needs --queue and --routing-key\n");
      return 2;
    }
    return RunAmqp(flags);
  }
  if (flags.brokers.empty() || flags.topic.empty()) {
    std::fprintf(stderr,
                 "outboxd-bench-probe: --brokers and --topic are required (or --amqp-url)\n");
    return 2;
  }
  return RunKafka(flags);
}
