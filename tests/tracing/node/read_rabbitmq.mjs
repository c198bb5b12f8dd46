// RabbitMQ: takes COUNT messages from a queue with `amqplib` and hands each to the
// CloudEvents SDK. The JS SDK has no AMQP binding; the AMQP binding's conventions map
// onto its HTTP binding one for one: in binary mode each attribute is an application
// property `cloudEvents_NAME` (here `ce-NAME`) and datacontenttype the AMQP
// content-type property (`content-type`); in structured mode the content-type is
// application/cloudevents+json and the body the event. The SDK then parses and
// validates it. Prints a line per message (describe.mjs); exit 1 when any was not read.
//   node read_rabbitmq.mjs amqp://guest:guest@127.0.0.1:5672/%2f QUEUE COUNT
import amqp from "amqplib";
import { HTTP } from "cloudevents";
import { describe, exit } from "./describe.mjs";

const kPrefix = "cloudEvents_";
const [url, queue, count] = process.argv.slice(2);

function asHttp(m) {
  const headers = { "content-type": m.properties.contentType };
  for (const [name, value] of Object.entries(m.properties.headers ?? {})) {
    headers[name.startsWith(kPrefix) ? `ce-${name.slice(kPrefix.length)}` : name] = String(value);
  }
  return { headers, body: m.content.toString() };
}

const connection = await amqp.connect(url);
const channel = await connection.createChannel();
const taken = [];
await new Promise((resolve) => {
  const timer = setTimeout(resolve, 10000);
  channel.consume(queue, (m) => {
    taken.push(m);
    if (taken.length === Number(count)) clearTimeout(timer), resolve();
  }, { noAck: true });
});
await connection.close();
for (const m of taken) {
  const message = asHttp(m);
  const headers = Object.fromEntries(
      Object.entries(m.properties.headers ?? {}).map(([name, value]) => [name, String(value)]));
  describe({ headers, body: message.body, id: m.properties.messageId,
             isEvent: () => HTTP.isEvent(message), toEvent: () => HTTP.toEvent(message) });
}
if (taken.length !== Number(count)) {
  console.log(JSON.stringify({ error: `${taken.length} messages in ${queue}, not ${count}` }));
  process.exit(1);
}
exit();
