# Issue 17 points 2 and 5 from one scripts/bench run (full or --only-pickup): outboxd
# `run` beside the naive relay (bench/naive_relay.py) and the seed's poller.
#   pickup = the message's Kafka CreateTime - the insert's clock_timestamp(): when the
#     relay handed the event to librdkafka (1 ms resolution, compared at mid-ms);
#   recv = when the probe received it: an upper bound of insert -> acknowledgement;
#   [relay] = share of events acknowledged within 2 ms of the commit (outboxd's own
#     outboxd_commit_to_ack_seconds; the naive relay has no metrics);
#   side by side = both relays on one database at the same moment, each on its own slot
#     (scripts/bench's pair()): the ≤ naive targets compare these when present; run's
#     pickup there is split at the walsender's send time (outboxd_pickup_seconds, as the
#     histogram bucket bound that holds the percentile).
#
#   jq -r -f scripts/bench-pickup.jq bench/results/latest.json

def f(x): if x == null then "—" elif x >= 100 then (x | floor | tostring)
          else ((x * 100 | round) / 100 | tostring) end;
def ok(c): if c then "ok" else "**MISSED**" end;
def pct(x): if x == null then "—" else "\((x * 1000 | round) / 10)%" end;
def n(x): x | floor | tostring | [scan("^\\d{1,3}(?=(?:\\d{3})*$)|\\d{3}")] | join(",");
# The bucket bound (ms) of a {le: cumulative fraction} histogram holding quantile q.
def bound(h; q): if h == null or h == {} then "—" else
  ([h | to_entries[] | select(.value >= q)] | first | .key) as $le |
  if $le == null then "—" elif $le == "+Inf" then "> 10 s" else "≤ \($le | tonumber * 1000)" end end;

(.live | keys | map(tonumber) | sort | map(tostring)) as $rates |
$rates[0] as $lo | .live as $l |
"Pickup (issue 17 points 2 and 5), ms\(if .load_average then "; load average \(.load_average)" else "" end):",
"",
"| events/s asked / achieved | contender | events seen | pickup p50 | pickup p99 | recv p50 | recv p99 | acked ≤ 2 ms [relay] |",
"|---|---|---|---|---|---|---|---|",
($rates[] as $r | ["run", "run"], ["naive", "naive relay (Python)"], ["poll", "poll (the seed's: batch 50, 500 ms nap)"] |
  . as [$k, $name] | $l[$r][$k] as $x | select($x != null) |
  "| \(n($r | tonumber)) / \(f($x.pgbench_tps)) | \($name) | \($x.count)/\($x.events) | \(f($x.create_ms.p50)) | \(f($x.create_ms.p99)) | \(f($x.recv_ms.p50)) | \(f($x.recv_ms.p99)) | \(pct($x.acked_within_s["0.002"])) |"),
(select(.pair != null and .pair != {}) |
  "",
  "Side by side (one database, a slot each, the same commits at the same moment), ms:",
  "",
  "| events/s asked / achieved | run pickup p50 / p99 | naive pickup p50 / p99 | run: PostgreSQL's share p50 / p99 (commit → walsender send) | run: its own share p50 / p99 (send → produce) |",
  "|---|---|---|---|---|",
  (.pair | to_entries | sort_by(.key | tonumber)[] | .value as $p | $p.run.pickup_stages_within_s as $st |
    "| \(n($p.rate)) / \(f($p.pgbench_tps)) | \(f($p.run.create_ms.p50)) / \(f($p.run.create_ms.p99)) | \(f($p.naive.create_ms.p50)) / \(f($p.naive.create_ms.p99)) | \(bound($st.postgresql; 0.5)) / \(bound($st.postgresql; 0.99)) | \(bound($st.relay; 0.5)) / \(bound($st.relay; 0.99)) |")),
"",
"| measure | run | peer | target | |",
"|---|---|---|---|---|",
(.pair // {}) as $pairs |
($rates[] as $r | ($pairs[$r] // $l[$r]) as $x | (if $pairs[$r] then " (side by side)" else "" end) as $how |
  select($x.run != null and $x.naive != null) |
  "| pickup p50 at \(n($r | tonumber))/s\($how) | \(f($x.run.create_ms.p50)) | naive \(f($x.naive.create_ms.p50)) | ≤ naive | \(ok($x.run.create_ms.p50 <= $x.naive.create_ms.p50)) |",
  "| pickup p99 at \(n($r | tonumber))/s\($how) | \(f($x.run.create_ms.p99)) | naive \(f($x.naive.create_ms.p99)) | ≤ naive | \(ok($x.run.create_ms.p99 <= $x.naive.create_ms.p99)) |"),
($l[$lo].run | select(. != null) |
  "| insert → ack p50 at \(n($lo | tonumber))/s: acked ≤ 2 ms [relay]; recv p50 | \(pct(.acked_within_s["0.002"])); \(f(.recv_ms.p50)) | | ≥ 50%; ≤ 2 | \(ok(.acked_within_s["0.002"] >= 0.5 and .recv_ms.p50 <= 2)) |"),
($l[$lo] | select(.run != null and .poll != null) |
  "| poll p50 / run p50, pickup at \(n($lo | tonumber))/s (issue 17's measure) | \(f(.run.create_ms.p50)) | poll \(f(.poll.create_ms.p50)): \(f(.poll.create_ms.p50 / .run.create_ms.p50))× | ≥ 100× | \(ok(.poll.create_ms.p50 / .run.create_ms.p50 >= 100)) |",
  "| poll p50 / run p50, recv at \(n($lo | tonumber))/s | \(f(.run.recv_ms.p50)) | poll \(f(.poll.recv_ms.p50)): \(f(.poll.recv_ms.p50 / .run.recv_ms.p50))× | ≥ 100× | \(ok(.poll.recv_ms.p50 / .run.recv_ms.p50 >= 100)) |")
