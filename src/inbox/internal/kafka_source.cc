// The Kafka source over librdkafka's high-level consumer (subscribe, group rebalances
// handled by librdkafka). Offsets are never stored or committed automatically:
// Settle() commits one message's offset, synchronously; Redeliver() seeks the
// partition back to the message, so the next fetch returns it again.
#include <librdkafka/rdkafka.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "inbox/consumer.h"
#include "inbox/internal/source.h"
#include "kafka/rdkafka_client.h"

namespace outboxd::inbox::internal {
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

using kafka::SetProperty;

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

Message ToMessage(const rd_kafka_message_t* m, const std::string& id_header) {
  Message out;
  kafka::CopyMessage(m, out);
  out.id = std::string(out.Header(id_header).value_or(""));
  return out;
}

class KafkaSource final : public Source {
 public:
  KafkaSource(rd_kafka_t* rk, std::string id_header)
      : rk_(rk, &rd_kafka_destroy), id_header_(std::move(id_header)) {}
  ~KafkaSource() override { Close(); }

  absl::StatusOr<std::optional<Received>> Next(absl::Duration timeout) override {
    MessagePtr msg(rd_kafka_consumer_poll(rk_.get(), ToMs(timeout)), &rd_kafka_message_destroy);
    if (msg == nullptr) return std::nullopt;
    if (msg->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      if (rd_kafka_fatal_error(rk_.get(), nullptr, 0) != RD_KAFKA_RESP_ERR_NO_ERROR) {
        return absl::InternalError(
            absl::StrCat("fatal Kafka consumer error: ", rd_kafka_message_errstr(msg.get())));
      }
      if (msg->err != RD_KAFKA_RESP_ERR__PARTITION_EOF) {
        spdlog::warn("Kafka consumer: {}", rd_kafka_message_errstr(msg.get()));
      }
      return std::nullopt;
    }
    return Received{.message = ToMessage(msg.get(), id_header_)};
  }

  absl::Status Settle(const Received& r) override {
    ListPtr list = Position(r.message, r.message.offset + 1);
    rd_kafka_resp_err_t err = rd_kafka_commit(rk_.get(), list.get(), /*async=*/0);
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR) return absl::OkStatus();
    return absl::UnavailableError(absl::StrCat("offset commit failed: ", rd_kafka_err2str(err)));
  }

  // The next fetch of this partition starts at the message again.
  void Redeliver(const Received& r) override {
    ListPtr list = Position(r.message, r.message.offset);
    if (rd_kafka_error_t* error = rd_kafka_seek_partitions(rk_.get(), list.get(), 5000)) {
      // Revoked meanwhile: its next owner resumes from the committed offset anyway.
      spdlog::warn("cannot seek back to {}: {}", Where(r.message), rd_kafka_error_string(error));
      rd_kafka_error_destroy(error);
    }
  }

  void Close() override {
    if (closed_) return;
    closed_ = true;
    if (rd_kafka_resp_err_t err = rd_kafka_consumer_close(rk_.get())) {
      spdlog::warn("closing the Kafka consumer: {}", rd_kafka_err2str(err));
    }
  }

  std::string Where(const Message& m) const override {
    return absl::StrCat(m.topic, "[", m.partition, "]@", m.offset);
  }
  std::string SkipAdvice() const override {
    return "its offset is not committed. Fix the producer, then move the group past it "
           "(kafka-consumer-groups --reset-offsets) if it must be skipped";
  }

 private:
  static ListPtr Position(const Message& m, int64_t offset) {
    ListPtr list(rd_kafka_topic_partition_list_new(1), &rd_kafka_topic_partition_list_destroy);
    rd_kafka_topic_partition_list_add(list.get(), m.topic.c_str(), m.partition)->offset = offset;
    return list;
  }

  std::unique_ptr<rd_kafka_t, decltype(&rd_kafka_destroy)> rk_;
  const std::string id_header_;
  bool closed_ = false;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Source>> MakeKafkaSource(const ConsumerOptions& options) {
  absl::StatusOr<ConfPtr> conf = MakeConf(options);
  if (!conf.ok()) return conf.status();
  char errstr[512];
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf->get(), errstr, sizeof(errstr));
  if (rk == nullptr) return absl::InvalidArgumentError(absl::StrCat("Kafka consumer: ", errstr));
  conf->release();  // rd_kafka_new() took it
  auto source = std::make_unique<KafkaSource>(rk, options.id_header);
  rd_kafka_poll_set_consumer(rk);
  ListPtr topics(rd_kafka_topic_partition_list_new(static_cast<int>(options.topics.size())),
                 &rd_kafka_topic_partition_list_destroy);
  for (const std::string& t : options.topics) {
    rd_kafka_topic_partition_list_add(topics.get(), t.c_str(), RD_KAFKA_PARTITION_UA);
  }
  if (rd_kafka_resp_err_t err = rd_kafka_subscribe(rk, topics.get())) {
    return absl::InvalidArgumentError(absl::StrCat("cannot subscribe: ", rd_kafka_err2str(err)));
  }
  return source;
}

}  // namespace outboxd::inbox::internal
