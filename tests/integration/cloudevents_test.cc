// CloudEvents end to end (issue 32): `outboxd run --format cloudevents` (binary mode)
// and `--format cloudevents-json` (structured mode) publish to the mock cluster over
// TCP; kcat reads the topic back as JSON and the CloudEvents SDK for JavaScript
// (npm's `cloudevents`, tests/tracing/node, installed by scripts/npm-deps) parses each
// message with its own Kafka binding and validates it against the spec. What it reads
// is compared with the outbox row: id, type, subject (the aggregate), source, time,
// the partition key, the trace context from the headers column, and the data.
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "simdjson.h"
#include "support/relay_harness.h"

namespace outboxd::test {
namespace {

using ::testing::HasSubstr;

const std::vector<std::string> kTopics = {"pedido.confirmado"};
constexpr char kTraceparent[] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

// Each message of `topic` as the SDK read it: one JSON line per message, or
// {"error": ...} for one it refused; `rc` is the checker's exit status.
std::vector<std::string> SdkRead(RelayHarness& h, const std::string& topic, int* rc) {
  const std::string node_dir = absl::StrCat(OUTBOXD_SOURCE_DIR, "/tests/tracing/node");
  EXPECT_EQ(system(absl::StrCat(OUTBOXD_SOURCE_DIR, "/scripts/npm-deps ", node_dir).c_str()), 0);
  return CommandLines(
      absl::StrCat("timeout 30 kcat -b ", h.cluster().bootstraps(), " -C -t ", topic,
                   " -o beginning -e -q -J | node ", node_dir, "/check_cloudevents.mjs"),
      rc);
}

std::string Field(simdjson::dom::element event, const char* name) {
  std::string_view value;
  return event[name].get_string().get(value) ? std::string("(none)") : std::string(value);
}

void PublishTwoEventsAndCheckWithTheSdk(const std::string& format) {
  RelayHarness h(kTopics);
  std::string out;
  ASSERT_EQ(h.RunOutboxd({"setup", "--pg", h.db().conninfo(), "--slot", h.slot(),
                          "--headers-column", "headers"},
                         &out),
            0)
      << out;
  h.StartRelay({"--headers-column", "headers", "--format", format});
  auto conn = h.db().Connect();
  ASSERT_TRUE(conn.Exec(absl::StrCat("INSERT INTO outbox (aggregate_id, tipo, payload, headers) "
                                     "VALUES ('pedido-77', 'pedido.confirmado', "
                                     "'{\"total\": 10.5, \"itens\": [1, 2]}', "
                                     "'{\"traceparent\": \"",
                                     kTraceparent,
                                     "\"}'), ('pedido-78', 'pedido.confirmado', "
                                     "'{\"total\": 3}', NULL)"))
                  .ok());
  ASSERT_TRUE(h.collector().WaitForCount(2, absl::Seconds(30))) << h.relay().Log();
  int rc = -1;
  const std::vector<std::string> events = SdkRead(h, "pedido.confirmado", &rc);
  EXPECT_EQ(rc, 0) << ::testing::PrintToString(events);
  ASSERT_EQ(events.size(), 2u) << ::testing::PrintToString(events);
  simdjson::dom::parser parser;
  for (const std::string& line : events) {
    simdjson::dom::element event;
    ASSERT_FALSE(parser.parse(line).get(event)) << line;
    const std::string subject = Field(event, "subject");
    const std::string row = absl::StrCat(
        "SELECT id || '|' || to_char(criado_em AT TIME ZONE 'UTC', "
        "'YYYY-MM-DD\"T\"HH24:MI') FROM outbox WHERE aggregate_id = '",
        subject, "'");
    const std::string id_and_minute = h.db().Scalar(row);
    const std::string id = id_and_minute.substr(0, id_and_minute.find('|'));
    EXPECT_EQ(Field(event, "specversion"), "1.0") << line;
    EXPECT_EQ(Field(event, "id"), id) << line;
    EXPECT_EQ(Field(event, "type"), "pedido.confirmado") << line;
    EXPECT_EQ(Field(event, "source"), absl::StrCat("/outboxd/", h.db().name(), "/outbox")) << line;
    EXPECT_EQ(Field(event, "partitionkey"), subject) << line;
    EXPECT_EQ(Field(event, "datacontenttype"), "application/json") << line;
    EXPECT_THAT(Field(event, "time"), HasSubstr(id_and_minute.substr(id.size() + 1))) << line;
    double total = 0;
    ASSERT_FALSE(event["data"]["total"].get_double().get(total)) << line;
    if (subject == "pedido-77") {
      EXPECT_EQ(total, 10.5);
      EXPECT_EQ(Field(event, "traceparent"), kTraceparent) << line;
    } else {
      EXPECT_EQ(subject, "pedido-78");
      EXPECT_EQ(total, 3);
      EXPECT_EQ(Field(event, "traceparent"), "(none)") << line;
    }
  }
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

TEST(CloudEvents, TheBinaryModeIsAValidCloudEventToTheSdksKafkaBinding) {
  PublishTwoEventsAndCheckWithTheSdk("cloudevents");
}

TEST(CloudEvents, TheStructuredModeIsAValidCloudEventToTheSdksKafkaBinding) {
  PublishTwoEventsAndCheckWithTheSdk("cloudevents-json");
}

}  // namespace
}  // namespace outboxd::test
