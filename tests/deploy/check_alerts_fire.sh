#!/usr/bin/env bash
# The alert rules of deploy/prometheus/ proven on a real Prometheus (Debian's
# `prometheus` server), scraping a real `outboxd run` against the real PostgreSQL
# (OUTBOXD_TEST_PG) and outboxd-mock-broker in a process of its own:
#
#  1. the rules are loaded from a copy of outboxd-alerts.yml with every duration
#     divided by 30 (`for: 2m` -> `for: 4s`, `[15m]` -> `[30s]`, the 300 s age
#     threshold -> 10 s), made by substitution so the expressions are the real ones;
#     scrape and evaluation every second;
#  2. the broker goes down with events committed: OutboxdStalled and
#     OutboxdOldestUnacknowledgedEventTooOld go to firing in /api/v1/alerts; the broker
#     comes back: both resolve (leave the list);
#  3. an event the relay cannot produce (no --key-pointer field) becomes a dead letter:
#     OutboxdDeadLettersIncreasing fires, and resolves once its window has passed;
#     no other alert fires meanwhile; then one the dead-letter table refuses (a trigger
#     raising what a too-long index key raised): the relay fails again and again at
#     it, and OutboxdStalled and OutboxdOldestUnacknowledgedEventTooOld fire until the
#     trigger is gone;
#  4. the Grafana dashboard (deploy/grafana/outboxd.json): every panel's query parses
#     on this Prometheus (/api/v1/query) and every metric name in it is one the relay
#     exports on /metrics (or `up`, which Prometheus adds per target).
#
#   tests/deploy/check_alerts_fire.sh [SOURCE_DIR [BIN_DIR]]   # needs OUTBOXD_TEST_PG
set -euo pipefail

src=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
bin=${2:-$src/build/bin}
rules=$src/deploy/prometheus/outboxd-alerts.yml
dashboard=$src/deploy/grafana/outboxd.json
deadline_s=${OUTBOXD_ALERT_DEADLINE_S:-180}   # generous: the machine is shared

note() { echo "check_alerts_fire: $*"; }
die() { echo "FAIL: $*" >&2; exit 1; }
# shellcheck source=scripts/lib/servers.sh
source "$src/scripts/lib/servers.sh"  # wait_until

[[ -n ${OUTBOXD_TEST_PG:-} ]] || die "OUTBOXD_TEST_PG not set: run scripts/test (or scripts/pg-cluster start DIR)"
for tool in prometheus promtool psql curl jq node; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool not found: run scripts/deps"
done
for b in outboxd outboxd-mock-broker; do [[ -x $bin/$b ]] || die "$bin/$b not built"; done

work=$(mktemp -d /tmp/outboxd-alerts.XXXXXX)
db="outboxd_alerts_$$"
pids=()
cleanup() {
  local status=$?
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  psql "$OUTBOXD_TEST_PG" -qAt -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
  if [[ $status -ne 0 ]]; then
    for log in relay broker prometheus; do
      [[ -f $work/$log.log ]] && { echo "---- $log.log (last 30 lines)"; tail -30 "$work/$log.log"; } >&2
    done
  fi
  rm -rf "$work"
}
trap cleanup EXIT

# wait_for DESCRIPTION COMMAND...: wait_until COMMAND succeeds, or fails naming it.
wait_for() {
  local what=$1; shift
  wait_until "$deadline_s" "$@" || die "no $what within ${deadline_s}s"
}

# ---- 1. the rules, on a clock 30 times faster -----------------------------------------
# Each substitution must find what it expects, so a change to the real file that this
# scaling does not cover fails here instead of testing something else.
scale_rules() {
  perl -0pe '
    my %n;
    $n{for} = s/^(\s+for:\s*)(\d+)m\s*$/$1 . ($2 * 2) . "s"/gme;
    $n{range} = s/\[(\d+)m\]/"[" . ($1 * 2) . "s]"/ge;
    $n{age} = s/(outboxd_oldest_unacked_age_seconds\{[^}]*\}\)\s*>\s*)300\b/${1}10/g;
    $_ .= "\n# scaled: for=$n{for} range=$n{range} age=$n{age}\n";
  ' "$rules"
}
scale_rules >"$work/rules.yml"
counts=$(tail -1 "$work/rules.yml")
fors=$(grep -cE '^\s+for:' "$rules")
ranges=$(grep -oE '\[[0-9]+m\]' "$rules" | wc -l)
[[ $counts == "# scaled: for=$fors range=$ranges age=1" ]] ||
  die "scaling $rules: expected for=$fors range=$ranges age=1, got '$counts'"
if grep -nE '(^\s+for:\s*[0-9]+[mhd]\s*$)|\[[0-9]+[mhd]\]' "$work/rules.yml"; then
  die "scaled rules still hold minute/hour durations (above): extend scale_rules"
fi
promtool check rules "$work/rules.yml" >/dev/null || die "promtool rejects the scaled rules"
note "rules scaled 1/30: $counts"

# ---- the relay, its database and broker ---------------------------------------------
psql "$OUTBOXD_TEST_PG" -qAt -c "CREATE DATABASE $db" >/dev/null
pg="$OUTBOXD_TEST_PG dbname=$db"
sql() { psql "$pg" -qAt -v ON_ERROR_STOP=1 -c "$1"; }

"$bin/outboxd-mock-broker" --brokers 1 --topic pedido.confirmado --partitions 1 \
  --bootstrap-file "$work/bootstrap" --control "$work/broker.ctl" \
  </dev/null >"$work/broker.log" 2>&1 &
pids+=($!)
wait_for "broker bootstrap file" test -s "$work/bootstrap"
broker() {  # sends a control command and waits for its reply
  local before
  before=$(grep -c . "$work/broker.log")
  echo "$1" >"$work/broker.ctl"
  wait_for "broker reply to '$1'" bash -c "[[ \$(grep -c . '$work/broker.log') -gt $before ]]"
  tail -1 "$work/broker.log" | grep -qx ok || die "broker: '$1' answered $(tail -1 "$work/broker.log")"
}

"$bin/outboxd" setup --pg "$pg" >"$work/setup.log" 2>&1 || { cat "$work/setup.log" >&2; die "outboxd setup failed"; }
# --key-pointer: an event without /customer cannot be produced, so it is a dead letter.
"$bin/outboxd" run --pg "$pg" --brokers "$(cat "$work/bootstrap")" --metrics 127.0.0.1:0 \
  --key-pointer /customer --healthz-stall 2s --cleanup-interval 0s >"$work/relay.log" 2>&1 &
relay_pid=$!
pids+=($relay_pid)
# Either start: a backlog over --bulk-catch-up (WAL other tests wrote) is read through SQL.
wait_for "relay streaming" grep -qsE "streaming slot|catching up through SQL" "$work/relay.log"
relay_port=$(sed -nE 's#.*metrics on http://127\.0\.0\.1:([0-9]+)/.*#\1#p' "$work/relay.log" | head -1)
[[ -n $relay_port ]] || die "the relay logged no metrics address"
note "relay pid $relay_pid, metrics on 127.0.0.1:$relay_port"

# ---- Prometheus -----------------------------------------------------------------------
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
prometheus_ready() { curl -fsS "http://127.0.0.1:$prom_port/-/ready" >/dev/null 2>&1; }
# Ready, or exited (its port was taken meanwhile: the next attempt takes another).
prometheus_ready_or_gone() { ! kill -0 "$prom_pid" 2>/dev/null || prometheus_ready; }
start_prometheus() {
  cat >"$work/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - $work/rules.yml
scrape_configs:
  - job_name: outboxd
    static_configs:
      - targets: ["127.0.0.1:$relay_port"]
EOF
  local attempt
  for attempt in 1 2 3 4 5; do
    prom_port=$((20000 + RANDOM % 40000))
    port_free "$prom_port" || continue
    prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
      --web.listen-address="127.0.0.1:$prom_port" --log.level=warn >"$work/prometheus.log" 2>&1 &
    prom_pid=$!
    wait_until 60 prometheus_ready_or_gone || true
    if kill -0 "$prom_pid" 2>/dev/null && prometheus_ready; then pids+=("$prom_pid"); return 0; fi
    kill "$prom_pid" 2>/dev/null || true
    wait "$prom_pid" 2>/dev/null || true
  done
  die "prometheus did not start (log: $(tail -3 "$work/prometheus.log"))"
}
start_prometheus
note "prometheus on 127.0.0.1:$prom_port"
api() { curl -fsS --max-time 5 "http://127.0.0.1:$prom_port/api/v1/$1" "${@:2}"; }
# alert_state NAME: firing, pending, or inactive (not in /api/v1/alerts).
alert_state() {
  api alerts | jq -r --arg n "$1" '[.data.alerts[] | select(.labels.alertname == $n) | .state]
                                   | if index("firing") then "firing" elif length > 0 then "pending"
                                     else "inactive" end'
}
state_is() { [[ $(alert_state "$1") == "$2" ]]; }
seen_firing=" "
# Alerts firing now that are not expected: fails the test.
expect_only_firing() {
  local firing
  firing=$(api alerts | jq -r '.data.alerts[] | select(.state == "firing") | .labels.alertname' | sort -u)
  for a in $firing; do
    [[ " $* " == *" $a "* ]] || die "alert $a fires unexpectedly: $(api alerts | jq -c .data.alerts)"
  done
}
up_is_1() { [[ $(api query --data-urlencode 'query=up{job="outboxd"}' | jq -r '.data.result[0].value[1] // ""') == 1 ]]; }
wait_for "Prometheus scraping the relay" up_is_1

# ---- 2. broker down: stalled, then the oldest event too old; broker up: resolved ------
sql "INSERT INTO outbox (aggregate_id, tipo, payload) VALUES ('c1', 'pedido.confirmado', '{\"customer\":\"c1\"}')"
published() { [[ $(curl -fsS "http://127.0.0.1:$relay_port/metrics" | awk '/^outboxd_events_published_total/ { s += $2 } END { print s + 0 }') -ge $1 ]]; }
wait_for "the first event acknowledged" published 1
expect_only_firing

broker "down all"
t0=$SECONDS
sql "INSERT INTO outbox (aggregate_id, tipo, payload) SELECT 'c' || n, 'pedido.confirmado', jsonb_build_object('customer', 'c' || n) FROM generate_series(2, 21) n"
wait_for "OutboxdStalled firing" state_is OutboxdStalled firing
note "OutboxdStalled firing $((SECONDS - t0))s after the broker went down"
wait_for "OutboxdOldestUnacknowledgedEventTooOld firing" state_is OutboxdOldestUnacknowledgedEventTooOld firing
note "OutboxdOldestUnacknowledgedEventTooOld firing $((SECONDS - t0))s after the broker went down"
expect_only_firing OutboxdStalled OutboxdOldestUnacknowledgedEventTooOld

broker "up all"
t0=$SECONDS
wait_for "OutboxdStalled resolved" state_is OutboxdStalled inactive
wait_for "OutboxdOldestUnacknowledgedEventTooOld resolved" state_is OutboxdOldestUnacknowledgedEventTooOld inactive
note "both resolved $((SECONDS - t0))s after the broker came back"
published 21 || die "not every event acknowledged after the outage"
expect_only_firing

# ---- 3. a dead letter ------------------------------------------------------------------
t0=$SECONDS
sql "INSERT INTO outbox (aggregate_id, tipo, payload) VALUES ('poison', 'pedido.confirmado', '{\"no_customer\":true}')"
wait_for "OutboxdDeadLettersIncreasing firing" state_is OutboxdDeadLettersIncreasing firing
note "OutboxdDeadLettersIncreasing firing $((SECONDS - t0))s after the poison event"
[[ $(sql "SELECT count(*) FROM outbox_dead_letter") -eq 1 ]] || die "the poison event is not in outbox_dead_letter"
expect_only_firing OutboxdDeadLettersIncreasing
wait_for "OutboxdDeadLettersIncreasing resolved (its 30 s window passed)" state_is OutboxdDeadLettersIncreasing inactive
note "OutboxdDeadLettersIncreasing resolved $((SECONDS - t0))s after the poison event"
expect_only_firing

# A letter the table refuses: each session fails at it (issue 27 point 3); the relay
# counts one event in flight since its commit, so the stall and age alerts fire.
sql "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS \$\$ BEGIN RAISE EXCEPTION 'index row size 6424 exceeds btree version 4 maximum 2704' USING ERRCODE = '54000'; END \$\$; CREATE TRIGGER refuse BEFORE INSERT ON outbox_dead_letter FOR EACH ROW EXECUTE FUNCTION refuse()"
t0=$SECONDS
sql "INSERT INTO outbox (aggregate_id, tipo, payload) VALUES ('stuck', 'pedido.confirmado', '{\"no_customer\":true}')"
wait_for "OutboxdStalled firing (stuck)" state_is OutboxdStalled firing
wait_for "OutboxdOldestUnacknowledgedEventTooOld firing (stuck)" state_is OutboxdOldestUnacknowledgedEventTooOld firing
note "stuck on a letter the table refuses: stall and age alerts firing $((SECONDS - t0))s after the event"
# Between its sessions the relay is not streaming: that alert may fire too.
expect_only_firing OutboxdStalled OutboxdOldestUnacknowledgedEventTooOld OutboxdNotStreaming
sql "DROP TRIGGER refuse ON outbox_dead_letter"
t0=$SECONDS
wait_for "OutboxdStalled resolved (unstuck)" state_is OutboxdStalled inactive
wait_for "OutboxdOldestUnacknowledgedEventTooOld resolved (unstuck)" state_is OutboxdOldestUnacknowledgedEventTooOld inactive
note "both resolved $((SECONDS - t0))s after the trigger was dropped"
[[ $(sql "SELECT count(*) FROM outbox_dead_letter WHERE aggregate_id = 'stuck'") -eq 1 ]] ||
  die "the refused event is not in outbox_dead_letter once the trigger is gone"

# ---- 4. the dashboard's queries against this Prometheus and the relay's /metrics --------
if [[ -f $dashboard ]]; then
  "$src/scripts/npm-deps"
  curl -fsS "http://127.0.0.1:$relay_port/metrics" |
    awk '!/^#/ && NF { n = $1; sub(/\{.*/, "", n); print n }' | sort -u >"$work/exported"
  node "$src/tests/deploy/node/dashboard_queries.mjs" "$dashboard" >"$work/queries.jsonl"
  [[ -s $work/queries.jsonl ]] || die "$dashboard: no panel queries found"
  checked=0
  while IFS= read -r line; do
    panel=$(jq -r .panel <<<"$line")
    expr=$(jq -r .expr <<<"$line")
    answer=$(curl -sS --max-time 5 "http://127.0.0.1:$prom_port/api/v1/query" --data-urlencode "query=$expr")
    [[ $(jq -r .status <<<"$answer") == success ]] ||
      die "dashboard panel '$panel': Prometheus rejects its query: $(jq -r .error <<<"$answer"): $expr"
    for name in $(jq -r '.metrics[]' <<<"$line"); do
      [[ $name == up ]] && continue
      grep -qx -- "$name" "$work/exported" ||
        die "dashboard panel '$panel' queries $name, which the relay does not export (has: $(paste -sd' ' "$work/exported"))"
    done
    checked=$((checked + 1))
  done <"$work/queries.jsonl"
  note "dashboard: $checked queries parse on Prometheus and use only exported metric names"
else
  die "no $dashboard"
fi

kill -TERM "$relay_pid"
wait "$relay_pid" || die "outboxd run exited with $? on SIGTERM"
note "ok"
