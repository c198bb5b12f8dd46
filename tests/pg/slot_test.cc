// pg::QuerySlot on a real PostgreSQL: one row of pg_replication_slots, on a normal
// and on a replication connection; pg::CreateSlotWithSnapshot waiting for a running
// transaction longer than the connection's reply timeout.
#include "pg/slot.h"

#include <gtest/gtest.h>

#include <thread>

#include "absl/strings/numbers.h"
#include "ops/setup.h"
#include "support/pg_fixture.h"
#include "support/wait_until.h"

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

// A new slot is consistent only once every transaction running at its creation has
// ended, however long that is on a healthy server: --pg-receive-timeout (the
// connection's reply timeout) must not give the creation up as a dead path.
TEST(CreateSlotWithSnapshot, WaitsForARunningTransactionLongerThanTheReplyTimeout) {
  auto db = test::TestDatabase::Create();
  Connection holder = db->Connect();
  ASSERT_TRUE(holder.Exec("BEGIN; SELECT txid_current()").ok());
  Connection repl = db->Connect(ConnectionKind::kReplication);
  repl.set_reply_timeout(absl::Seconds(1));
  absl::StatusOr<CreatedSlot> created = absl::UnknownError("not run");
  std::thread create([&] { created = CreateSlotWithSnapshot(repl, db->name() + "_new"); });
  // The walsender waits for the open transaction; let it wait past the reply timeout.
  Connection watch = db->Connect();
  EXPECT_TRUE(test::WaitUntil(absl::Seconds(30), [&] {
    auto r = watch.Exec(
        "SELECT coalesce(extract(epoch FROM now() - max(state_change)), 0) FROM "
        "pg_stat_activity WHERE backend_type = 'walsender' AND wait_event_type = 'Lock'");
    double waited = 0;
    return r.ok() && absl::SimpleAtod(std::string(r->Get(0, 0)), &waited) && waited > 2;
  }));
  ASSERT_TRUE(holder.Exec("COMMIT").ok());
  create.join();
  EXPECT_TRUE(created.ok()) << created.status();
  EXPECT_EQ(repl.reply_timeout(), absl::Seconds(1)) << "restored after the statement";
}

}  // namespace
}  // namespace outboxd::pg
