#include "support/kafka_consumer.h"

#include <librdkafka/rdkafka.h>

#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace outboxd::test {
namespace {

using ConfPtr = std::unique_ptr<rd_kafka_conf_t, decltype(&rd_kafka_conf_destroy)>;

void DestroyConsumer(rd_kafka_t* rk) {
  rd_kafka_destroy_flags(rk, RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
}

}  // namespace

absl::StatusOr<ConsumerPtr> StartConsumer(const std::string& bootstraps,
                                          const std::string& group_id, ConsumerLogs logs) {
  ConfPtr conf(rd_kafka_conf_new(), &rd_kafka_conf_destroy);
  std::vector<std::pair<const char*, std::string>> settings = {
      {"bootstrap.servers", bootstraps},
      {"group.id", group_id},
      {"enable.auto.commit", "false"},
      {"enable.auto.offset.store", "false"},
      {"auto.offset.reset", "earliest"},
      {"fetch.wait.max.ms", "10"},
      // Bigger fetches than the 1 MB default: the mock drops a partition's oldest
      // messages beyond ~5 MB, so a consumer must not trail a fast producer by more.
      {"max.partition.fetch.bytes", "4194304"},
      {"reconnect.backoff.max.ms", "500"},
      // A mock broker set down keeps its open connections silent: give up on them
      // quickly instead of after the 60 s default.
      {"socket.timeout.ms", "5000"},
      {"log.connection.close", "false"},
  };
  if (logs == ConsumerLogs::kCriticalOnly) settings.emplace_back("log_level", "2");
  // Error events repeat lines librdkafka has already logged; don't print them twice.
  rd_kafka_conf_set_error_cb(conf.get(), [](rd_kafka_t*, int, const char*, void*) {});
  char errstr[512];
  for (const auto& [name, value] : settings) {
    if (rd_kafka_conf_set(conf.get(), name, value.c_str(), errstr, sizeof(errstr)) !=
        RD_KAFKA_CONF_OK) {
      return absl::InvalidArgumentError(absl::StrCat("test consumer ", name, ": ", errstr));
    }
  }
  ConsumerPtr consumer(rd_kafka_new(RD_KAFKA_CONSUMER, conf.get(), errstr, sizeof(errstr)),
                       &DestroyConsumer);
  if (consumer == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("test consumer: ", errstr));
  }
  conf.release();  // rd_kafka_new() took it
  rd_kafka_poll_set_consumer(consumer.get());
  return consumer;
}

}  // namespace outboxd::test
