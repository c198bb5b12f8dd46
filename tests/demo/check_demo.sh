#!/usr/bin/env bash
# scripts/demo as a newcomer runs it, on one sink: what it prints must show every order
# go writer -> relay -> broker -> consumer -> invoice, and end on a settled status
# (issue 28 point 1: its tails started before the files they follow existed and gave
# up at once, so no billing or consumer line showed, while the self-checks passed).
#
#   tests/demo/check_demo.sh SOURCE_DIR BUILD_DIR kafka|rabbitmq|nats
set -euo pipefail
src=$1 build=$2 sink=$3
orders=3
out=$(mktemp /tmp/outboxd-check-demo.XXXXXX)
trap 'rm -f "$out"' EXIT

cd "$src"
if ! OUTBOXD_BUILD_DIR=$build scripts/demo --sink "$sink" --orders "$orders" >"$out" 2>&1; then
  cat "$out"
  echo "check_demo: scripts/demo --sink $sink failed" >&2
  exit 1
fi

missing=0
topic=pedido.confirmado
[[ $sink == nats ]] && topic=outbox.pedido.confirmado  # scripts/demo-nats: --topic 'outbox.{type}'
need() {  # what pattern
  if ! grep -Eq -- "$2" "$out"; then
    echo "check_demo: no $1 in the demo's output (/$2/)" >&2
    missing=1
  fi
}
for n in $(seq 1 "$orders"); do
  need "writer line for pedido-$n" "^ +app \| pedido-$n -> event "
  need "relay line for pedido-$n" "^ +relay \| .*sent event [0-9a-f-]+ key=pedido-$n to $topic"
  case $sink in
    kafka) need "broker line for pedido-$n" "^ +kafka \| pedido\.confirmado\[[0-9]+\]@[0-9]+ key=pedido-$n " ;;
    rabbitmq) need "broker line for pedido-$n" "^ +amqp +\| pedido\.confirmado message_id=.*aggregate_id=pedido-$n;" ;;
    nats) need "broker line for pedido-$n" "^ +nats +\| outbox\.pedido\.confirmado seq=$n Nats-Msg-Id=[0-9a-f-]+ headers=aggregate_id=pedido-$n;" ;;
  esac
  need "invoice line for pedido-$n" "^billing \| processed pedido-$n message .* -> fatura [0-9]+"
done
need "broker acknowledgement in the relay's log" "^ +relay \| .*broker acknowledged"
if [[ $sink == nats ]]; then
  need "repeat answered duplicate" "^ +nats +\| PubAck: stream OUTBOXD seq 1 duplicate=true"
  if grep -Eq "^ +nats +\| (duplicate |outbox\.pedido\.confirmado seq=$((orders + 1)) )" "$out"; then
    echo "check_demo: the stream stored the event published again" >&2
    missing=1
  fi
else
  need "skipped redelivery" "^billing \| duplicate pedido-1 message"
fi
need "settled status" "^ *status \| unacked +0$"
if grep -Eq "^ *status \| unacked +[1-9]" "$out"; then
  echo "check_demo: the last status still shows unacknowledged events" >&2
  missing=1
fi
if ((missing)); then
  cat "$out"
  exit 1
fi
echo "check_demo: every order visibly went writer -> relay -> $sink -> billing -> invoice"
