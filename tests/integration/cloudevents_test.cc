// CloudEvents and the trace round trip on Kafka, end to end (issue 32): `outboxd run`
// publishes three events (a trace context written into the headers column, none, and
// one an OpenTelemetry writer span set through SET LOCAL) to the mock cluster over TCP
// in --format json, cloudevents (binary mode) and cloudevents-json (structured mode);
// kcat reads the topic back and the CloudEvents SDK for JavaScript (npm's
// `cloudevents`, tests/tracing/node, installed by scripts/npm-deps) parses each
// message with its own Kafka binding and validates it, and OpenTelemetry's W3C
// propagator continues the trace from it (tests/support/sdk_events.h compares with
// the rows).
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "support/relay_harness.h"
#include "support/sdk_events.h"

namespace outboxd::test {
namespace {

TEST(CloudEvents, OnKafkaBothModesAreValidToTheSdkAndTheWritersTraceContinues) {
  const WriterSpan span = StartWriterSpan();
  for (const std::string& format : kTracedFormats) {
    SCOPED_TRACE(format);
    RelayHarness h({"pedido.confirmado"});
    std::string out;
    ASSERT_EQ(h.RunOutboxd({"setup", "--pg", h.db().conninfo(), "--slot", h.slot(),
                            "--headers-column", "headers"},
                           &out),
              0)
        << out;
    h.StartRelay({"--headers-column", "headers", "--format", format});
    InsertTracedEvents(h.db(), span);
    ASSERT_TRUE(h.collector().WaitForCount(kTracedEvents, absl::Seconds(30))) << h.relay().Log();
    ExpectTheSdkReadTheEvents(absl::StrCat("timeout 30 kcat -b ", h.cluster().bootstraps(),
                                           " -C -t pedido.confirmado -o beginning -e -q -J | ",
                                           TracingNode("check_cloudevents.mjs")),
                              h.db(), format, span);
    EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
  }
}

}  // namespace
}  // namespace outboxd::test
