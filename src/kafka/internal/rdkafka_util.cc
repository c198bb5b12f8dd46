#include "kafka/internal/rdkafka_util.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "kafka/publisher.h"

namespace outboxd::kafka::internal {

std::string OneLine(absl::string_view text) {
  return absl::StrReplaceAll(text, {{"\r", " "}, {"\n", " "}});
}

std::string RedactValue(absl::string_view text, const std::string& value) {
  if (value.empty()) return std::string(text);
  // librdkafka quotes the value it refuses ("Invalid value \"x\" for ..."); a longer
  // value is also taken out wherever else it shows. A one-character value is only
  // taken out quoted, or every digit of the reason would go with it.
  std::string out =
      absl::StrReplaceAll(text, {{absl::StrCat("\"", value, "\""), "\"[redacted]\""}});
  if (value.size() >= 2) out = absl::StrReplaceAll(out, {{value, "[redacted]"}});
  return out;
}

absl::Status SetProperty(rd_kafka_conf_t* conf, const std::string& name,
                         const std::string& value) {
  char errstr[512];
  if (rd_kafka_conf_set(conf, name.c_str(), value.c_str(), errstr, sizeof(errstr)) !=
      RD_KAFKA_CONF_OK) {
    // The value never goes into the error, whatever the property: a name librdkafka
    // does not know is often a typo of a secret one (sasl.pasword=...), and a value it
    // refuses may be a secret given to the wrong name. The name and the reason say
    // what to fix.
    return absl::InvalidArgumentError(absl::StrCat(
        "Kafka property ", name, "=[redacted]: ", RedactValue(OneLine(errstr), value)));
  }
  return absl::OkStatus();
}

}  // namespace outboxd::kafka::internal
