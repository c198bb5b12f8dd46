// NATS: reads every message of a JetStream stream with the `nats` client (an ordered
// consumer) and hands each to the CloudEvents SDK. The JS SDK has no NATS binding; the
// NATS binding's binary mode is the HTTP binding's, headers and all (`ce-` attribute
// headers, `content-type` for datacontenttype), and its structured mode is the
// content-type application/cloudevents+json, so the SDK's HTTP binding reads both.
// Prints a line per message (describe.mjs); exit 1 when any was not read.
//   node read_nats.mjs nats://127.0.0.1:4222 STREAM COUNT
import { HTTP } from "cloudevents";
import { connect } from "nats";
import { describe, exit } from "./describe.mjs";

const [url, stream, count] = process.argv.slice(2);
const nc = await connect({ servers: url.replace(/^nats:\/\//, "") });
const consumer = await nc.jetstream().consumers.get(stream);
const messages = await consumer.fetch({ max_messages: Number(count), expires: 10000 });
let read = 0;
for await (const m of messages) {
  const headers = {};
  for (const [name, values] of m.headers ?? []) headers[name] = values[0];
  const message = { headers, body: m.string() };
  describe({ headers, body: message.body, id: headers.id, isEvent: () => HTTP.isEvent(message),
             toEvent: () => HTTP.toEvent(message) });
  if (++read === Number(count)) break;
}
await nc.close();
if (read !== Number(count)) {
  console.log(JSON.stringify({ error: `${read} messages in ${stream}, not ${count}` }));
  process.exit(1);
}
exit();
