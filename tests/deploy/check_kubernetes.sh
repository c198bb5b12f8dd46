#!/usr/bin/env bash
# Checks deploy/kubernetes/ offline (no cluster, no kubectl): installs the npm packages
# (scripts/npm-deps), checks the PrometheusRule is what scripts/gen-prometheusrule makes
# of deploy/prometheus/outboxd-alerts.yml, then renders each overlay and monitoring/
# and validates them (tests/deploy/node/check_kubernetes.mjs says how).
#
#   tests/deploy/check_kubernetes.sh [SOURCE_DIR [BIN_DIR]]   # defaults: repo, build/bin
set -euo pipefail

src=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
bin=${2:-$src/build/bin}
[[ -x $bin/outboxd ]] || { echo "FAIL: $bin/outboxd not built" >&2; exit 1; }
command -v node >/dev/null 2>&1 || { echo "FAIL: node not found: run scripts/deps" >&2; exit 1; }
"$src/scripts/npm-deps"
"$src/scripts/gen-prometheusrule" --check
exec node "$src/tests/deploy/node/check_kubernetes.mjs" "$src" "$bin"
