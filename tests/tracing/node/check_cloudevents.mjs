// Reads messages as `kcat -C -J` prints them (one JSON object per line: headers as a
// flat [name, value, ...] array, key, payload) and hands each to the CloudEvents SDK's
// Kafka binding, which tells binary from structured mode by the content-type header
// and validates the event against the CloudEvents 1.0 spec (a CloudEvent that is not
// valid throws). Prints one line per message: the event's attributes as the SDK read
// them, or {"error": ...}. Exit 1 when any message is not a valid CloudEvent.
//   kcat -C -J -e -b B -t T | node check_cloudevents.mjs
import { Kafka } from "cloudevents";
import { createInterface } from "node:readline";

let failed = false;
for await (const line of createInterface({ input: process.stdin })) {
  if (!line.trim()) continue;
  const m = JSON.parse(line);
  const headers = {};
  for (let i = 0; i + 1 < (m.headers || []).length; i += 2) headers[m.headers[i]] = m.headers[i + 1];
  try {
    const event = Kafka.toEvent({ key: m.key, value: m.payload, headers, timestamp: m.ts });
    event.validate();
    const { specversion, id, source, type, subject, time, datacontenttype, partitionkey,
            traceparent, tracestate } = event;
    console.log(JSON.stringify({ specversion, id, source, type, subject, time, datacontenttype,
                                 partitionkey, traceparent, tracestate, data: event.data }));
  } catch (e) {
    failed = true;
    console.log(JSON.stringify({ error: String(e && (e.message || e)), errors: e && e.errors }));
  }
}
process.exit(failed ? 1 : 0);
