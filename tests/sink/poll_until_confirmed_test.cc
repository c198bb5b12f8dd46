// sink::PollUntilConfirmed (sink/sink.h), the Flush() of the RabbitMQ and NATS sinks:
// it polls until nothing is in flight, and fails after the timeout naming the broker.
#include <algorithm>
#include <string>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sink/sink.h"

namespace outboxd::sink {
namespace {

using ::testing::HasSubstr;

// A sink with `in_flight` messages, each Poll() confirming one when `confirms`.
class CountdownSink final : public Sink {
 public:
  CountdownSink(int in_flight, bool confirms) : in_flight_(in_flight), confirms_(confirms) {}

  absl::Status Produce(const OutgoingMessage&) override { return absl::OkStatus(); }
  int Poll(int timeout_ms) override {
    ++polls;
    longest_wait_ms = std::max(longest_wait_ms, timeout_ms);
    if (!confirms_) {
      absl::SleepFor(absl::Milliseconds(timeout_ms));
      return 0;
    }
    --in_flight_;
    return 1;
  }
  absl::Status Flush(absl::Duration) override { return absl::OkStatus(); }
  absl::Status Health() const override { return absl::OkStatus(); }
  int InFlight() const override { return in_flight_; }
  uint64_t InFlightBytes() const override { return 0; }
  int wake_fd() const override { return -1; }
  int Close(absl::Duration) override { return 0; }

  int polls = 0;
  int longest_wait_ms = 0;

 private:
  int in_flight_;
  bool confirms_;
};

TEST(PollUntilConfirmed, PollsUntilNothingIsInFlight) {
  CountdownSink sink(3, /*confirms=*/true);
  EXPECT_TRUE(PollUntilConfirmed(sink, absl::Seconds(10), "RabbitMQ at amqp://h/").ok());
  EXPECT_EQ(sink.InFlight(), 0);
  EXPECT_EQ(sink.polls, 3);
  EXPECT_LE(sink.longest_wait_ms, 100) << "one Poll() never waits past 100 ms";
}

TEST(PollUntilConfirmed, NothingInFlightReturnsAtOnce) {
  CountdownSink sink(0, /*confirms=*/true);
  EXPECT_TRUE(PollUntilConfirmed(sink, absl::ZeroDuration(), "JetStream at nats://h").ok());
  EXPECT_EQ(sink.polls, 0);
}

TEST(PollUntilConfirmed, FailsAfterTheTimeoutNamingTheBrokerAndWhatIsLeft) {
  CountdownSink sink(2, /*confirms=*/false);
  const absl::Time start = absl::Now();
  const absl::Status s = PollUntilConfirmed(sink, absl::Milliseconds(250), "JetStream at nats://h");
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(s.message(), HasSubstr("2 messages still unacknowledged by JetStream at nats://h "
                                     "after 250ms"));
  EXPECT_GE(took, absl::Milliseconds(250));
  EXPECT_LT(took, absl::Seconds(5));
  EXPECT_GE(sink.polls, 3) << "polled in steps of at most 100 ms";
}

}  // namespace
}  // namespace outboxd::sink
