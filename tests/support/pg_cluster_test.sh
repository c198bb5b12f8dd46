#!/usr/bin/env bash
# scripts/pg-cluster says which PostgreSQL it starts and refuses one older than the
# documented minimum (15, docs/architecture.md "Tests"): a bin directory whose postgres
# claims 14 is refused (exit 2, naming the version) before anything is created; the
# real server's version is printed, recorded in DIR/env, and is the one the running
# server reports.
#   tests/support/pg_cluster_test.sh SOURCE_DIR
set -euo pipefail

src=${1:?usage: pg_cluster_test.sh SOURCE_DIR}
script=$src/scripts/pg-cluster
work=$(mktemp -d /tmp/outboxd-pg-cluster-test.XXXXXX)
real=$(mktemp -d /tmp/outboxd-pgtest-XXXXXX)  # pg-cluster hands it to the postgres user
trap '"$script" stop "$real" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
fail() {
  echo "pg_cluster_test: $*" >&2
  exit 1
}

# An old server: its tools only say their version or leave a trace that they ran.
mkdir -p "$work/old/bin"
printf '#!/bin/sh\necho "postgres (PostgreSQL) 14.11 (Debian 14.11-1.pgdg120+1)"\n' \
  >"$work/old/bin/postgres"
for tool in initdb pg_ctl; do
  printf '#!/bin/sh\ntouch "%s/ran"\n' "$work" >"$work/old/bin/$tool"
done
chmod +x "$work/old/bin/"*
rc=0
out=$(OUTBOXD_PG_BINDIR=$work/old/bin "$script" start "$work/old-cluster" 2>&1) || rc=$?
[[ $rc -eq 2 ]] || fail "PostgreSQL 14 not refused (exit $rc): $out"
[[ $out == *"PostgreSQL 14.11, older than 15"* ]] || fail "the refusal does not name the version: $out"
[[ ! -e $work/ran && ! -e $work/old-cluster ]] || fail "PostgreSQL 14 refused only after initdb ran"

# The real one: says which, and records it.
conninfo=$("$script" start "$real" 2>"$work/stderr") || fail "start failed: $(cat "$work/stderr")"
. "$real/env"
[[ -n ${OUTBOXD_TEST_PG_VERSION:-} ]] || fail "no OUTBOXD_TEST_PG_VERSION in $real/env"
((${OUTBOXD_TEST_PG_VERSION%%.*} >= 15)) || fail "started PostgreSQL $OUTBOXD_TEST_PG_VERSION"
grep -q "^pg-cluster: PostgreSQL $OUTBOXD_TEST_PG_VERSION " "$work/stderr" ||
  fail "start did not say which PostgreSQL: $(cat "$work/stderr")"
server=$(psql -X -A -t "$conninfo" -c "SHOW server_version")
[[ ${server%% *} == "$OUTBOXD_TEST_PG_VERSION" ]] ||
  fail "recorded $OUTBOXD_TEST_PG_VERSION but the server says $server"
echo "pg_cluster_test: PostgreSQL 14 refused; started and recorded PostgreSQL $OUTBOXD_TEST_PG_VERSION"
