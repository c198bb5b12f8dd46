// DeadLetterStore on a real PostgreSQL: a poison event is stored whatever its fields
// hold (issue 27 point 3: bytes that are not UTF-8 made the INSERT fail, a 6.4 kB
// aggregate id the index insert), read back with its original bytes, two events that
// share an id are both kept (point 7), letters belong to the slot that filed them
// (point 4), and a table an older setup made keeps working until setup migrates it.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "ops/setup.h"
#include "outbox/dead_letter.h"
#include "outbox/stored_letter.h"
#include "support/pg_fixture.h"

namespace outboxd::outbox {
namespace {

DeadLetter Letter(std::string id, std::string aggregate, std::string payload = R"({"n":1})") {
  return {.id = std::move(id),
          .aggregate_id = std::move(aggregate),
          .type = "pedido.confirmado",
          .payload = std::move(payload),
          .created_at = "2026-12-03T15:40:00+00:00",
          .lsn = "0/16B3748",
          .topic = "pedido.confirmado",
          .error = "payload is a JSON scalar"};
}

// 6,400 bytes of hex that pglz cannot squeeze under a btree entry's 2,704 bytes.
std::string HugeKey(test::TestDatabase& db) {
  return db.Scalar("SELECT string_agg(md5(i::text), '') FROM generate_series(1, 200) i");
}

// The columns every older setup made after seq and id.
constexpr char kOlderColumns[] = R"sql(
  aggregate_id text        NOT NULL,
  type         text        NOT NULL,
  payload      text        NOT NULL,
  created_at   text        NOT NULL,
  lsn          text        NOT NULL,
  topic        text        NOT NULL,
  error        text        NOT NULL,
  dead_at      timestamptz NOT NULL DEFAULT now())sql";
constexpr char kAggregateIndex[] =
    "CREATE INDEX outbox_dead_letter_aggregate ON outbox_dead_letter (aggregate_id, seq);";

// The table as outboxd setup made it before issue 27.
const std::string kOldTable = absl::StrCat(
    "CREATE TABLE outbox_dead_letter (seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, "
    "id text NOT NULL UNIQUE,",
    kOlderColumns, "); ", kAggregateIndex);

// The table as setup made it before slots were recorded (issue 27 point 4).
const std::string kTableWithoutSlot = absl::StrCat(
    "CREATE TABLE outbox_dead_letter (seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, "
    "id text NOT NULL,",
    kOlderColumns, ", original bytea); ", kAggregateIndex,
    " CREATE UNIQUE INDEX outbox_dead_letter_event ON outbox_dead_letter (id, aggregate_id)");

std::vector<std::string> Ids(const absl::StatusOr<std::vector<DeadLetter>>& letters) {
  std::vector<std::string> ids;
  if (!letters.ok()) return {letters.status().ToString()};
  for (const DeadLetter& l : *letters) ids.push_back(l.id + "@" + l.slot.value_or("-"));
  return ids;
}

TEST(DeadLetterStore, StoresWhateverAnEventHoldsAndListsItsOriginalBytes) {
  auto db = test::TestDatabase::Create();
  pg::Connection conn = db->Connect();
  DeadLetterStore store("outbox");
  db->Exec(store.CreateSql(conn));
  const std::string huge = HugeKey(*db);
  ASSERT_EQ(huge.size(), 6400u);
  const DeadLetter letters[] = {
      Letter("e1", "pedido-\xff\xfe"),
      Letter("e2", "nul", std::string("{\"a\":\"\0\"}", 9)),
      Letter("e3", huge),
      Letter("e\xc0\xaf", "plain"),
  };
  for (const DeadLetter& l : letters) {
    absl::Status stored = store.Insert(conn, l);
    ASSERT_TRUE(stored.ok()) << stored;
  }
  absl::StatusOr<std::vector<DeadLetter>> listed = store.List(conn, std::nullopt);
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ((*listed)[i].id, letters[i].id);
    EXPECT_EQ((*listed)[i].aggregate_id, letters[i].aggregate_id);
    EXPECT_EQ((*listed)[i].payload, letters[i].payload);
    EXPECT_FALSE((*listed)[i].original_lost);
  }
  // One aggregate's, by its own bytes; the gate's view, by stored key.
  absl::StatusOr<std::vector<DeadLetter>> one = store.List(conn, huge);
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ((*one)[0].id, "e3");
  auto aggregates = store.Aggregates(conn);
  ASSERT_TRUE(aggregates.ok()) << aggregates.status();
  EXPECT_TRUE(aggregates->contains(StoredKey(huge)));
  EXPECT_TRUE(aggregates->contains(StoredKey("pedido-\xff\xfe")));
  EXPECT_EQ(aggregates->at("plain").id, StoredKey("e\xc0\xaf"));
}

TEST(DeadLetterStore, TwoEventsWithOneIdButTwoAggregatesAreBothStoredOnce) {
  auto db = test::TestDatabase::Create();
  pg::Connection conn = db->Connect();
  DeadLetterStore store("outbox");
  db->Exec(store.CreateSql(conn));
  for (const DeadLetter& l : {Letter("same", "a"), Letter("same", "b"), Letter("same", "a")}) {
    absl::Status stored = store.Insert(conn, l);
    ASSERT_TRUE(stored.ok()) << stored;
  }
  EXPECT_EQ(db->Scalar("SELECT string_agg(aggregate_id, ',' ORDER BY seq) FROM "
                       "outbox_dead_letter"),
            "a,b");
}

TEST(DeadLetterStore, AnOlderSetupsTableKeepsWorkingUntilSetupMigratesIt) {
  auto db = test::TestDatabase::Create();
  pg::Connection conn = db->Connect();
  db->Exec(kOldTable);
  DeadLetterStore store("outbox");
  // Still stored, as a stand-in: the bytes are lost, and a replay knows it.
  ASSERT_TRUE(store.Insert(conn, Letter("e1", "a\xff")).ok());
  ASSERT_TRUE(store.Insert(conn, Letter("e2", HugeKey(*db))).ok());
  // The id is unique across aggregates there: stop, never drop the second silently.
  ASSERT_TRUE(store.Insert(conn, Letter("same", "a")).ok());
  absl::Status refused = store.Insert(conn, Letter("same", "b"));
  // Retried, not the end of the relay: `outboxd setup` fixes it meanwhile.
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable) << refused;
  EXPECT_NE(refused.message().find("run outboxd setup"), std::string::npos) << refused;
  auto listed = store.List(conn, std::nullopt);
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->size(), 3u);
  EXPECT_TRUE((*listed)[0].original_lost);
  EXPECT_FALSE((*listed)[2].original_lost);

  ops::SetupOptions options{.slot = db->name()};
  ops::SetupReport report;
  absl::Status setup = ops::Setup(conn, options, &report);
  ASSERT_TRUE(setup.ok()) << setup;
  std::string created;
  for (const std::string& what : report.created) created += what + "\n";
  EXPECT_NE(created.find("table outbox_dead_letter migrated"), std::string::npos) << created;
  store.ForgetShape();
  ASSERT_TRUE(store.Insert(conn, Letter("same", "b")).ok());
  ASSERT_TRUE(store.Insert(conn, Letter("e4", "c\xff")).ok());
  listed = store.List(conn, std::nullopt);
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->size(), 5u);
  EXPECT_EQ((*listed)[3].aggregate_id, "b");
  EXPECT_EQ((*listed)[4].aggregate_id, "c\xff");
  EXPECT_FALSE((*listed)[4].original_lost);
  // A second setup changes nothing.
  report = {};
  ASSERT_TRUE(ops::Setup(conn, options, &report).ok());
  EXPECT_TRUE(report.created.empty());
}

// Issue 27 point 4: two relays on one outbox (slots kafka and rmq) each read only the
// letters they filed; one from before the slot column counts for both until replayed.
TEST(DeadLetterStore, EachSlotReadsTheLettersItFiledAndThoseFromBeforeSlots) {
  auto db = test::TestDatabase::Create();
  pg::Connection conn = db->Connect();
  db->Exec(kTableWithoutSlot);
  ASSERT_TRUE(DeadLetterStore("outbox").Insert(conn, Letter("e0", "C")).ok());  // slot NULL
  ops::SetupOptions options{.slot = db->name()};
  ops::SetupReport report;
  ASSERT_TRUE(ops::Setup(conn, options, &report).ok());
  const DeadLetterStore kafka("outbox", "kafka");
  const DeadLetterStore rmq("outbox", "rmq");
  // The same event refused by both relays is each one's letter, stored once per slot.
  for (const auto* store : {&kafka, &rmq, &kafka}) {
    absl::Status stored = store->Insert(conn, Letter("e1", "A"));
    ASSERT_TRUE(stored.ok()) << stored;
  }
  ASSERT_TRUE(rmq.Insert(conn, Letter("e2", "B")).ok());
  // The same event as the letter from before slots: stored already, for every slot.
  ASSERT_TRUE(kafka.Insert(conn, Letter("e0", "C")).ok());
  EXPECT_EQ(db->Scalar("SELECT count(*) FROM outbox_dead_letter"), "4");

  EXPECT_EQ(Ids(kafka.List(conn, std::nullopt)), (std::vector<std::string>{"e0@-", "e1@kafka"}));
  EXPECT_EQ(Ids(rmq.List(conn, std::nullopt)),
            (std::vector<std::string>{"e0@-", "e1@rmq", "e2@rmq"}));
  EXPECT_EQ(Ids(rmq.List(conn, "A")), (std::vector<std::string>{"e1@rmq"}));
  auto parked = kafka.Aggregates(conn);
  ASSERT_TRUE(parked.ok()) << parked.status();
  EXPECT_EQ(parked->size(), 2u);
  EXPECT_TRUE(parked->contains("A") && parked->contains("C"));
  EXPECT_FALSE(parked->contains("B")) << "rmq's letter must not park kafka's aggregate";
  EXPECT_EQ(*rmq.Count(conn), 3);
  // Without a slot (setup, status): every slot's.
  EXPECT_EQ(*DeadLetterStore("outbox").Count(conn), 4);
}

// Issue 32: a letter keeps the row's headers; a table from before the headers column
// stores letters without headers, refuses one with headers (retried, naming setup)
// rather than drop its trace context, and takes it once setup has added the column.
TEST(DeadLetterStore, HeadersAreKeptAndATableWithoutTheColumnRefusesThemUntilSetup) {
  auto db = test::TestDatabase::Create();
  pg::Connection conn = db->Connect();
  db->Exec(kTableWithoutSlot);
  DeadLetterStore store("outbox", "kafka");
  ASSERT_TRUE(store.Insert(conn, Letter("e1", "a")).ok());
  DeadLetter traced = Letter("e2", "b");
  traced.headers = R"({"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"})";
  absl::Status refused = store.Insert(conn, traced);
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable) << refused;
  EXPECT_NE(refused.message().find("no headers column"), std::string::npos) << refused;
  EXPECT_NE(refused.message().find("run outboxd setup"), std::string::npos) << refused;

  ops::SetupOptions options{.slot = db->name()};
  ops::SetupReport report;
  ASSERT_TRUE(ops::Setup(conn, options, &report).ok());
  store.ForgetShape();
  ASSERT_TRUE(store.Insert(conn, traced).ok());
  auto listed = store.List(conn, std::nullopt);
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->size(), 2u);
  EXPECT_EQ((*listed)[0].headers, "");
  EXPECT_EQ((*listed)[1].headers, traced.headers);
  EXPECT_EQ(db->Scalar("SELECT count(*) FROM outbox_dead_letter WHERE headers IS NULL"), "1");
}

// A table from before slots: setup adds the column and makes ids unique per slot, once.
TEST(DeadLetterStore, SetupAddsTheSlotColumnToATableFromBeforeSlotsOnce) {
  auto db = test::TestDatabase::Create();
  pg::Connection conn = db->Connect();
  db->Exec(kTableWithoutSlot);
  const DeadLetterStore kafka("outbox", "kafka");
  const DeadLetterStore rmq("outbox", "rmq");
  // Until then it works as before: the letter is every slot's.
  ASSERT_TRUE(kafka.Insert(conn, Letter("e1", "A")).ok());
  ASSERT_TRUE(rmq.Insert(conn, Letter("e1", "A")).ok());
  EXPECT_EQ(Ids(rmq.List(conn, std::nullopt)), (std::vector<std::string>{"e1@-"}));

  ops::SetupOptions options{.slot = db->name()};
  ops::SetupReport report;
  ASSERT_TRUE(ops::Setup(conn, options, &report).ok());
  std::string created;
  for (const std::string& what : report.created) created += what + "\n";
  EXPECT_NE(created.find("table outbox_dead_letter migrated"), std::string::npos) << created;
  EXPECT_EQ(db->Scalar("SELECT pg_get_indexdef('outbox_dead_letter_event'::regclass)"),
            "CREATE UNIQUE INDEX outbox_dead_letter_event ON public.outbox_dead_letter USING btree "
            "(id, aggregate_id, slot)");
  kafka.ForgetShape();
  rmq.ForgetShape();
  ASSERT_TRUE(kafka.Insert(conn, Letter("e2", "B")).ok());
  ASSERT_TRUE(rmq.Insert(conn, Letter("e3", "B")).ok());
  EXPECT_EQ(Ids(kafka.List(conn, std::nullopt)), (std::vector<std::string>{"e1@-", "e2@kafka"}));
  EXPECT_EQ(Ids(rmq.List(conn, std::nullopt)), (std::vector<std::string>{"e1@-", "e3@rmq"}));
  report = {};
  ASSERT_TRUE(ops::Setup(conn, options, &report).ok());
  EXPECT_TRUE(report.created.empty());
}

}  // namespace
}  // namespace outboxd::outbox
