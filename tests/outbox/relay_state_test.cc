// RelayStateStore's horizons on a real PostgreSQL: the one the slot proves
// (catalog_xmin widened to an xid8, with confirmed_flush_lsn) covers no transaction
// that started after the slot's position. (It may cover fewer than all those that
// ended before: a new slot starts from the oldest catalog_xmin of the cluster's other
// slots, and moves up as its client confirms.)
#include "outbox/relay_state.h"

#include <cstdint>
#include <string>

#include "gtest/gtest.h"
#include "support/pg_fixture.h"

namespace outboxd::outbox {
namespace {

uint64_t ToU64(const std::string& text) { return std::stoull(text); }

TEST(RelayState, TheSlotHorizonCoversNoTransactionStartedAfterTheSlot) {
  auto db = test::TestDatabase::Create();
  db->Exec("SELECT pg_create_logical_replication_slot('" + db->name() + "', 'pgoutput')");
  const uint64_t after = ToU64(db->Scalar("SELECT pg_current_xact_id()::text"));
  pg::Connection conn = db->Connect();
  RelayStateStore store("outbox");

  absl::StatusOr<std::optional<XidHorizon>> horizon = store.SlotHorizon(conn, db->name());
  ASSERT_TRUE(horizon.ok()) << horizon.status();
  ASSERT_TRUE(horizon->has_value());
  const uint64_t xid = ToU64((*horizon)->xid);
  EXPECT_GT(xid, 0u);
  EXPECT_LE(xid, after);
  EXPECT_EQ(pg::FormatLsn((*horizon)->lsn),
            db->Scalar("SELECT confirmed_flush_lsn::text FROM pg_replication_slots "
                       "WHERE slot_name = '" +
                       db->name() + "'"));

  absl::StatusOr<std::optional<XidHorizon>> none = store.SlotHorizon(conn, "no_such_slot");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->has_value());
}

// The relay's loop records its position every second: that commit must not wait for
// the WAL flush (a message arriving meanwhile would wait with it), and must leave the
// connection's own setting alone (dead letters are written on it, durably).
TEST(RelayState, RecordingThePositionDoesNotWaitForTheWalFlush) {
  auto db = test::TestDatabase::Create();
  pg::Connection conn = db->Connect();
  RelayStateStore store("outbox");
  db->Exec(store.CreateSql(conn));
  db->Exec(
      "CREATE TABLE commit_mode (setting text);"
      "CREATE FUNCTION note_commit_mode() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
      "INSERT INTO commit_mode VALUES (current_setting('synchronous_commit')); RETURN NEW; END $$;"
      "CREATE TRIGGER note AFTER INSERT OR UPDATE ON outbox_relay_state "
      "FOR EACH ROW EXECUTE FUNCTION note_commit_mode()");

  ASSERT_TRUE(store.RecordAcked(conn, "s", {.xid = "1000", .lsn = 0x1000}).ok());
  ASSERT_TRUE(store.RecordAcked(conn, "s", {.xid = "1001", .lsn = 0x2000}).ok());
  EXPECT_EQ(db->Scalar("SELECT string_agg(setting, ',') FROM commit_mode"), "off,off");
  EXPECT_EQ(db->Scalar("SELECT acked_lsn::text FROM outbox_relay_state"), "0/2000");
  absl::StatusOr<pg::Result> after = conn.Exec("SHOW synchronous_commit");
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(std::string(after->Get(0, 0)), "on");
}

}  // namespace
}  // namespace outboxd::outbox
