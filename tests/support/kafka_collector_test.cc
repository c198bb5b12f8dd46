// The test collector must keep up with a relay publishing 100k events: the mock
// keeps only ~5 MB per partition (measured here: the first 75,852 of 100,000
// 200-byte messages gone), so anything it falls behind on is lost for good.
#include "support/kafka_collector.h"

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "kafka/mock_cluster.h"
#include "kafka/publisher.h"

namespace outboxd::test {
namespace {

using ::outboxd::kafka::MockCluster;
using ::outboxd::kafka::Publisher;

TEST(KafkaCollector, KeepsUpWithOneHundredThousandMessagesOnOnePartition) {
  auto cluster = MockCluster::Create(1);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ASSERT_TRUE((*cluster)->CreateTopic("bulk", 1, 1).ok());
  auto collector = KafkaCollector::Start((*cluster)->bootstraps(), {"bulk"});
  ASSERT_TRUE(collector.ok()) << collector.status();
  ASSERT_TRUE((*collector)->WaitUntilAssigned(absl::Seconds(10)));
  auto publisher = Publisher::Create({.brokers = (*cluster)->bootstraps()}, nullptr);
  ASSERT_TRUE(publisher.ok()) << publisher.status();

  constexpr int kMessages = 100000;
  constexpr int kRatePerSecond = 50000;
  const std::string payload(190, 'x');
  const absl::Time start = absl::Now();
  for (int i = 0; i < kMessages; ++i) {
    const std::string value = absl::StrCat(i, ":", payload);
    absl::Status s;
    while ((s = (*publisher)->Produce({.topic = "bulk", .key = "k", .value = value})).code() ==
           absl::StatusCode::kResourceExhausted) {
      (*publisher)->Poll(1);
    }
    ASSERT_TRUE(s.ok()) << s;
    if (i % 1000 == 999) {
      (*publisher)->Poll(0);
      // Pace like a relay in catch-up; an unpaced loop here outruns any consumer of
      // the mock (one ~1 MB message set per fetch).
      const absl::Time due = start + absl::Seconds(i + 1) / kRatePerSecond;
      if (due > absl::Now()) absl::SleepFor(due - absl::Now());
    }
  }
  ASSERT_TRUE((*publisher)->Flush(absl::Seconds(60)).ok());
  ASSERT_TRUE((*collector)->WaitForCount(kMessages, absl::Seconds(60)))
      << "collected " << (*collector)->Count() << ", lost to retention " << (*collector)->Skipped();
  EXPECT_EQ((*collector)->Skipped(), 0);
  const std::vector<CollectedMessage> got = (*collector)->Messages();
  for (int i = 0; i < kMessages; ++i) {
    ASSERT_EQ(got[i].offset, i);
    ASSERT_EQ(got[i].value, absl::StrCat(i, ":", payload));
  }
  std::printf("100k messages produced and collected in %s\n",
              absl::FormatDuration(absl::Now() - start).c_str());
  (*collector)->Stop();
  EXPECT_EQ((*collector)->Count(), static_cast<size_t>(kMessages));
}

}  // namespace
}  // namespace outboxd::test
