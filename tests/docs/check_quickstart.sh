#!/usr/bin/env bash
# README's "your own relay" block, run as written in one bash: a throwaway PostgreSQL,
# the local broker, setup, run in the background, kcat watching, one INSERT. The event
# must show in kcat's output as the README says it does. Only what a reader would
# change is changed: its /tmp/outboxd-try paths become this run's own directory (tests
# run in parallel) and build/bin the build directory's; kcat's output is unbuffered so
# that a file can be read while it runs.
#
#   tests/docs/check_quickstart.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1 build=$2
work=$(mktemp -d /tmp/outboxd-check-quickstart.XXXXXX)
cleanup() {
  # The block's background jobs (broker, run, kcat) are this shell's own jobs.
  local pids
  pids=$(jobs -p)
  [[ -z $pids ]] || kill $pids 2>/dev/null || true
  wait 2>/dev/null || true
  "$src/scripts/pg-cluster" stop "$work/try" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
chmod 755 "$work"
out=$work/out

cd "$src"
block=$(awk '/^```sh$/ { getline; if ($0 ~ /^# your own relay/) { on = 1 } }
             on && /^```$/ { exit } on { print }' README.md)
[[ -n $block ]] || { echo "check_quickstart: README.md has no \`\`\`sh block starting '# your own relay'" >&2; exit 1; }
block=${block//\/tmp\/outboxd-try/$work/try}
block=${block//build\/bin\//$build/bin/}
grep -q 'kcat' <<<"$block" || { echo "check_quickstart: the block watches no events with kcat" >&2; exit 1; }

mkdir "$work/bin"
printf '#!/bin/sh\nexec %s -u "$@"\n' "$(command -v kcat)" >"$work/bin/kcat"
chmod +x "$work/bin/kcat"
PATH=$work/bin:$PATH
if ! eval "$block" >"$out" 2>&1; then
  cat "$out"
  echo "check_quickstart: the block failed" >&2
  exit 1
fi
# shellcheck source=scripts/lib/servers.sh
source "$src/scripts/lib/servers.sh"  # wait_until
if wait_until 30 grep -q 'key pedido-1: {"total": 42}' "$out"; then
  echo "ok: the event arrived as README says"
  exit 0
fi
cat "$out"
echo "check_quickstart: kcat did not print 'key pedido-1: {\"total\": 42}' within 30 s" >&2
exit 1
