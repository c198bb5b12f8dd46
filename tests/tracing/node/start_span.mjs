// The writer of the OpenTelemetry round trip: starts a span and prints, as one JSON
// line, the carrier the W3C propagator filled (traceparent, tracestate) and the span's
// trace id and span id, for a test to SET LOCAL outboxd.traceparent/tracestate.
//   node start_span.mjs
import { startWriterSpan } from "./otel.mjs";

console.log(JSON.stringify(startWriterSpan()));
