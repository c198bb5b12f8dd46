// sink::ConfirmingSink (sink/confirming_sink.h), the part the RabbitMQ and NATS sinks
// share, with a broker of the test's own that publishes every ready message at once
// and answers as the test says: per-key order, a failure's followers behind it, the
// delivery timeout, wake_fd(), Flush() and Close(). The real brokers' tests
// (tests/amqp/sink_test.cc, tests/nats/sink_test.cc) show the same rules end to end.
#include "sink/confirming_sink.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "support/wait_until.h"

namespace outboxd::sink {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Publishes each ready message when polled (its tag into published); Answer() queues
// the broker's word on a published one, served at the next Poll().
class ScriptedSink final : public ConfirmingSink {
 public:
  // A report as the relay would keep it.
  struct Got {
    uint64_t tag;
    absl::Status status;
    std::string key;  // a failed one's message, to dead-letter it
    std::string value;
    size_t headers;
  };

  static std::unique_ptr<ScriptedSink> Make(absl::Duration delivery_timeout) {
    auto sink = std::unique_ptr<ScriptedSink>(new ScriptedSink(delivery_timeout));
    EXPECT_TRUE(sink->OpenWakeFd().ok());
    sink->signal_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    EXPECT_TRUE(sink->WatchSignal(sink->signal_fd_).ok());
    return sink;
  }
  ~ScriptedSink() override {
    Close(absl::ZeroDuration());
    close(signal_fd_);
  }

  absl::Status Produce(const OutgoingMessage& message) override {
    if (!fatal().ok()) return fatal();
    Entries::iterator it = Add(message);
    tag_of_[it->first] = message.tag;
    ArmTimer();
    return absl::OkStatus();
  }

  // The broker acknowledges (OK) or refuses `tag`, as a client's thread would say it.
  void Answer(uint64_t tag, absl::Status status) {
    answers_.push_back({tag, std::move(status)});
    const uint64_t one = 1;
    EXPECT_EQ(write(signal_fd_, &one, sizeof one), 8);
  }

  std::vector<Got> got;
  std::vector<uint64_t> published;
  int disconnects = 0;

 private:
  explicit ScriptedSink(absl::Duration delivery_timeout)
      : ConfirmingSink({.on_delivery =
                            [this](const DeliveryReport& r) {
                              got.push_back({r.tag, r.status, std::string(r.key),
                                             std::string(r.value), r.headers.size()});
                            },
                        .delivery_timeout = delivery_timeout},
                       "Scripted at x") {}

  int Serve() override {
    while (std::optional<uint64_t> seq = order().NextReady()) {
      order().Sent(*seq);
      published.push_back(tag_of_[*seq]);
    }
    int served = 0;
    std::vector<std::pair<uint64_t, absl::Status>> batch;
    batch.swap(answers_);
    for (const auto& [tag, status] : batch) {
      for (auto it = entries().begin(); it != entries().end(); ++it) {
        if (it->second.tag != tag) continue;
        if (status.ok()) {
          Acknowledge(it);
          ++served;
        } else {
          served += Fail(it, status);
        }
        break;
      }
    }
    return served;
  }
  absl::Time NextWake(absl::Time) const override { return absl::InfiniteFuture(); }
  void Disconnect() override { ++disconnects; }

  int signal_fd_ = -1;
  std::map<uint64_t, uint64_t> tag_of_;  // sequence -> tag
  std::vector<std::pair<uint64_t, absl::Status>> answers_;
};

absl::Status Send(ScriptedSink& sink, std::string_view key, uint64_t tag) {
  static const Header kHeaders[] = {{"id", "1"}, {"type", "order.created"}};
  return sink.Produce(
      {.topic = "order.created", .key = key, .value = "{}", .headers = kHeaders, .tag = tag});
}

bool Readable(int fd) {
  pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
  return ::poll(&p, 1, 0) == 1;
}

TEST(ConfirmingSink, PublishesAKeysNextMessageOnlyOnceTheOneBeforeIsAcknowledged) {
  auto sink = ScriptedSink::Make(absl::InfiniteDuration());
  const std::vector<ScriptedSink::Got>& got = sink->got;
  ASSERT_TRUE(Send(*sink, "a", 1).ok());
  ASSERT_TRUE(Send(*sink, "a", 2).ok());
  ASSERT_TRUE(Send(*sink, "b", 3).ok());
  sink->Poll(0);
  EXPECT_THAT(sink->published, ElementsAre(1, 3)) << "2 waits behind 1, its key's first";
  sink->Answer(1, absl::OkStatus());
  EXPECT_EQ(sink->Poll(0), 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].tag, 1u);
  EXPECT_TRUE(got[0].status.ok());
  EXPECT_EQ(got[0].value, "") << "an acknowledged report carries no copy of the message";
  sink->Poll(0);
  EXPECT_THAT(sink->published, ElementsAre(1, 3, 2));
  EXPECT_EQ(sink->InFlight(), 2);
}

TEST(ConfirmingSink, AFailureIsReportedThenItsKeysFollowersBehindItAndOtherKeysGoOn) {
  auto sink = ScriptedSink::Make(absl::InfiniteDuration());
  const std::vector<ScriptedSink::Got>& got = sink->got;
  for (auto [key, tag] :
       std::vector<std::pair<std::string, uint64_t>>{{"a", 1}, {"a", 2}, {"b", 3}, {"a", 4}}) {
    ASSERT_TRUE(Send(*sink, key, tag).ok());
  }
  sink->Poll(0);
  sink->Answer(1, absl::NotFoundError("no queue bound for routing key order.created"));
  EXPECT_EQ(sink->Poll(0), 3);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].tag, 1u);
  EXPECT_EQ(got[0].status.code(), absl::StatusCode::kNotFound);
  for (int i : {1, 2}) {
    EXPECT_EQ(got[i].status.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(got[i].status.message()),
                HasSubstr("follows an earlier message of its key that failed: no queue bound"));
  }
  EXPECT_EQ(got[1].tag, 2u);
  EXPECT_EQ(got[2].tag, 4u);
  for (const ScriptedSink::Got& g : got) {
    EXPECT_EQ(g.key, "a") << "a failed report carries the message, to dead-letter it";
    EXPECT_EQ(g.value, "{}");
    EXPECT_EQ(g.headers, 2u);
  }
  EXPECT_THAT(sink->published, ElementsAre(1, 3)) << "the followers never went to the broker";
  EXPECT_EQ(sink->InFlight(), 1) << "b's message is still at the broker";
  sink->Answer(3, absl::OkStatus());
  sink->Poll(0);
  EXPECT_EQ(got.back().tag, 3u);
  EXPECT_EQ(sink->InFlight(), 0);
  EXPECT_EQ(sink->InFlightBytes(), 0u);
}

TEST(ConfirmingSink, WhatTheBrokerDoesNotConfirmWithinTheDeliveryTimeoutFailsOldestFirst) {
  auto sink = ScriptedSink::Make(absl::Milliseconds(50));
  const std::vector<ScriptedSink::Got>& got = sink->got;
  ASSERT_TRUE(Send(*sink, "a", 1).ok());
  ASSERT_TRUE(Send(*sink, "b", 2).ok());
  sink->Poll(0);
  // The timer wakes a select() on wake_fd() at the deadline.
  ASSERT_TRUE(test::WaitUntil(
      absl::Seconds(10), [&] { return Readable(sink->wake_fd()); }, absl::Milliseconds(5)));
  EXPECT_EQ(sink->Poll(0), 2);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].tag, 1u);
  EXPECT_EQ(got[0].status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(got[0].status.message()),
              HasSubstr("not acknowledged by Scripted at x within 50ms"));
  sink->Answer(1, absl::OkStatus());
  EXPECT_EQ(sink->Poll(0), 0) << "a confirm after the timeout is ignored";
}

TEST(ConfirmingSink, WakeFdIsReadableWhileTheBrokersWordWaitsAndPollEmptiesIt) {
  auto sink = ScriptedSink::Make(absl::InfiniteDuration());
  ASSERT_TRUE(Send(*sink, "a", 1).ok());
  sink->Poll(0);
  EXPECT_FALSE(Readable(sink->wake_fd()));
  sink->Answer(1, absl::OkStatus());
  EXPECT_TRUE(Readable(sink->wake_fd()));
  EXPECT_EQ(sink->Poll(100), 1);
  EXPECT_FALSE(Readable(sink->wake_fd()));
}

TEST(ConfirmingSink, FlushFailsAfterItsTimeoutNamingTheBroker) {
  auto sink = ScriptedSink::Make(absl::InfiniteDuration());
  ASSERT_TRUE(Send(*sink, "a", 1).ok());
  const absl::Status s = sink->Flush(absl::Milliseconds(20));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("1 messages still unacknowledged by Scripted at x"));
}

TEST(ConfirmingSink, CloseDropsWhatIsLeftUnreportedAndDisconnectsOnce) {
  auto sink = ScriptedSink::Make(absl::InfiniteDuration());
  const std::vector<ScriptedSink::Got>& got = sink->got;
  for (uint64_t tag : {1, 2, 3}) ASSERT_TRUE(Send(*sink, "a", tag).ok());
  EXPECT_GT(sink->InFlightBytes(), 0u);
  EXPECT_EQ(sink->Close(absl::ZeroDuration()), 3);
  EXPECT_TRUE(got.empty()) << "dropped, not reported: the relay resends them";
  EXPECT_EQ(sink->disconnects, 1);
  EXPECT_EQ(sink->InFlight(), 0);
  EXPECT_EQ(sink->InFlightBytes(), 0u);
  EXPECT_EQ(sink->Close(absl::ZeroDuration()), 0);
  EXPECT_EQ(sink->disconnects, 1);
}

TEST(ConfirmingSink, AFatalErrorIsItsHealthAndRefusesWhatIsProduced) {
  auto sink = ScriptedSink::Make(absl::InfiniteDuration());
  EXPECT_TRUE(sink->Health().ok());
  sink->RaiseFatalErrorForTesting("the broker is gone");
  EXPECT_EQ(sink->Health().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(Send(*sink, "a", 1).code(), absl::StatusCode::kAborted);
}

}  // namespace
}  // namespace outboxd::sink
