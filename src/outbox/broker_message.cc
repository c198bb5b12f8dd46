#include "outbox/broker_message.h"

#include <utility>

namespace outboxd::outbox {

BrokerMessage BuildBrokerMessage(MessageEncoder& encoder, const OutboxEvent& event,
                                 std::string_view lsn, std::string_view topic, uint64_t tag) {
  absl::Status encoded = encoder.Encode(event, lsn);
  const EncodedMessage& m = encoder.message();
  return {.encoded = std::move(encoded),
          .message = {
              .topic = topic, .key = m.key, .value = m.value, .headers = m.headers, .tag = tag}};
}

}  // namespace outboxd::outbox
