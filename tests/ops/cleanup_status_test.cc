// Cleanup and status in polling mode, and the inbox retention, on a set-up database:
// the rows' ages are written directly, the acknowledgement is publicado_em.
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ops/cleanup.h"
#include "ops/setup.h"
#include "ops/status.h"
#include "outbox/dead_letter.h"
#include "support/pg_fixture.h"

namespace outboxd::ops {
namespace {

class CleanupStatusTest : public testing::Test {
 protected:
  void SetUp() override {
    db_ = test::TestDatabase::Create();
    conn_.emplace(db_->Connect());
    ASSERT_TRUE(ops::Setup(*conn_, {.slot = db_->name()}).ok());
  }
  // `n` rows of `label`, created `created_ago` and published `published_ago` (or
  // never, "NULL") before now.
  void Rows(int n, const std::string& label, const std::string& created_ago,
            const std::string& published_ago, int attempts = 0) {
    std::string published =
        published_ago == "NULL" ? "NULL" : absl::StrCat("now() - interval '", published_ago, "'");
    db_->Exec(absl::StrCat(
        "INSERT INTO outbox (aggregate_id, tipo, payload, criado_em, publicado_em, tentativas) "
        "SELECT 'a' || i, 't', jsonb_build_object('label', '", label, "'), now() - interval '",
        created_ago, "', ", published, ", ", attempts, " FROM generate_series(1, ", n, ") i"));
  }
  int Count(const std::string& label) {
    return std::stoi(db_->Scalar(
        absl::StrCat("SELECT count(*) FROM outbox WHERE payload->>'label' = '", label, "'")));
  }

  std::unique_ptr<test::TestDatabase> db_;
  std::optional<pg::Connection> conn_;
};

TEST_F(CleanupStatusTest, DeletesOnlyOldPublishedRowsInBatchesAndOldInboxRows) {
  // No slot for this test: it is about polling mode's marks.
  db_->Exec(absl::StrCat("SELECT pg_drop_replication_slot('", db_->name(), "')"));
  Rows(23, "old_published", "9 days", "8 days");
  Rows(4, "old_pending", "9 days", "NULL");
  Rows(5, "recent_published", "1 hour", "1 hour");
  db_->Exec("INSERT INTO inbox (message_id, processado_em) SELECT gen_random_uuid(), "
            "now() - interval '40 days' FROM generate_series(1, 6)");
  db_->Exec("INSERT INTO inbox (message_id) SELECT gen_random_uuid() FROM generate_series(1, 2)");

  absl::StatusOr<CleanupResult> done = Cleanup(*conn_, {.batch = 5});
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->outbox_deleted, 23);
  EXPECT_EQ(done->inbox_deleted, 6);
  EXPECT_EQ(Count("old_published"), 0);
  EXPECT_EQ(Count("old_pending"), 4);  // never deleted, whatever its age
  EXPECT_EQ(Count("recent_published"), 5);
  EXPECT_EQ(db_->Scalar("SELECT count(*) FROM inbox"), "2");

  done = Cleanup(*conn_, {.retention = absl::ZeroDuration()});
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->outbox_deleted, 5);
  EXPECT_EQ(Count("old_pending"), 4);
}

TEST_F(CleanupStatusTest, PollingStatusIsTheSeedDashboard) {
  // A polling deployment: no slot, no publication (else status asks for the slot).
  db_->Exec(absl::StrCat("SELECT pg_drop_replication_slot('", db_->name(), "')"));
  db_->Exec("DROP PUBLICATION outboxd");
  Rows(3, "done", "2 hours", "1 hour");
  Rows(2, "pending", "10 minutes", "NULL");
  Rows(1, "failing", "5 minutes", "NULL", /*attempts=*/5);

  absl::StatusOr<OutboxStatus> s = QueryStatus(*conn_, {.slot = db_->name()});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->mode, "poll");
  EXPECT_EQ(s->pending, 3);
  EXPECT_NEAR(s->oldest_pending_age_s, 600, 30);
  EXPECT_EQ(s->repeated_failures, 1);
  EXPECT_DOUBLE_EQ(s->oldest_age_s(), s->oldest_pending_age_s);
  std::string json = FormatStatusJson(*s);
  EXPECT_THAT(json, testing::StartsWith("{\"mode\":\"poll\",\"pending\":3,\"oldest_pending_age_s\":"));
  EXPECT_THAT(json, testing::HasSubstr(",\"repeated_failures\":1,\"dead_letter\":0,\"server\":\""));
  // The server status read, and that it is the primary (issue 16).
  EXPECT_THAT(json, testing::EndsWith(",\"server_is_primary\":true}\n"));
  EXPECT_THAT(FormatStatusTable(*s), testing::EndsWith(" (primary)\n"));
  EXPECT_THAT(FormatStatusTable(*s), testing::HasSubstr("\nrepeated_failures     1\n"));
}

TEST_F(CleanupStatusTest, CdcRowsWithoutARecordedPositionAreKeptAndCountedUnacknowledged) {
  Rows(4, "cdc", "9 days", "NULL");
  absl::StatusOr<CleanupResult> done = Cleanup(*conn_, {.retention = absl::ZeroDuration()});
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->outbox_deleted, 0);
  absl::StatusOr<OutboxStatus> s = QueryStatus(*conn_, {.slot = db_->name()});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->mode, "cdc");
  EXPECT_EQ(s->unacked, 4);
  EXPECT_GT(s->oldest_unacked_age_s, 9 * 86400 - 60);
  EXPECT_FALSE(s->slot_active);
  EXPECT_EQ(s->wal_status, "reserved");
}

// Issue 27 point 4: dead letters belong to the relay that filed them. Status for one
// slot counts its own and those from before the `slot` column, never another slot's
// (the RabbitMQ relay's letters once showed on the Kafka relay's dashboard).
TEST_F(CleanupStatusTest, StatusCountsOnlyItsSlotsDeadLetters) {
  const auto file = [this](const std::optional<std::string>& slot, const std::string& id) {
    const outbox::DeadLetter letter{.id = id,
                                    .aggregate_id = "pedido-" + id,
                                    .type = "t",
                                    .payload = "42",
                                    .lsn = "0/1",
                                    .error = "poison"};
    ASSERT_TRUE(outbox::DeadLetterStore("outbox", slot).Insert(*conn_, letter).ok());
  };
  file(db_->name(), "mine-1");
  file(db_->name(), "mine-2");
  for (const char* id : {"other-1", "other-2", "other-3"}) file("outboxd_rabbitmq", id);
  file(std::nullopt, "from-before-slots");  // slot NULL

  absl::StatusOr<OutboxStatus> s = QueryStatus(*conn_, {.slot = db_->name()});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->dead_letter, 3) << "its two letters and the one from before slots";
  EXPECT_THAT(FormatStatusJson(*s), testing::HasSubstr(",\"dead_letter\":3,"));
  ASSERT_EQ(db_->Scalar("SELECT count(*) FROM outbox_dead_letter"), "6");
}

// Issue 13, point 10: a slot that does not exist used to read as polling mode.
TEST_F(CleanupStatusTest, AMissingSlotIsAnErrorUnlessTheDatabaseNeverHadACdcRelay) {
  db_->Exec(absl::StrCat("SELECT pg_drop_replication_slot('", db_->name(), "')"));
  const std::string missing = absl::StrCat("replication slot ", db_->name(),
                                           " does not exist (status reads database ", db_->name());
  absl::StatusOr<OutboxStatus> s = QueryStatus(*conn_, {.slot = db_->name()});
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition) << s.status();
  EXPECT_THAT(std::string(s.status().message()),
              testing::HasSubstr(missing + ", where publication outboxd publishes it): pass "
                                           "--slot with this database's slot"));

  db_->Exec("DROP PUBLICATION outboxd");
  db_->Exec("INSERT INTO outbox_relay_state (slot_name) VALUES ('gone')");
  s = QueryStatus(*conn_, {.slot = db_->name()});
  EXPECT_THAT(std::string(s.status().message()),
              testing::HasSubstr(missing + ", where outbox_relay_state records slot gone)"));

  // No sign of a CDC relay ever: a polling deployment.
  db_->Exec("DELETE FROM outbox_relay_state");
  s = QueryStatus(*conn_, {.slot = db_->name()});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->mode, "poll");
  // Unless the user named the slot, or asked for CDC.
  s = QueryStatus(*conn_, {.slot = db_->name(), .slot_given = true});
  EXPECT_THAT(std::string(s.status().message()), testing::HasSubstr(missing + "): pass --slot"));
  s = QueryStatus(*conn_, {.slot = db_->name(), .mode = StatusMode::kCdc});
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition) << s.status();
  s = QueryStatus(*conn_, {.slot = db_->name(), .slot_given = true, .mode = StatusMode::kPoll});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->mode, "poll");
}

// Issue 13, point 10, and issue 20, point 7: status in a database without its slot
// reported another database's slot as its own.
TEST_F(CleanupStatusTest, AnotherDatabasesSlotIsAnErrorNamingBothDatabases) {
  auto other = test::TestDatabase::Create();
  {
    pg::Connection other_conn = other->Connect();
    ASSERT_TRUE(ops::Setup(other_conn, {.slot = other->name()}).ok());
  }
  db_->Exec(absl::StrCat("SELECT pg_drop_replication_slot('", db_->name(), "')"));
  absl::StatusOr<OutboxStatus> s = QueryStatus(*conn_, {.slot = other->name()});
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition) << s.status();
  EXPECT_THAT(
      std::string(s.status().message()),
      testing::HasSubstr(absl::StrCat("replication slot ", other->name(), " belongs to database ",
                                      other->name(), " (status reads database ", db_->name(),
                                      ", where publication outboxd publishes it)")));
  // A polling database beside a CDC one: the unnamed default slot is not its business.
  db_->Exec("DROP PUBLICATION outboxd");
  s = QueryStatus(*conn_, {.slot = other->name()});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->mode, "poll");
}

TEST_F(CleanupStatusTest, MissingTableNamesTheFix) {
  absl::StatusOr<OutboxStatus> s = QueryStatus(*conn_, {.table = "nope"});
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.status().message()), testing::HasSubstr("run outboxd setup"));
}

}  // namespace
}  // namespace outboxd::ops
