// CloudEvents and the trace round trip on RabbitMQ (issue 32): `outboxd run --sink
// rabbitmq` on the suite's shared node publishes three events (a trace context
// written into the headers column, none, and one an OpenTelemetry writer span set
// through SET LOCAL) in --format json, cloudevents (binary mode: `cloudEvents_`
// application properties) and cloudevents-json (structured mode); amqplib takes them
// from the queue and the CloudEvents SDK for JavaScript validates each
// (tests/tracing/node/read_rabbitmq.mjs), and OpenTelemetry's W3C propagator continues
// the trace from it (tests/support/sdk_events.h compares with the rows).
#include <csignal>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "support/amqp_fixture.h"
#include "support/child_process.h"
#include "support/pg_fixture.h"
#include "support/sdk_events.h"

namespace outboxd::test {
namespace {

// `outboxd ARGS...` to its end (two minutes at most); its exit code, its log in `log`.
int Outboxd(std::vector<std::string> args, std::string* log) {
  args.insert(args.begin(), BinPath("outboxd"));
  std::unique_ptr<ChildProcess> child = ChildProcess::Start(args);
  const int code = child->Wait(absl::Seconds(120)).value_or(-1);
  *log = child->Log();
  return code;
}

TEST(CloudEventsOnRabbitMq, BothModesAreValidToTheSdkAndTheWritersTraceContinues) {
  const WriterSpan span = StartWriterSpan();
  std::unique_ptr<TestBroker> broker = TestBroker::Create();
  const std::string exchange = broker->Name("outboxd");
  const std::string queue = broker->Name("events");
  broker->BindQueue(exchange, queue, "#");
  for (const std::string& format : kTracedFormats) {
    SCOPED_TRACE(format);
    std::unique_ptr<TestDatabase> db = TestDatabase::Create();
    std::string log;
    ASSERT_EQ(Outboxd({"setup", "--pg", db->conninfo(), "--slot", db->name(), "--headers-column",
                       "headers"},
                      &log),
              0)
        << log;
    std::unique_ptr<ChildProcess> relay = ChildProcess::Start(
        {BinPath("outboxd"), "run", "--pg", db->conninfo(), "--slot", db->name(), "--metrics",
         "127.0.0.1:0", "--sink", "rabbitmq", "--amqp-url", broker->url(), "--exchange", exchange,
         "--headers-column", "headers", "--format", format});
    ASSERT_TRUE(relay->WaitForAnyLog(kRelayReadsSlot, absl::Seconds(60))) << relay->Log();
    InsertTracedEvents(*db, span);
    // The reader waits for the three (10 s at most) and takes them off the queue.
    ExpectTheSdkReadTheEvents(absl::StrCat(TracingNode("read_rabbitmq.mjs"), " '", broker->url(),
                                           "' ", queue, " ", kTracedEvents),
                              *db, format, span);
    relay->Signal(SIGTERM);
    EXPECT_EQ(relay->Wait(absl::Seconds(60)), 0) << relay->Log();
  }
}

}  // namespace
}  // namespace outboxd::test
