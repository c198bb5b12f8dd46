// Consumer over librdkafka's high-level consumer (subscribe, group rebalances handled
// by librdkafka). Offsets are never stored or committed automatically: PollOnce
// commits one message's offset itself, synchronously, after the inbox transaction
// committed; a failed message is sought back to, so the next fetch returns it again.
#include "inbox/consumer.h"

#include <libpq-fe.h>
#include <librdkafka/rdkafka.h>

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/log.h"
#include "base/log_escape.h"
#include "kafka/internal/rdkafka_util.h"

namespace outboxd::inbox {
namespace {

using ConfPtr = std::unique_ptr<rd_kafka_conf_t, decltype(&rd_kafka_conf_destroy)>;
using MessagePtr = std::unique_ptr<rd_kafka_message_t, decltype(&rd_kafka_message_destroy)>;
using ListPtr = std::unique_ptr<rd_kafka_topic_partition_list_t,
                                decltype(&rd_kafka_topic_partition_list_destroy)>;

// Ours first, the user's after (they win); enable.auto.commit last of all.
//   enable.auto.offset.store=false: librdkafka must not remember a position we have
//     not committed to the database yet.
//   auto.offset.reset=earliest: a new group starts with the events published before
//     it first ran, instead of silently skipping them.
//   reconnect.backoff.max.ms=1000: back within a second after a broker outage.
constexpr std::pair<const char*, const char*> kDefaults[] = {
    {"client.id", "outboxd-inbox"},    {"enable.auto.offset.store", "false"},
    {"auto.offset.reset", "earliest"}, {"reconnect.backoff.max.ms", "1000"},
    {"log.connection.close", "false"},
};

int ToMs(absl::Duration d) {
  if (d <= absl::ZeroDuration()) return 0;
  return static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(d), 60'000));
}

using kafka::internal::SetProperty;

absl::StatusOr<ConfPtr> MakeConf(const ConsumerOptions& options) {
  ConfPtr conf(rd_kafka_conf_new(), &rd_kafka_conf_destroy);
  std::vector<std::pair<std::string, std::string>> all = {{"bootstrap.servers", options.brokers},
                                                          {"group.id", options.group_id}};
  all.insert(all.end(), std::begin(kDefaults), std::end(kDefaults));
  all.insert(all.end(), options.properties.begin(), options.properties.end());
  // Not overridable: an automatic commit could run before the database COMMIT and a
  // crash in between would lose the message.
  all.emplace_back("enable.auto.commit", "false");
  for (const auto& [name, value] : all) {
    if (absl::Status s = SetProperty(conf.get(), name, value); !s.ok()) return s;
  }
  return conf;
}

std::string Bytes(const void* data, size_t size) {
  return data == nullptr ? std::string() : std::string(static_cast<const char*>(data), size);
}

Message ToMessage(const rd_kafka_message_t* m, const std::string& id_header) {
  Message out;
  out.topic = rd_kafka_topic_name(m->rkt);
  out.partition = m->partition;
  out.offset = m->offset;
  out.key = Bytes(m->key, m->key_len);
  out.value = Bytes(m->payload, m->len);
  kafka::internal::ForEachHeader(m, [&out](const char* name, const void* value, size_t size) {
    out.headers.emplace_back(name, Bytes(value, size));
  });

  out.id = std::string(out.Header(id_header).value_or(""));
  return out;
}

std::string Where(const Message& m) {
  return absl::StrCat(m.topic, "[", m.partition, "]@", m.offset);
}

}  // namespace

struct Consumer::Kafka {
  std::unique_ptr<rd_kafka_t, decltype(&rd_kafka_destroy)> rk{nullptr, &rd_kafka_destroy};
  bool closed = false;

  // The next fetch of this partition starts at the message again.
  void SeekBack(const rd_kafka_message_t* m) {
    ListPtr list(rd_kafka_topic_partition_list_new(1), &rd_kafka_topic_partition_list_destroy);
    rd_kafka_topic_partition_list_add(list.get(), rd_kafka_topic_name(m->rkt), m->partition)
        ->offset = m->offset;
    if (rd_kafka_error_t* error = rd_kafka_seek_partitions(rk.get(), list.get(), 5000)) {
      // Revoked meanwhile: its next owner resumes from the committed offset anyway.
      spdlog::warn("cannot seek back to {}[{}]@{}: {}", rd_kafka_topic_name(m->rkt), m->partition,
                   m->offset, rd_kafka_error_string(error));
      rd_kafka_error_destroy(error);
    }
  }

  absl::Status Commit(const rd_kafka_message_t* m) {
    rd_kafka_resp_err_t err = rd_kafka_commit_message(rk.get(), m, /*async=*/0);
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR) return absl::OkStatus();
    return absl::UnavailableError(absl::StrCat("offset commit failed: ", rd_kafka_err2str(err)));
  }
};

std::string_view ResultName(Delivery::Result result) {
  switch (result) {
    case Delivery::Result::kProcessed:
      return "processed";
    case Delivery::Result::kDuplicate:
      return "duplicate";
    default:
      return "failed";
  }
}

absl::StatusOr<std::unique_ptr<Consumer>> Consumer::Create(pg::Connection conn,
                                                           ConsumerOptions options,
                                                           Handler handler) {
  if (options.brokers.empty() || options.group_id.empty() || options.topics.empty() || !handler) {
    return absl::InvalidArgumentError(
        "inbox consumer needs brokers, a group id, topics and a handler");
  }
  absl::StatusOr<ConfPtr> conf = MakeConf(options);
  if (!conf.ok()) return conf.status();
  auto kafka = std::make_unique<Kafka>();
  char errstr[512];
  kafka->rk.reset(rd_kafka_new(RD_KAFKA_CONSUMER, conf->get(), errstr, sizeof(errstr)));
  if (kafka->rk == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("Kafka consumer: ", errstr));
  }
  conf->release();  // rd_kafka_new() took it
  rd_kafka_poll_set_consumer(kafka->rk.get());
  ListPtr topics(rd_kafka_topic_partition_list_new(static_cast<int>(options.topics.size())),
                 &rd_kafka_topic_partition_list_destroy);
  for (const std::string& t : options.topics) {
    rd_kafka_topic_partition_list_add(topics.get(), t.c_str(), RD_KAFKA_PARTITION_UA);
  }
  if (rd_kafka_resp_err_t err = rd_kafka_subscribe(kafka->rk.get(), topics.get())) {
    return absl::InvalidArgumentError(absl::StrCat("cannot subscribe: ", rd_kafka_err2str(err)));
  }
  return std::unique_ptr<Consumer>(
      new Consumer(std::move(conn), std::move(options), std::move(handler), std::move(kafka)));
}

Consumer::Consumer(pg::Connection conn, ConsumerOptions options, Handler handler,
                   std::unique_ptr<Kafka> kafka)
    : conn_(std::move(conn)),
      options_(std::move(options)),
      handler_(std::move(handler)),
      kafka_(std::move(kafka)) {}

Consumer::~Consumer() { Close(); }

void Consumer::Close() {
  if (kafka_->closed) return;
  kafka_->closed = true;
  if (rd_kafka_resp_err_t err = rd_kafka_consumer_close(kafka_->rk.get())) {
    spdlog::warn("closing the Kafka consumer: {}", rd_kafka_err2str(err));
  }
}

absl::StatusOr<std::optional<Delivery>> Consumer::PollOnce(absl::Duration timeout) {
  if (kafka_->closed) return absl::FailedPreconditionError("inbox consumer is closed");
  const absl::Time now = absl::Now();
  if (now < resume_at_) {  // backing off after a failure: the retry waits
    absl::SleepFor(std::min(resume_at_ - now, timeout));
    if (absl::Now() < resume_at_) return std::nullopt;
    timeout = absl::ZeroDuration();
  }
  MessagePtr msg(rd_kafka_consumer_poll(kafka_->rk.get(), ToMs(timeout)),
                 &rd_kafka_message_destroy);
  if (msg == nullptr) return std::nullopt;
  if (msg->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    if (rd_kafka_fatal_error(kafka_->rk.get(), nullptr, 0) != RD_KAFKA_RESP_ERR_NO_ERROR) {
      return absl::InternalError(
          absl::StrCat("fatal Kafka consumer error: ", rd_kafka_message_errstr(msg.get())));
    }
    if (msg->err != RD_KAFKA_RESP_ERR__PARTITION_EOF) {
      spdlog::warn("Kafka consumer: {}", rd_kafka_message_errstr(msg.get()));
    }
    return std::nullopt;
  }
  return Handle(msg.get());
}

absl::StatusOr<std::optional<Delivery>> Consumer::Handle(const rd_kafka_message_t* msg) {
  Delivery delivery{.message = ToMessage(msg, options_.id_header)};
  if (!IsUuid(delivery.message.id)) {
    kafka_->SeekBack(msg);
    return absl::FailedPreconditionError(absl::StrCat(
        "message ", Where(delivery.message), " has ",
        delivery.message.id.empty()
            ? absl::StrCat("no \"", options_.id_header, "\" header")
            : absl::StrCat("a \"", options_.id_header, "\" header that is not a UUID"),
        ", so it cannot be deduplicated; its offset is not committed. Fix the producer, then "
        "move the group past it (kafka-consumer-groups --reset-offsets) if it must be skipped"));
  }
  // libpq does not reconnect on its own; the retry after a lost connection does.
  if (PQstatus(conn_.get()) == CONNECTION_BAD) PQreset(conn_.get());
  delivery.attempt = failures_ + 1;
  absl::StatusOr<Outcome> outcome = Process(conn_, delivery.message, handler_, options_.inbox);
  if (!outcome.ok()) return Failed(msg, std::move(delivery), outcome.status());
  failures_ = 0;
  delivery.result =
      *outcome == Outcome::kProcessed ? Delivery::Result::kProcessed : Delivery::Result::kDuplicate;
  delivery.offset_commit = kafka_->Commit(msg);
  if (!delivery.offset_commit.ok()) {
    spdlog::warn("{} {}: {} (it will be redelivered and skipped as a duplicate)",
                 ResultName(delivery.result), Where(delivery.message), delivery.offset_commit);
  }
  return delivery;
}

std::optional<Delivery> Consumer::Failed(const rd_kafka_message_t* msg, Delivery delivery,
                                         absl::Status error) {
  kafka_->SeekBack(msg);
  ++failures_;
  const absl::Duration backoff = std::min(
      options_.initial_backoff * (int64_t{1} << std::min(failures_ - 1, 20)), options_.max_backoff);
  resume_at_ = absl::Now() + backoff;
  spdlog::warn("message {} (id {}) failed, attempt {}, retrying in {}: {}", Where(delivery.message),
               LogSafe(delivery.message.id), delivery.attempt, absl::FormatDuration(backoff),
               LogSafe(error.message()));
  delivery.result = Delivery::Result::kFailed;
  delivery.error = std::move(error);
  return delivery;
}

}  // namespace outboxd::inbox
