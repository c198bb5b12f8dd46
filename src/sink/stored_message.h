// StoredMessage: a sink's own copy of a produced message (topic, key, value, headers)
// in one allocation, kept until the broker confirms it (sink/confirming_sink.h). The
// relay keeps up to --max-in-flight messages in a sink and bounds their memory with
// --max-in-flight-bytes, so the copy must cost what it counts.
//
// Layout: the field count n, n + 1 offsets into the text (uint32_t each), then the
// text: topic, key, value, and each header's name and value, each followed by a NUL,
// so that a field's data() is also a C string for a C client library (libnats). Kept
// as std::strings (a dozen allocations), the copy of an event with ~150 bytes of text
// took ~830 bytes of heap while InFlightBytes() counted the 150. Measured on a
// 100,000-event catch-up to RabbitMQ (1,000 aggregates): peak RSS 92 -> 47 MiB with
// 84,000-90,000 events in flight; with --max-in-flight-bytes 8 MiB, 78 -> 24 MiB (the
// limit now holds), drain time unchanged (19.9 -> 19.7 s). tests/amqp/sink_test.cc
// checks heap against count.
//
//   sink::StoredMessage copy(message);     // message: a sink::OutgoingMessage
//   copy.topic();                          // "order.created", NUL-terminated
//   for (size_t i = 0; i < copy.header_count(); ++i) Use(copy.header(i));
#ifndef OUTBOXD_SINK_STORED_MESSAGE_H_
#define OUTBOXD_SINK_STORED_MESSAGE_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string_view>

#include "sink/sink.h"

namespace outboxd::sink {

class StoredMessage {
 public:
  StoredMessage() = default;
  explicit StoredMessage(const OutgoingMessage& m);

  std::string_view topic() const { return Field(0); }
  std::string_view key() const { return Field(1); }
  std::string_view value() const { return Field(2); }
  size_t header_count() const { return (Get(0) - 3) / 2; }
  Header header(size_t i) const { return {Field(3 + 2 * i), Field(4 + 2 * i)}; }
  // Bytes allocated for it.
  size_t size() const { return size_; }

 private:
  void Put(size_t slot, uint32_t v) { std::memcpy(data_.get() + slot * sizeof v, &v, sizeof v); }
  uint32_t Get(size_t slot) const {
    uint32_t v;
    std::memcpy(&v, data_.get() + slot * sizeof v, sizeof v);
    return v;
  }
  // Field i runs from offset i to offset i + 1, less its NUL.
  std::string_view Field(size_t i) const {
    const size_t head = sizeof(uint32_t) * (Get(0) + 2);
    const uint32_t begin = Get(1 + i);
    return std::string_view(data_.get() + head + begin, Get(2 + i) - begin - 1);
  }

  std::unique_ptr<char[]> data_;
  size_t size_ = 0;
};

}  // namespace outboxd::sink

#endif  // OUTBOXD_SINK_STORED_MESSAGE_H_
