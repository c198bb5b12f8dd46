# Restart cost against the window size (issue 30), from scripts/bench --only-restart (or
# the full run's <stamp>.restart.json): per window of W events at the broker but not
# confirmed on the slot, `run --dedupe on` (the topic read back, the window skipped)
# beside `run --dedupe off` (the window sent again). What each figure means: the header
# of scripts/bench.
#
#   jq -r -f scripts/bench-restart.jq bench/results/<stamp>.restart.json

def f(x): if x == null then "—" elif x >= 100 then (x | round | tostring)
          else ((x * 100 | round) / 100 | tostring) end;
def s3(x): if x == null then "—" else ((x * 1000 | round) / 1000 | tostring) end;
def n(x): x | floor | tostring | [scan("^\\d{1,3}(?=(?:\\d{3})*$)|\\d{3}")] | join(",");
def side(r): "\(s3(r.to_streaming_s))\(if r.catch_up == "bulk" then " (bulk)" else "" end) | \(s3(r.to_confirmed_s))\(if r.runs > 1 then " (\(s3(r.to_confirmed_range_s[0]))–\(s3(r.to_confirmed_range_s[1])))" else "" end) | \(f(r.read_back_ms)) | \(n(r.duplicates))";

"## Restart cost against the window size, scripts/bench \(.stamp)\(if .quick then " (--quick)" else "" end): \(.machine), fsync \(.fsync)",
"",
"| window W | on: to streaming, s | on: to confirmed, s | on: read-back, ms | on: duplicates | off: to streaming, s | off: to confirmed, s | off: read-back, ms | off: duplicates | to confirmed, on ÷ off |",
"|---|---|---|---|---|---|---|---|---|---|",
(.windows[] | "| \(n(.window)) | \(side(.on)) | \(side(.off)) | \(f(.on.to_confirmed_s / .off.to_confirmed_s)) |"),
"",
"\(if .windows[0].on.runs > 1 then "Medians of \(.windows[0].on.runs) runs of each (to confirmed: median (fastest–slowest)); duplicates: the most of any run. " else "One run of each. " end)Each run: one event stuck behind a broker that is down, then W events acknowledged, kill -9, the broker back, and `run` restarted: to streaming = its start → its \"streaming\" log line (bulk: \"catching up through SQL (bulk)\", a window over --bulk-catch-up); to confirmed = its start → the slot confirmed past the window (start-up and connection included); read-back = the read-back's own time (every topic of the window); duplicates = copies in the topic beyond one per event (kcat). --dedupe on skipped at least \([.windows[].on.skipped | n(.)] | join(" / ")) events (outboxd_dedupe_skipped_total). Load average after the phase: \(.load_average_after); phase \(f(.phase_seconds)) s."
