# The plain-against-partitioned outbox tables of one scripts/bench run (its phase 5,
# scripts/bench-partitions), from the run's JSON: the same tables bench-partitions
# prints while it runs.
#
#   jq -r -f scripts/bench-partitions.jq bench/results/latest.json

# 1000000 -> "1,000,000"
def n(x): x | floor | tostring | [scan("^\\d{1,3}(?=(?:\\d{3})*$)|\\d{3}")] | join(",");
def kb(bytes): n(bytes / 1024);
def s(x): (x * 100 | round) / 100 | tostring;

.partitioned_outbox as $p | $p.cleanup as $c | $p.catchup_during_cleanup as $u |
"| \(n($p.rows)) acknowledged rows | WAL written | wall time |",
"|---|---|---|",
"| plain outbox: `outboxd cleanup` (DELETE in batches of 5,000) | \(kb($c.plain.wal_bytes)) kB | \(s($c.plain.seconds)) s |",
"| plain outbox: the VACUUM after it | \(kb($c.plain_vacuum.wal_bytes)) kB | \(s($c.plain_vacuum.seconds)) s |",
"| partitioned outbox: `outboxd cleanup` (DETACH + DROP of the day's partition) | \(kb($c.partitioned.wal_bytes)) kB | \(s($c.partitioned.seconds)) s |",
"",
"| `outboxd run` catching up on \(n($u.backlog)) events while that cleanup runs | until an event written after it is confirmed | events/s |",
"|---|---|---|",
"| plain outbox | \(s($u.plain_seconds)) s | \(n($u.backlog / $u.plain_seconds)) |",
"| partitioned outbox | \(s($u.partitioned_seconds)) s | \(n($u.backlog / $u.partitioned_seconds)) |",
"",
"| writers (pgbench, 4 clients, single-row INSERT, \($p.writers.seconds) s) | transactions/s |",
"|---|---|",
"| plain outbox | \(n($p.writers.plain_tps)) |",
"| partitioned outbox (by day, DEFAULT partition) | \(n($p.writers.partitioned_tps)) |"
