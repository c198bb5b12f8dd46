// CloudEvents and the trace round trip on NATS JetStream (issue 32): `outboxd run
// --sink nats` publishes three events (a trace context written into the headers
// column, none, and one an OpenTelemetry writer span set through SET LOCAL) in
// --format json, cloudevents (binary mode: `ce-` headers) and cloudevents-json
// (structured mode), each to a stream of its own; the `nats` client reads the stream
// and the CloudEvents SDK for JavaScript validates each message
// (tests/tracing/node/read_nats.mjs), and OpenTelemetry's W3C propagator continues the
// trace from it (tests/support/sdk_events.h compares with the rows).
#include <csignal>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "support/child_process.h"
#include "support/nats_test.h"
#include "support/pg_fixture.h"
#include "support/sdk_events.h"

namespace outboxd::test {
namespace {

class CloudEventsOnNats : public NatsTest {};

TEST_F(CloudEventsOnNats, BothModesAreValidToTheSdkAndTheWritersTraceContinues) {
  const WriterSpan span = StartWriterSpan();
  for (const std::string& format : kTracedFormats) {
    SCOPED_TRACE(format);
    std::unique_ptr<TestDatabase> db = TestDatabase::Create();
    std::unique_ptr<ChildProcess> setup =
        ChildProcess::Start({BinPath("outboxd"), "setup", "--pg", db->conninfo(), "--slot",
                             db->name(), "--headers-column", "headers"});
    ASSERT_EQ(setup->Wait(absl::Seconds(120)), 0) << setup->Log();
    // A stream per format (the relay creates it, taking <prefix>_<format>.>).
    const std::string stream = absl::StrCat(stream_, "_", format);
    std::unique_ptr<ChildProcess> relay =
        ChildProcess::Start({BinPath("outboxd"),
                             "run",
                             "--pg",
                             db->conninfo(),
                             "--slot",
                             db->name(),
                             "--metrics",
                             "127.0.0.1:0",
                             "--sink",
                             "nats",
                             "--nats-url",
                             url_,
                             "--stream",
                             stream,
                             "--topic",
                             absl::StrCat(prefix_, "_", format, ".{type}"),
                             "--headers-column",
                             "headers",
                             "--format",
                             format});
    ASSERT_TRUE(relay->WaitForAnyLog(kRelayReadsSlot, absl::Seconds(60))) << relay->Log();
    InsertTracedEvents(*db, span);
    // The reader's consumer waits for the three (10 s at most).
    ExpectTheSdkReadTheEvents(
        absl::StrCat(TracingNode("read_nats.mjs"), " ", url_, " ", stream, " ", kTracedEvents), *db,
        format, span);
    relay->Signal(SIGTERM);
    EXPECT_EQ(relay->Wait(absl::Seconds(60)), 0) << relay->Log();
  }
}

}  // namespace
}  // namespace outboxd::test
