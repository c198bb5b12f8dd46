// The WAL-only outbox's message content (outbox/emitted_event.h): what the relay reads
// back is exactly what was written, NUL separators and all, and anything else is
// refused as InvalidArgument (the relay dead-letters it) rather than guessed at.
#include "outbox/emitted_event.h"

#include <string>

#include "gtest/gtest.h"

namespace outboxd::outbox {
namespace {

const OutboxEvent kEvent{.id = "0b6f6a3e-3c1e-4a35-9d0b-5f3b1c2d4e5f",
                         .aggregate_id = "pedido-77",
                         .type = "pedido.confirmado",
                         .payload = R"({"pedidoId": "pedido-77", "totalCentavos": 1000})",
                         .created_at = "2026-12-03 15:40:00.123456+00"};

TEST(EmittedEvent, ContentReadsBackAsTheEventItCarries) {
  const std::string content = EmittedContent(kEvent);
  EXPECT_EQ(content.substr(0, 11), std::string("outboxd-v1\0", 11));
  absl::StatusOr<OutboxEvent> event = ParseEmittedEvent(content);
  ASSERT_TRUE(event.ok()) << event.status();
  EXPECT_EQ(event->id, kEvent.id);
  EXPECT_EQ(event->aggregate_id, kEvent.aggregate_id);
  EXPECT_EQ(event->type, kEvent.type);
  EXPECT_EQ(event->created_at, kEvent.created_at);
  EXPECT_EQ(event->payload, kEvent.payload);
}

TEST(EmittedEvent, PayloadRunsToTheEndAndIsNotCheckedHere) {
  OutboxEvent odd = kEvent;
  odd.payload = std::string_view("{not json\0 with a NUL", 21);
  const std::string content = EmittedContent(odd);
  absl::StatusOr<OutboxEvent> event = ParseEmittedEvent(content);
  ASSERT_TRUE(event.ok()) << event.status();
  EXPECT_EQ(event->payload, odd.payload);
  odd.payload = "";
  EXPECT_EQ(ParseEmittedEvent(EmittedContent(odd))->payload, "");
}

TEST(EmittedEvent, RefusesAnotherVersionTruncatedContentAndEmptyFields) {
  const std::string content = EmittedContent(kEvent);
  for (size_t cut = 0; cut < content.size() - kEvent.payload.size(); ++cut) {
    absl::StatusOr<OutboxEvent> event = ParseEmittedEvent(content.substr(0, cut));
    EXPECT_EQ(event.status().code(), absl::StatusCode::kInvalidArgument) << "cut at " << cut;
  }
  std::string v2 = content;
  v2[9] = '2';
  EXPECT_NE(ParseEmittedEvent(v2).status().message().find("does not start with outboxd-v1"),
            std::string::npos);
  EXPECT_FALSE(ParseEmittedEvent("garbage").ok());
  OutboxEvent no_id = kEvent, no_key = kEvent, no_type = kEvent;
  no_id.id = no_key.aggregate_id = no_type.type = "";
  for (const OutboxEvent& empty : {no_id, no_key, no_type}) {
    EXPECT_EQ(ParseEmittedEvent(EmittedContent(empty)).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  // created_at may be empty: the relay takes the commit time, as for a table without one.
  OutboxEvent no_time = kEvent;
  no_time.created_at = "";
  EXPECT_TRUE(ParseEmittedEvent(EmittedContent(no_time)).ok());
}

}  // namespace
}  // namespace outboxd::outbox
