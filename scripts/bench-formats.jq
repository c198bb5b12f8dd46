# Headers and CloudEvents (issue 32), from scripts/bench --only-formats (or the full
# run's <stamp>.formats.json): one backlog whose every row carries a trace context in
# its headers column, drained by `run` four ways, alternating. What each figure means:
# the header of scripts/bench (phase 11).
#
#   jq -r -f scripts/bench-formats.jq bench/results/<stamp>.formats.json

def f(x): (x * 100 | round) / 100 | tostring;
def n(x): x | floor | tostring | [scan("^\\d{1,3}(?=(?:\\d{3})*$)|\\d{3}")] | join(",");
def median: sort | if length % 2 == 1 then .[length / 2 | floor]
                   else (.[length / 2 - 1] + .[length / 2]) / 2 end;
def range(x): if (x | length) > 1 then " (\(f(x | min))–\(f(x | max)))" else "" end;
def flags: {json: "--format json", headers: "--headers-column headers",
            cloudevents: "--headers-column headers --format cloudevents",
            "cloudevents-json": "--headers-column headers --format cloudevents-json"};

"## Headers and CloudEvents, scripts/bench \(.stamp)\(if .quick then " (--quick)" else "" end): \(.machine), fsync \(.fsync)",
"",
"| way | `run` flags | ev/s | CPU µs/event | CPU ÷ json | ev/s ÷ json |",
"|---|---|---|---|---|---|",
(. as $all | ["json", "headers", "cloudevents", "cloudevents-json"][] as $way
 | [$all.runs[] | .[$way]] as $r
 | [$all.runs[] | .[$way].cpu_us_per_event_with_startup / .json.cpu_us_per_event_with_startup] as $cpu
 | [$all.runs[] | .[$way].events_per_s / .json.events_per_s] as $rate
 | "| \($way) | `\(flags[$way])` | \(n([$r[].events_per_s] | median)) | \(f([$r[].cpu_us_per_event_with_startup] | median))\(range([$r[].cpu_us_per_event_with_startup])) | \(f($cpu | median))\(range($cpu)) | \(f($rate | median))\(range($rate)) |"),
"",
"Medians of \(.runs | length) round(s) (median (lowest–highest)), \(n(.events)) single-row transactions keyed over \(.aggregates) aggregates, each row with a traceparent and a tracestate in its headers column; one-partition topic per drain on an outboxd-mock-broker. CPU = utime + stime of `run` from its exec to drained, start-up included; ÷ json = against the plain json drain of the same round (the base: no --headers-column). Phase \(.seconds | floor) s."
