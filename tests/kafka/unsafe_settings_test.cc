// kafka::UnsafeSettings (issue 13, point 9): which --kafka overrides void "every event
// delivered, in order per aggregate", read back from librdkafka so that aliases and
// other spellings of a value are caught too; and the redaction of point 8 in the
// error for a property librdkafka refuses.
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kafka/publisher.h"

namespace outboxd::kafka {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::vector<std::string> Unsafe(std::vector<std::pair<std::string, std::string>> properties,
                                MessageTimeout timeout = MessageTimeout::kMustBeInfinite) {
  PublisherOptions options{.brokers = "127.0.0.1:9", .properties = std::move(properties)};
  absl::StatusOr<std::vector<UnsafeSetting>> unsafe = UnsafeSettings(options, timeout);
  EXPECT_TRUE(unsafe.ok()) << unsafe.status();
  std::vector<std::string> out;
  if (!unsafe.ok()) return out;
  for (const UnsafeSetting& u : *unsafe) {
    EXPECT_FALSE(u.risk.empty()) << u.setting;
    out.push_back(u.setting);
  }
  return out;
}

TEST(UnsafeSettings, OurDefaultsAndHarmlessOverridesAreSafe) {
  EXPECT_THAT(Unsafe({}), ::testing::IsEmpty());
  EXPECT_THAT(Unsafe({{"acks", "all"},
                      {"acks", "-1"},
                      {"enable.idempotence", "true"},
                      {"max.in.flight.requests.per.connection", "1"},
                      {"linger.ms", "5"},
                      {"partitioner", "murmur2"},
                      {"message.timeout.ms", "0"},
                      {"queuing.strategy", "fifo"}}),
              ::testing::IsEmpty());
}

TEST(UnsafeSettings, NamesEachWeakenedGuaranteeWhateverTheSpelling) {
  EXPECT_THAT(Unsafe({{"enable.idempotence", "false"}}),
              ::testing::ElementsAre("enable.idempotence=false"));
  EXPECT_THAT(Unsafe({{"enable.idempotence", "0"}}),
              ::testing::ElementsAre("enable.idempotence=false"));
  EXPECT_THAT(Unsafe({{"acks", "1"}}), ::testing::ElementsAre("acks=1"));
  EXPECT_THAT(Unsafe({{"request.required.acks", "0"}}), ::testing::ElementsAre("acks=0"));
  EXPECT_THAT(Unsafe({{"message.timeout.ms", "300000"}}),
              ::testing::ElementsAre("message.timeout.ms=300000"));
  EXPECT_THAT(Unsafe({{"delivery.timeout.ms", "5"}}),
              ::testing::ElementsAre("message.timeout.ms=5"));
  EXPECT_THAT(Unsafe({{"partitioner", "random"}}), ::testing::ElementsAre("partitioner=random"));
  EXPECT_THAT(Unsafe({{"queuing.strategy", "lifo"}}),
              ::testing::ElementsAre("queuing.strategy=lifo"));
  EXPECT_THAT(Unsafe({{"enable.idempotence", "false"}, {"acks", "1"}}),
              ::testing::ElementsAre("enable.idempotence=false", "acks=1"));
  // The last word wins, as in the producer itself.
  EXPECT_THAT(Unsafe({{"acks", "1"}, {"acks", "all"}}), ::testing::IsEmpty());
}

TEST(UnsafeSettings, AFiniteMessageTimeoutIsSafeWhereAFailedAttemptIsRetried) {
  EXPECT_THAT(Unsafe({{"message.timeout.ms", "30000"}}, MessageTimeout::kMayBeFinite),
              ::testing::IsEmpty());
  EXPECT_THAT(Unsafe({{"acks", "0"}}, MessageTimeout::kMayBeFinite),
              ::testing::ElementsAre("acks=0"));
}

TEST(UnsafeSettings, ARefusedPropertyIsAnErrorWithoutItsValue) {
  for (const auto& [name, value] : std::vector<std::pair<std::string, std::string>>{
           {"sasl.pasword", "Typo-Secret-77"}, {"acks", "Wrong-Secret-88"}}) {
    PublisherOptions options{.brokers = "127.0.0.1:9", .properties = {{name, value}}};
    absl::StatusOr<std::vector<UnsafeSetting>> unsafe =
        UnsafeSettings(options, MessageTimeout::kMustBeInfinite);
    ASSERT_EQ(unsafe.status().code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_THAT(unsafe.status().message(), HasSubstr("Kafka property " + name + "=[redacted]"));
    EXPECT_THAT(unsafe.status().message(), Not(HasSubstr(value)));
  }
}

TEST(IsSecretProperty, CoversCredentialLookingNamesInAnyCase) {
  for (const char* name :
       {"sasl.password", "ssl.key.password", "ssl.key.pem", "SASL.PASSWORD",
        "sasl.oauthbearer.client.secret", "sasl.oauthbearer.config", "sasl.jaas.config",
        "my.api.token", "aws.credentials", "ssl.keystore.password"}) {
    EXPECT_TRUE(IsSecretProperty(name)) << name;
  }
  for (const char* name :
       {"linger.ms", "acks", "sasl.username", "bootstrap.servers", "client.id"}) {
    EXPECT_FALSE(IsSecretProperty(name)) << name;
  }
}

}  // namespace
}  // namespace outboxd::kafka
