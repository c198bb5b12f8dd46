// MessageEncoder on the relay's hot path must not touch the heap once warmed up: the
// default json format always, and the other formats and pointer headers too, as their
// buffers keep their capacity. Counted by replacing the global operator new in this
// test binary (tests/support/allocation_counter.h).
#include <string>

#include "gtest/gtest.h"
#include "outbox/message_format.h"
#include "support/allocation_counter.h"

namespace outboxd::outbox {
namespace {

int AllocationsEncoding(MessageEncoder& encoder) {
  const std::string payload =
      R"({"pedidoId": "77", "total": 10.50, "trace": {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}})";
  const OutboxEvent event{.id = "0b6f3c1e-2b1a-4c55-9d2e-7f00d1c0ffee",
                          .aggregate_id = "pedido-77",
                          .type = "pedido.confirmado",
                          .payload = payload,
                          .created_at = "2026-12-02 12:22:45.123+00"};
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(encoder.Encode(event, "0/16B3748").ok());  // warm up
  return testing::AllocationsDuring([&] {
    for (int i = 0; i < 100; ++i) {
      if (!encoder.Encode(event, "0/16B3748").ok()) break;
    }
  });
}

TEST(MessageEncoderAllocations, JsonDoesNotAllocatePerEvent) {
  MessageEncoder encoder;
  EXPECT_EQ(AllocationsEncoding(encoder), 0);
}

TEST(MessageEncoderAllocations, OtherFormatsAndPointersReuseTheirBuffers) {
  for (ValueFormat format : {ValueFormat::kJson, ValueFormat::kEnvelope, ValueFormat::kProtobuf}) {
    MessageEncoder encoder({.format = format,
                            .headers = {{"traceparent", "/trace/traceparent"}, {"total", "/total"}},
                            .key_pointer = "/pedidoId"});
    EXPECT_EQ(AllocationsEncoding(encoder), 0) << ValueFormatName(format);
  }
}

}  // namespace
}  // namespace outboxd::outbox
