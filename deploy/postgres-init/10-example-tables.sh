#!/bin/sh
# Runs once, when the postgres:16 container initialises an empty data directory
# (/docker-entrypoint-initdb.d). Creates the example application's tables
# (examples/pedidos.sql, mounted read-only by docker-compose.yml). The outbox schema,
# publication and slot are created by the outboxd-setup service (`outboxd setup`).
set -eu
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
  -f /outboxd/examples/pedidos.sql
