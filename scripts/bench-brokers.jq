# The three brokers side by side in one scripts/bench run (`--only-brokers`, or the
# full run's <stamp>.brokers.json): `run` to Kafka (the mock cluster), RabbitMQ and NATS
# JetStream on the same PostgreSQL, live at one rate, catching up a single-row backlog,
# and draining a hot aggregate (every event of one key). What each figure means: the
# header of scripts/bench.
#
#   jq -r -f scripts/bench-brokers.jq bench/results/<stamp>.brokers.json

def f(x): if x == null then "—" elif x >= 100 then (x | floor | tostring)
          else ((x * 100 | round) / 100 | tostring) end;
def pct(x): if x == null then "—" else "\((x * 1000 | round) / 10)%" end;
def n(x): x | floor | tostring | [scan("^\\d{1,3}(?=(?:\\d{3})*$)|\\d{3}")] | join(",");
def row($what; g): "| \($what) | \(.kafka | g) | \(.rabbitmq | g) | \(.nats | g) |";

.live as $l | .catchup as $c | .hot as $h |
"## Brokers side by side, scripts/bench \(.stamp)\(if .quick then " (--quick)" else "" end): \(.machine), fsync \(.fsync), \(.nats_server)",
"",
"| measure | Kafka (mock cluster) | RabbitMQ | NATS JetStream |",
"|---|---|---|---|",
($l | row("live at \(n($l.kafka.rate))/s asked: events seen"; "\(.count)/\(.events)")),
($l | row("acked ≤ 1 / 2 / 10 / 25 ms of the commit [relay]"; "\(pct(.acked_within_s["0.001"])) / \(pct(.acked_within_s["0.002"])) / \(pct(.acked_within_s["0.01"])) / \(pct(.acked_within_s["0.025"]))")),
($l | row("insert → probe receive p50 / p99, ms"; "\(f(.recv_ms.p50)) / \(f(.recv_ms.p99))")),
($l | row("insert → [produce] p50 / p99, ms (Kafka: CreateTime; NATS: stored)"; if .create_ms == null then "—" else "\(f(.create_ms.p50)) / \(f(.create_ms.p99))" end)),
($l | row("peak RSS under load, MiB"; f(.peak_rss_kib / 1024))),
($c | row("catch-up of \(n($c.kafka.events)) single-row transactions, ev/s"; f(.run.events_per_s))),
($c | row("catch-up, ÷ Kafka"; f(.run.events_per_s / $c.kafka.run.events_per_s))),
($c | row("catch-up, relay CPU per event (start-up excluded; with it), µs"; "\(f(.run.cpu_us_per_event)); \(f(.run.cpu_us_per_event_with_startup))")),
($c | row("catch-up, peak RSS, MiB"; f(.run.peak_rss_kib / 1024))),
($h | row("hot aggregate: \(n($h.kafka.events)) events of one key, ev/s"; f(.run.events_per_s))),
($h | row("hot aggregate, ÷ Kafka"; f(.run.events_per_s / $h.kafka.run.events_per_s))),
($h | row("hot aggregate, relay CPU per event (with start-up), µs"; f(.run.cpu_us_per_event_with_startup))),
"",
"RabbitMQ's probe receive is insert → delivery (a persistent message may be delivered before it is confirmed); Kafka's and NATS' are upper bounds of insert → acknowledgement. RabbitMQ and NATS keep per-key order with one message of a key at the broker at a time: a hot aggregate goes at one publish round trip per event. Load average after the run: \(.load_average_after); RabbitMQ phase \(f(.phase_seconds.rabbitmq)) s, NATS phase \(f(.phase_seconds.nats)) s."
