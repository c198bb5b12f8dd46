// A memory alarm on a RabbitMQ node of the test's own (it blocks every publisher of
// the node, so not on the shared one): connection.blocked, then connection.unblocked.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "amqp/publisher.h"
#include "gtest/gtest.h"
#include "support/amqp_fixture.h"
#include "support/wait_until.h"

namespace outboxd::amqp {
namespace {

using ::outboxd::test::AmqpNode;
using ::outboxd::test::TestBroker;
using ::outboxd::test::VhostKind;

TEST(AmqpFlowControl, AMemoryAlarmBlocksThePublisherUntilItClears) {
  std::unique_ptr<AmqpNode> node = AmqpNode::StartPrivate();
  auto broker = TestBroker::Create(VhostKind::kShared, *node);
  broker->BindQueue("alarm", "alarm_q", "#");
  std::vector<Completion> done;
  auto pub = Publisher::Connect({.url = broker->url(), .exchange = "alarm"},
                                [&](const Completion& c) { done.push_back(c); });
  ASSERT_TRUE(pub.ok()) << pub.status();
  Publisher& p = **pub;

  node->Ctl({"set_vm_memory_high_watermark", "0.00001"});
  // The broker blocks a connection when it next publishes: keep one message in flight
  // until connection.blocked arrives.
  int sent = 0;
  ASSERT_TRUE(test::WaitUntil(
      absl::Seconds(60), [&] { return p.Blocked(); },
      [&] {
        if (p.InFlight() == 0) {
          EXPECT_TRUE(
              p.Produce({.routing_key = "k", .body = absl::StrCat(++sent), .tag = uint64_t(sent)})
                  .ok());
        }
        p.Poll(absl::Milliseconds(100));
      }));
  EXPECT_EQ(p.BlockedReason(), "low on memory");
  EXPECT_EQ(p.InFlight(), 1);  // not read, so not confirmed, while blocked
  EXPECT_EQ(p.Produce({.routing_key = "k", .body = "refused", .tag = 999}).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(p.Health().ok());

  node->Ctl({"set_vm_memory_high_watermark", "0.4"});
  EXPECT_TRUE(test::WaitUntil(
      absl::Seconds(60), [&] { return !p.Blocked(); }, [&] { p.Poll(absl::Milliseconds(100)); }));
  ASSERT_TRUE(p.Produce({.routing_key = "k", .body = "after", .tag = 1000}).ok());
  ASSERT_TRUE(p.Flush(absl::Seconds(60)).ok());
  ASSERT_EQ(done.size(), static_cast<size_t>(sent) + 1);
  for (const Completion& c : done) EXPECT_EQ(c.outcome, Outcome::kAcked) << c.tag;
  EXPECT_EQ(broker->Drain("alarm_q").size(), static_cast<size_t>(sent) + 1);
}

}  // namespace
}  // namespace outboxd::amqp
