#include "kafka/rdkafka_client.h"

#include "absl/strings/str_cat.h"
#include "kafka/internal/rdkafka_util.h"

namespace outboxd::kafka {

absl::Status SetProperty(rd_kafka_conf_t* conf, const std::string& name, const std::string& value) {
  char errstr[512];
  if (rd_kafka_conf_set(conf, name.c_str(), value.c_str(), errstr, sizeof(errstr)) !=
      RD_KAFKA_CONF_OK) {
    // The value never goes into the error, whatever the property: a name librdkafka
    // does not know is often a typo of a secret one (sasl.pasword=...), and a value it
    // refuses may be a secret given to the wrong name. The name and the reason say
    // what to fix.
    return absl::InvalidArgumentError(
        absl::StrCat("Kafka property ", name,
                     "=[redacted]: ", internal::RedactValue(internal::OneLine(errstr), value)));
  }
  return absl::OkStatus();
}

}  // namespace outboxd::kafka
