// What the readers (check_cloudevents.mjs, read_rabbitmq.mjs, read_nats.mjs) print for
// each delivered message, one JSON line: a CloudEvent as the SDK read and validated it
// (its attributes and data), or a plain message's id and data; and in both, `trace`:
// the consumer's span continuing the trace from the message (see otel.mjs), taken
// from the headers for a plain message and from the distributed tracing extension's
// attributes for a CloudEvent. A message the SDK refuses prints {"error": ...}.
import { continueTrace } from "./otel.mjs";

let failed = false;

// `message`: { headers, body, id } with `isEvent()` / `toEvent()` of the sink's binding.
export function describe(message) {
  try {
    if (!message.isEvent()) {
      console.log(JSON.stringify({ id: message.id, data: JSON.parse(message.body),
                                   trace: continueTrace(message.headers) }));
      return;
    }
    const event = message.toEvent();
    event.validate();
    const { specversion, id, source, type, subject, time, datacontenttype, partitionkey,
            traceparent, tracestate } = event;
    console.log(JSON.stringify({ specversion, id, source, type, subject, time, datacontenttype,
                                 partitionkey, traceparent, tracestate, data: event.data,
                                 trace: continueTrace({ traceparent, tracestate }) }));
  } catch (e) {
    failed = true;
    console.log(JSON.stringify({ error: String(e && (e.message || e)), errors: e && e.errors }));
  }
}

// Exits 1 when any message was not read.
export function exit() {
  process.exit(failed ? 1 : 0);
}
