// The OpenTelemetry side of the trace round trip (issue 32): a tracer of the JS SDK
// and the W3C Trace Context propagator of @opentelemetry/core, as a writer service and
// a consumer service would each set them up. The writer's sampler adds a tracestate
// entry of its own (as vendors' samplers do), so tracestate travels too.
import { ROOT_CONTEXT, defaultTextMapGetter, defaultTextMapSetter, trace } from "@opentelemetry/api";
import { TraceState, W3CTraceContextPropagator } from "@opentelemetry/core";
import { BasicTracerProvider, SamplingDecision } from "@opentelemetry/sdk-trace-base";

export const kWriterTraceState = "outboxd=writer";

const sampler = {
  shouldSample: () => ({ decision: SamplingDecision.RECORD_AND_SAMPLED,
                         traceState: new TraceState(kWriterTraceState) }),
  toString: () => "RecordAndTagSampler",
};
const writer = new BasicTracerProvider({ sampler }).getTracer("outboxd-tracing-checks-writer");
const consumer = new BasicTracerProvider().getTracer("outboxd-tracing-checks-consumer");
const propagator = new W3CTraceContextPropagator();

// Starts the writer's span and injects its context into a carrier (the headers the
// writer would hand outboxd). Returns the carrier and the span's ids.
export function startWriterSpan() {
  const span = writer.startSpan("pedido.confirmar", {}, ROOT_CONTEXT);
  const carrier = {};
  propagator.inject(trace.setSpan(ROOT_CONTEXT, span), carrier, defaultTextMapSetter);
  const { traceId, spanId } = span.spanContext();
  span.end();
  return { ...carrier, trace_id: traceId, span_id: spanId };
}

// Extracts the remote context from `carrier` (delivered headers or CloudEvent
// attributes) and starts the consumer's span under it (a tracer with the SDK's default
// sampler): its trace id, its parent's span id and the tracestate it inherited; null
// when the carrier holds no context.
export function continueTrace(carrier) {
  const parent = propagator.extract(ROOT_CONTEXT, carrier, defaultTextMapGetter);
  const remote = trace.getSpanContext(parent);
  if (!remote || !remote.isRemote) return null;
  const span = consumer.startSpan("pedido.processar", {}, parent);
  span.end();
  return { trace_id: span.spanContext().traceId, parent_id: span.parentSpanContext?.spanId,
           tracestate: span.spanContext().traceState?.serialize() };
}
