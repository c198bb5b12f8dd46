// Kafka: reads messages as `kcat -C -J` prints them (one JSON object per line: headers
// as a flat [name, value, ...] array, key, payload) and hands each to the CloudEvents
// SDK's Kafka binding, which tells binary from structured mode by the content-type
// header and validates the event against the CloudEvents 1.0 spec (a CloudEvent that
// is not valid throws); a message that is no CloudEvent (--format json) is read as
// plain JSON. Prints a line per message (describe.mjs); exit 1 when any was not read.
//   kcat -C -J -e -b B -t T | node check_cloudevents.mjs
import { Kafka } from "cloudevents";
import { createInterface } from "node:readline";
import { describe, exit } from "./describe.mjs";

for await (const line of createInterface({ input: process.stdin })) {
  if (!line.trim()) continue;
  const m = JSON.parse(line);
  const headers = {};
  for (let i = 0; i + 1 < (m.headers || []).length; i += 2) headers[m.headers[i]] = m.headers[i + 1];
  const message = { key: m.key, value: m.payload, headers, timestamp: m.ts };
  describe({ headers, body: m.payload, id: headers.id, isEvent: () => Kafka.isEvent(message),
             toEvent: () => Kafka.toEvent(message) });
}
exit();
