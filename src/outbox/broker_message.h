// The one place where an outbox event becomes the message a sink sends: encoded in
// the configured format (outbox/message_format.h), addressed to its topic, tagged for
// its delivery report. The CDC relay, the polling relay and dead-letter replay all
// build their messages here, so the three cannot drift apart.
//
//   outbox::BrokerMessage m = outbox::BuildBrokerMessage(encoder, event, "0/16B3748",
//                                                        topic, tag);
//   if (!m.encoded.ok()) DeadLetter(m.message, event.payload, m.encoded);  // headers kept
//   else OUTBOXD_RETURN_IF_ERROR(sink.Produce(m.message));
#ifndef OUTBOXD_OUTBOX_BROKER_MESSAGE_H_
#define OUTBOXD_OUTBOX_BROKER_MESSAGE_H_

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "outbox/event.h"
#include "outbox/message_format.h"
#include "sink/sink.h"

namespace outboxd::outbox {

struct BrokerMessage {
  // Not OK when the payload fails the encoder's checks (not a JSON object or array,
  // no --key-pointer field): `message` then still has the headers, the aggregate_id
  // as key and the payload as value, for a dead letter or a failure record.
  absl::Status encoded;
  // Views into the encoder and `topic`: valid until the encoder's next use.
  sink::OutgoingMessage message;
};

// `lsn`: the commit LSN "X/Y", or empty where there is none (the polling relay).
BrokerMessage BuildBrokerMessage(MessageEncoder& encoder, const OutboxEvent& event,
                                 std::string_view lsn, std::string_view topic, uint64_t tag);

}  // namespace outboxd::outbox

#endif  // OUTBOXD_OUTBOX_BROKER_MESSAGE_H_
