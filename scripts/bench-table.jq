# The markdown table of one scripts/bench run, each figure beside its target, from the
# run's JSON (what each figure means: the header of scripts/bench).
#
#   jq -r -f scripts/bench-table.jq bench/results/latest.json

def f(x): if x == null then "—" elif x >= 100 then (x | floor | tostring)
          else ((x * 100 | round) / 100 | tostring) end;
def ok(c): if c then "ok" else "**MISSED**" end;
def pct(x): if x == null then "—" else "\((x * 1000 | round) / 10)%" end;
def mib(kib): f(kib / 1024);
# 1000000 -> "1,000,000"
def n(x): x | floor | tostring | [scan("^\\d{1,3}(?=(?:\\d{3})*$)|\\d{3}")] | join(",");
# A rate pgbench fell more than 10% short of (a few % is start-up and pacing noise).
def short($x): $x.pgbench_tps != null and $x.pgbench_tps < 0.9 * $x.rate;

def live_rows($rate; $l):
  ["run", "run"], ["naive", "naive relay (Python)"], ["poll", "poll (batch 50, 500ms)"], ["notify", "poll --notify"],
  ["rabbitmq", "run --sink rabbitmq (recv = delivery)"], ["nats", "run --sink nats ([produce] = stored)"] |
  . as [$k, $name] |
  $l[$k] as $x | select($x != null) |
  "| \(n($rate)) / \(f($x.pgbench_tps))\(if short($x) then " (short)" else "" end) | \($name) | \($x.count)/\($x.events) | \(f($x.recv_ms.p50)) | \(f($x.recv_ms.p99)) | \(f($x.recv_ms.p999)) | \(f($x.recv_ms.max)) | \(f($x.create_ms.p50)) | \(f($x.create_ms.p99)) | \(pct($x.acked_within_s["0.001"])) / \(pct($x.acked_within_s["0.002"])) / \(pct($x.acked_within_s["0.01"])) / \(pct($x.acked_within_s["0.025"])) | \(mib($x.peak_rss_kib)) |";

def backlog($c): if $c.rows_per_transaction == 1 then "\(n($c.transactions)) × 1 row"
                 else "\(n($c.transactions)) × \(n($c.rows_per_transaction)) rows" end;

# $recv, $decode: the targets for run's rate over pg_recvlogical's and over the
# in-server decode's, as strings printed as given (null: reported, no target). Issue
# 17's: a single-row backlog >= 2x pg_recvlogical and >= 0.5x the decode, a
# large-transaction one >= 1.0x pg_recvlogical.
def ratio_row($b; $what; $x; $target):
  "| \($b) | \($what) | \(f($x)) | \(if $target == null then "report |" else ">= \($target) | \(ok($x >= ($target | tonumber)))" end) |";
def catchup_rows($c; $recv; $decode):
  backlog($c) as $b | $c.run as $run |
  "| \($b) | in-server decode (peek) | \(f($c.decode.seconds)) s, \(f($c.decode.events_per_s)) ev/s | the limit | |",
  "| \($b) | pg_recvlogical -> /dev/null | \(f($c.pg_recvlogical.seconds)) s, \(f($c.pg_recvlogical.events_per_s)) ev/s | | |",
  "| \($b) | run drain | \(f($run.seconds)) s, \(f($run.events_per_s)) ev/s | | |",
  ratio_row($b; "run / pg_recvlogical"; $run.events_per_s / $c.pg_recvlogical.events_per_s; $recv),
  ratio_row($b; "run / in-server decode"; $run.events_per_s / $c.decode.events_per_s; $decode),
  "| \($b) | run CPU per event (start-up excluded; with it) | \(f($run.cpu_us_per_event)) µs; \(f($run.cpu_us_per_event_with_startup)) µs | <= 5 µs | \(ok($run.cpu_us_per_event <= 5)) |",
  "| \($b) | run peak RSS | \(mib($run.peak_rss_kib)) MiB | | |";

(.live | keys | map(tonumber) | sort | map(tostring)) as $rates |
$rates[0] as $lo | $rates[-1] as $hi |
.live as $l | .catchup as $c | .memory as $m | .fsync as $fsync |
"\(n($c.poll.events)) × 1 row" as $pb |
"## outboxd bench \(.stamp)\(if .quick then " (--quick)" else "" end): \(.machine), fsync \(.fsync)",
"",
"Live: \($rates | map(n(tonumber)) | join(" and ")) events/s asked, \($l[$lo].run.seconds) s each, insert -> broker; latency = probe receive time (upper bound of the ack), [produce] = CreateTime (lower bound), ms; [relay] = share of events the broker acknowledged within 1 / 2 / 10 / 25 ms of the commit (poll: of created_at), from the relay histogram outboxd_commit_to_ack_seconds.",
"",
"| events/s asked / achieved | contender | events seen | p50 | p99 | p99.9 | max | p50 [produce] | p99 [produce] | acked ≤ 1 / 2 / 10 / 25 ms [relay] | peak RSS MiB |",
"|---|---|---|---|---|---|---|---|---|---|---|",
($rates[] as $r | live_rows($r | tonumber; $l[$r])),
($rates[] as $r | [$l[$r][] | select(short(.))] | select(length > 0) |
  "", "At \(n($r | tonumber)) events/s asked pgbench achieved \(map(f(.pgbench_tps)) | join(", ")) tps (\(.[0].pgbench_clients) clients, fsync \($fsync)): \(map(.contender) | join(", ")) ran at the highest rate the machine sustains here, not at \(n($r | tonumber))/s."),
"",
"Catch-up: each backlog written while no relay runs, drained from the relay's start; poll on its own backlog.",
"",
"| backlog | measure | value | target | |",
"|---|---|---|---|---|",
catchup_rows($c.single_row; "2"; "0.5"),
catchup_rows($c.large_transactions; "1.0"; null),
"| \($pb) | poll drain | \(f($c.poll.seconds)) s, \(f($c.poll.events_per_s)) ev/s | | |",
"| \($pb) | poll / pg_recvlogical (of the single-row backlog) | \(f($c.poll.events_per_s / $c.single_row.pg_recvlogical.events_per_s)) | | |",
"| \($pb) | poll CPU per event (start-up excluded; with it) | \(f($c.poll.cpu_us_per_event)) µs; \(f($c.poll.cpu_us_per_event_with_startup)) µs | | |",
"| \($pb) | poll peak RSS | \(mib($c.poll.peak_rss_kib)) MiB | | |",
(.catchup.rabbitmq // empty | . as $r |
  "| \(backlog($r)) | run --sink rabbitmq drain (probe consumed \(n($r.consumed))) | \(f($r.run.seconds)) s, \(f($r.run.events_per_s)) ev/s | report | |",
  "| \(backlog($r)) | run --sink rabbitmq / run to Kafka | \(f($r.run.events_per_s / $c.single_row.run.events_per_s)) | report | |",
  "| \(backlog($r)) | run --sink rabbitmq CPU per event (start-up excluded; with it) | \(f($r.run.cpu_us_per_event)) µs; \(f($r.run.cpu_us_per_event_with_startup)) µs | | |",
  "| \(backlog($r)) | run --sink rabbitmq peak RSS | \(mib($r.run.peak_rss_kib)) MiB | | |"),
(.catchup.nats // empty | . as $r |
  "| \(backlog($r)) | run --sink nats drain (probe consumed \(n($r.consumed))) | \(f($r.run.seconds)) s, \(f($r.run.events_per_s)) ev/s | report | |",
  "| \(backlog($r)) | run --sink nats / run to Kafka | \(f($r.run.events_per_s / $c.single_row.run.events_per_s)) | report | |",
  "| \(backlog($r)) | run --sink nats CPU per event (start-up excluded; with it) | \(f($r.run.cpu_us_per_event)) µs; \(f($r.run.cpu_us_per_event_with_startup)) µs | | |"),
"",
($l[$lo].rabbitmq // empty | . as $x |
  "RabbitMQ at \(n($lo | tonumber))/s (insert -> publisher confirm is the relay histogram; the probe's receive may precede the confirm):",
  "",
  "| measure | Kafka (run) | RabbitMQ (run --sink rabbitmq) |",
  "|---|---|---|",
  "| acked ≤ 1 / 2 / 10 / 25 ms of the commit [relay] | \(pct($l[$lo].run.acked_within_s["0.001"])) / \(pct($l[$lo].run.acked_within_s["0.002"])) / \(pct($l[$lo].run.acked_within_s["0.01"])) / \(pct($l[$lo].run.acked_within_s["0.025"])) | \(pct($x.acked_within_s["0.001"])) / \(pct($x.acked_within_s["0.002"])) / \(pct($x.acked_within_s["0.01"])) / \(pct($x.acked_within_s["0.025"])) |",
  "| insert -> probe receive p50 / p99 / max, ms | \(f($l[$lo].run.recv_ms.p50)) / \(f($l[$lo].run.recv_ms.p99)) / \(f($l[$lo].run.recv_ms.max)) | \(f($x.recv_ms.p50)) / \(f($x.recv_ms.p99)) / \(f($x.recv_ms.max)) |",
  "| catch-up of \(n($c.single_row.events)) single-row transactions, ev/s | \(f($c.single_row.run.events_per_s)) | \(f($c.rabbitmq.run.events_per_s // null)) |",
  ""),
"Live targets:",
"",
"| measure | value | target | |",
"|---|---|---|---|",
"| run p50 at \(n($lo | tonumber))/s | \(f($l[$lo].run.recv_ms.p50)) ms | <= 2 ms | \(ok($l[$lo].run.recv_ms.p50 <= 2)) |",
"| run, acked within 2 ms of the commit at \(n($lo | tonumber))/s [relay] | \(pct($l[$lo].run.acked_within_s["0.002"])) | >= 50% (p50 <= 2 ms, commit -> ack) | \(ok($l[$lo].run.acked_within_s["0.002"] >= 0.5)) |",
"| run p99 at \(n($lo | tonumber))/s | \(f($l[$lo].run.recv_ms.p99)) ms | <= 10 ms | \(ok($l[$lo].run.recv_ms.p99 <= 10)) |",
"| poll p50 / run p50 at \(n($lo | tonumber))/s | \(f($l[$lo].poll.recv_ms.p50 / $l[$lo].run.recv_ms.p50)) | >= 100 | \(ok($l[$lo].poll.recv_ms.p50 / $l[$lo].run.recv_ms.p50 >= 100)) |",
"| poll --notify p50 / run p50 at \(n($lo | tonumber))/s | \(f($l[$lo].notify.recv_ms.p50 / $l[$lo].run.recv_ms.p50)) | report | |",
"| run p99 at \(n($hi | tonumber))/s asked (\(f($l[$hi].run.pgbench_tps)) achieved) | \(f($l[$hi].run.recv_ms.p99)) ms | <= 25 ms | \(ok($l[$hi].run.recv_ms.p99 <= 25)) |",
"",
"Memory (`run`, peak RSS):",
"",
"| measure | value | target | |",
"|---|---|---|---|",
"| idle (connected, 1 s) | \(mib($m.idle_rss_kib)) MiB | report | |",
"| under load (\($rates | map(n(tonumber)) | join(" / ")) events/s) | \([$rates[] as $r | mib($l[$r].run.peak_rss_kib)] | join(" / ")) MiB | <= 32 MiB | \(ok($m.under_load_rss_kib / 1024 <= 32)) |",
"| catch-up (\(backlog($c.single_row)); \(backlog($c.large_transactions))) | \(mib($c.single_row.run.peak_rss_kib)); \(mib($c.large_transactions.run.peak_rss_kib)) MiB | | |",
"| one \(n($m.large_transaction.events))-row transaction (drained in \(f($m.large_transaction.run.seconds)) s, \(f($m.large_transaction.run.events_per_s)) ev/s) | \(mib($m.large_transaction.run.peak_rss_kib)) MiB | <= 256 MiB\(if $m.large_transaction.events < 1000000 then " (for 1,000,000 rows: scripts/bench-rss)" else "" end) | \(ok($m.large_transaction.run.peak_rss_kib / 1024 <= 256)) |",
"",
(.writer // empty | . as $w |
  "Writer cost (pgbench, \($w.table.pgbench_clients) clients, \($w.table.seconds) s each): an outbox INSERT against outboxd_emit (WAL-only, `run --source messages`):",
  "",
  "| writer | tps | tps, synchronous_commit off | WAL bytes per event | relay drain of what it wrote | relay CPU/event (start-up included) |",
  "|---|---|---|---|---|---|",
  ($w.table, $w.messages | "| \(if .source == "table" then "outbox INSERT" else "outboxd_emit" end) | \(f(.writer_tps)) | \(f(.writer_tps_synchronous_commit_off)) | \(f(.wal_bytes_per_event)) | \(n(.events)) events in \(f(.run.seconds)) s, \(f(.run.events_per_s)) ev/s | \(f(.run.cpu_us_per_event_with_startup)) us |"),
  "| outboxd_emit / INSERT | \(f($w.messages.writer_tps / $w.table.writer_tps)) | \(f($w.messages.writer_tps_synchronous_commit_off / $w.table.writer_tps_synchronous_commit_off)) | \(f($w.messages.wal_bytes_per_event / $w.table.wal_bytes_per_event)) | \(f($w.messages.run.events_per_s / $w.table.run.events_per_s)) | report (issue 17 measured 9.5-10.3k vs 17.5-19.7k tps) |",
  ""),
"Wall time: live \(f(.phase_seconds.live)) s, catch-up \(f(.phase_seconds.catchup)) s, RabbitMQ \(f(.phase_seconds.rabbitmq)) s\(if .phase_seconds.nats then ", NATS \(f(.phase_seconds.nats)) s" else "" end), large transaction \(f(.phase_seconds.memory)) s, writer \(f(.phase_seconds.writer)) s; \(f(.elapsed_s)) s in all before the plots."
