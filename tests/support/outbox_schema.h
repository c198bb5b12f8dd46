// The default outbox table (src/ops/internal/outbox_table.cc) written by hand, for
// tests that create it without `outboxd setup`: plain (the polling relay's databases)
// or range-partitioned by day on criado_em the way a user would (the key in the
// primary key). Partitions and publications are the test's own.
//
//   db.Exec(std::string(kPartitionedOutboxTable) +
//           "CREATE TABLE outbox_d PARTITION OF outbox DEFAULT;");
#ifndef OUTBOXD_TESTS_SUPPORT_OUTBOX_SCHEMA_H_
#define OUTBOXD_TESTS_SUPPORT_OUTBOX_SCHEMA_H_

// The columns after seq and id, one line each (no trailing comma).
#define OUTBOXD_TEST_OUTBOX_COLUMNS                   \
  "  aggregate_id text NOT NULL,\n"                   \
  "  tipo text NOT NULL,\n"                           \
  "  payload jsonb NOT NULL,\n"                       \
  "  criado_em timestamptz NOT NULL DEFAULT now(),\n" \
  "  publicado_em timestamptz,\n"                     \
  "  tentativas int NOT NULL DEFAULT 0,\n"            \
  "  ultimo_erro text,\n"                             \
  "  proxima_tentativa_em timestamptz NOT NULL DEFAULT now()"

namespace outboxd::test {

// The table and its index of pending rows, as `outboxd setup` makes them.
inline constexpr char kOutboxSchema[] =
    "CREATE TABLE outbox (\n"
    "  seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,\n"
    "  id uuid NOT NULL DEFAULT gen_random_uuid() UNIQUE,\n" OUTBOXD_TEST_OUTBOX_COLUMNS
    "\n);\n"
    "CREATE INDEX outbox_pendentes ON outbox (seq) WHERE publicado_em IS NULL;\n";

// The same columns partitioned by day: no partition yet.
inline constexpr char kPartitionedOutboxTable[] =
    "CREATE TABLE outbox (\n"
    "  seq bigint GENERATED ALWAYS AS IDENTITY,\n"
    "  id uuid NOT NULL DEFAULT gen_random_uuid(),\n" OUTBOXD_TEST_OUTBOX_COLUMNS
    ",\n"
    "  PRIMARY KEY (seq, criado_em)\n"
    ") PARTITION BY RANGE (criado_em);\n";

}  // namespace outboxd::test

#undef OUTBOXD_TEST_OUTBOX_COLUMNS

#endif  // OUTBOXD_TESTS_SUPPORT_OUTBOX_SCHEMA_H_
