#include "kafka/internal/rdkafka_util.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "kafka/publisher.h"

namespace outboxd::kafka::internal {

std::string OneLine(absl::string_view text) {
  return absl::StrReplaceAll(text, {{"\r", " "}, {"\n", " "}});
}

absl::Status SetProperty(rd_kafka_conf_t* conf, const std::string& name,
                         const std::string& value) {
  char errstr[512];
  if (rd_kafka_conf_set(conf, name.c_str(), value.c_str(), errstr, sizeof(errstr)) !=
      RD_KAFKA_CONF_OK) {
    if (IsSecretProperty(name)) {
      std::string reason = OneLine(errstr);
      if (!value.empty()) reason = absl::StrReplaceAll(reason, {{value, "[redacted]"}});
      return absl::InvalidArgumentError(absl::StrCat("Kafka property ", name, ": ", reason));
    }
    return absl::InvalidArgumentError(
        absl::StrCat("Kafka property ", name, "=", value, ": ", OneLine(errstr)));
  }
  return absl::OkStatus();
}

}  // namespace outboxd::kafka::internal
