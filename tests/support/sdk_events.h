// What the real clients of issue 32 read, against the outbox rows: the CloudEvents SDK
// for JavaScript and OpenTelemetry's W3C propagator (tests/tracing/node, npm packages
// pinned by its lock file), behind each sink's own client (kcat, amqplib, nats). The
// sinks' tests (tests/integration/cloudevents_test.cc, tests/amqp/cloudevents_test.cc,
// tests/nats/cloudevents_test.cc) write the same three events in each --format:
//
//   WriterSpan span = StartWriterSpan();            // a span of the writer service
//   InsertTracedEvents(db, span);                    // one of them through SET LOCAL
//   ... outboxd run --headers-column headers --format F delivers them ...
//   ExpectTheSdkReadTheEvents(TracingNode("read_nats.mjs") + " URL STREAM 3", db, F, span);
#ifndef OUTBOXD_TESTS_SUPPORT_SDK_EVENTS_H_
#define OUTBOXD_TESTS_SUPPORT_SDK_EVENTS_H_

#include <string>

#include "support/pg_fixture.h"

namespace outboxd::test {

// The formats each sink's test publishes in: plain JSON (the trace context as plain
// headers) and the two CloudEvents modes.
inline const std::vector<std::string> kTracedFormats = {"json", "cloudevents", "cloudevents-json"};

// A span the writer started (tests/tracing/node/start_span.mjs) and the W3C headers
// its propagator injected.
struct WriterSpan {
  std::string traceparent;
  std::string tracestate;
  std::string trace_id;
  std::string span_id;
};

// `node tests/tracing/node/SCRIPT`, the folder's packages installed (scripts/npm-deps).
std::string TracingNode(const std::string& script);

// Starts a writer's span; a failure fails the test (the span is then empty).
WriterSpan StartWriterSpan();

// The events InsertTracedEvents writes, each in a transaction of its own, all of type
// pedido.confirmado: pedido-77 names the headers column (a fixed traceparent),
// pedido-78 carries no trace, pedido-79 leaves the column to its default after
// `SET LOCAL outboxd.traceparent/tracestate` of `span`. Needs `outboxd setup
// --headers-column headers`.
inline constexpr int kTracedEvents = 3;
void InsertTracedEvents(TestDatabase& db, const WriterSpan& span);

// Runs `command`, a reader printing a line per message (tests/tracing/node/describe.mjs),
// and expects it to succeed with one line for each of InsertTracedEvents' events, in
// `format`: the CloudEvent's attributes (validated by the SDK) or the plain message's
// id; the data; the consumer's span continuing the right trace (the writer's span as
// its parent for pedido-79).
void ExpectTheSdkReadTheEvents(const std::string& command, TestDatabase& db,
                               const std::string& format, const WriterSpan& span);

}  // namespace outboxd::test

#endif  // OUTBOXD_TESTS_SUPPORT_SDK_EVENTS_H_
