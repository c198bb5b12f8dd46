// pg::QuerySlot on a real PostgreSQL: one row of pg_replication_slots, on a normal
// and on a replication connection.
#include "pg/slot.h"

#include <gtest/gtest.h>

#include "ops/setup.h"
#include "support/pg_fixture.h"

namespace outboxd::pg {
namespace {

TEST(QuerySlot, ReportsAMissingSlotAndTheLagOfAnExistingOne) {
  auto db = test::TestDatabase::Create();
  Connection conn = db->Connect();
  absl::StatusOr<SlotInfo> missing = QuerySlot(conn, db->name());
  ASSERT_TRUE(missing.ok()) << missing.status();
  EXPECT_FALSE(missing->exists);

  ASSERT_TRUE(ops::Setup(conn, {.slot = db->name()}).ok());
  db->Exec("INSERT INTO outbox (aggregate_id, tipo, payload) VALUES ('a', 't', '{}')");
  absl::StatusOr<SlotInfo> slot = QuerySlot(conn, db->name());
  ASSERT_TRUE(slot.ok()) << slot.status();
  EXPECT_GT(slot->lag_bytes, 0);
  EXPECT_EQ(slot->wal_status, "reserved");
  EXPECT_LE(slot->restart_lsn, slot->confirmed_flush_lsn);

  // Works on a replication connection too (no extended protocol there).
  Connection repl = db->Connect(ConnectionKind::kReplication);
  absl::StatusOr<SlotInfo> via_repl = QuerySlot(repl, db->name());
  ASSERT_TRUE(via_repl.ok()) << via_repl.status();
  EXPECT_TRUE(via_repl->exists);
}

}  // namespace
}  // namespace outboxd::pg
