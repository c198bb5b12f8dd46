#!/usr/bin/env bash
# Checks deploy/grafana/ offline (tests/deploy/node/check_dashboard.mjs says what);
# tests/deploy/check_alerts_fire.sh runs the dashboard's queries on a real Prometheus.
#
#   tests/deploy/check_grafana.sh [SOURCE_DIR]
set -euo pipefail
src=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
command -v node >/dev/null 2>&1 || { echo "FAIL: node not found: run scripts/deps" >&2; exit 1; }
"$src/scripts/npm-deps"
exec node "$src/tests/deploy/node/check_dashboard.mjs" "$src"
