// A partitioned inbox (issue 19 point 3, "Inbox tables get the same option") on real
// PostgreSQL: `outboxd setup --inbox-partition-by day` creates it keyed by (message
// id, the event's created-at), inbox::Process still turns a redelivery into a
// duplicate in every partition and without a created_at header, cleanup drops whole
// the partitions whose marks are all older than --inbox-retention, and the consumer
// deduplicates end to end behind the relay with the headers the relay writes.
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "inbox/consumer.h"
#include "inbox/inbox.h"
#include "support/doc_commands.h"
#include "support/inbox_deliveries.h"
#include "support/relay_harness.h"
#include "support/wait_until.h"

namespace outboxd::test {
namespace {

const std::vector<std::string> kTopics = {"pedido.confirmado"};

int Outboxd(RelayHarness& h, std::vector<std::string> args, std::string* out) {
  args.insert(args.end(), {"--pg", h.db().conninfo()});
  return h.RunOutboxd(std::move(args), out);
}

int InboxLeaves(TestDatabase& db) {
  return std::stoi(db.Scalar("SELECT count(*) FROM pg_partition_tree('inbox') WHERE isleaf"));
}

// The harness's setup made the plain inbox; this one replaces it with setup's
// partitioned one.
void ReplaceWithPartitionedInbox(RelayHarness& h, std::string* out) {
  h.db().Exec("DROP TABLE inbox");
  ASSERT_EQ(Outboxd(h, {"setup", "--slot", h.slot(), "--inbox-partition-by", "day"}, out), 0)
      << *out;
}

// The created_at header the relay would write for an event created `days` from now
// (src/outbox/event.cc, IsoTimestamp).
std::string CreatedAtHeader(TestDatabase& db, int days) {
  return db.Scalar(
      absl::StrFormat("SELECT to_char((now() + interval '%d days') AT TIME ZONE 'UTC', "
                      "'YYYY-MM-DD\"T\"HH24:MI:SS.US\"+00:00\"')",
                      days));
}

// The partitioned inbox's columns, key and partition key, one line.
constexpr char kInboxShape[] = R"sql(
SELECT string_agg(format('%s %s %s %s', a.attname, format_type(a.atttypid, a.atttypmod),
                         a.attnotnull, pg_get_expr(d.adbin, d.adrelid)), ', ' ORDER BY a.attnum)
       || ' / ' || (SELECT pg_get_constraintdef(oid) FROM pg_constraint
                     WHERE conrelid = 'inbox'::regclass AND contype = 'p')
       || ' / ' || pg_get_partkeydef('inbox'::regclass)
  FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
 WHERE a.attrelid = 'inbox'::regclass AND a.attnum > 0 AND NOT a.attisdropped
)sql";

inbox::Message Msg(const std::string& id, std::optional<std::string> created_at) {
  inbox::Message m{.id = id, .topic = "pedido.confirmado", .value = R"({"pedidoId":"p1"})"};
  m.headers.push_back({"id", id});
  if (created_at) m.headers.push_back({"created_at", *created_at});
  return m;
}

TEST(PartitionedInbox, SetupInboxPartitionByDayCreatesItWithPartitionsAheadAndDefault) {
  RelayHarness h(kTopics);
  std::string out;
  // An existing plain inbox is not converted behind the consumers' backs.
  EXPECT_EQ(Outboxd(h, {"setup", "--slot", h.slot(), "--inbox-partition-by", "day"}, &out), 2)
      << out;
  EXPECT_TRUE(absl::StrContains(out, "table inbox exists and is not partitioned")) << out;
  EXPECT_TRUE(absl::StrContains(out, "Moving to a partitioned inbox")) << out;

  ReplaceWithPartitionedInbox(h, &out);
  const std::string today = h.db().Scalar("SELECT to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD')");
  EXPECT_TRUE(absl::StrContains(out, "setup: partition inbox_p" + today)) << out;
  EXPECT_TRUE(absl::StrContains(out, "setup: partition inbox_default")) << out;
  EXPECT_EQ(InboxLeaves(h.db()), 5);  // today, three ahead, DEFAULT
  EXPECT_EQ(h.db().Scalar("SELECT pg_get_constraintdef(oid) FROM pg_constraint "
                          "WHERE conrelid = 'inbox'::regclass AND contype = 'p'"),
            "PRIMARY KEY (message_id, evento_criado_em)");
  EXPECT_EQ(h.db().Scalar("SELECT relkind FROM pg_class WHERE oid = 'outbox'::regclass"), "r")
      << "the outbox keeps its own option";
  // docs/schema.md's DDL of it is what setup made.
  auto by_doc = TestDatabase::Create();
  for (const std::string& sql : DocBlocks("docs/schema.md", "sql", "-- partitioned inbox")) {
    by_doc->Exec(sql);
  }
  EXPECT_EQ(by_doc->Scalar(kInboxShape), h.db().Scalar(kInboxShape));
  ASSERT_EQ(Outboxd(h, {"setup", "--slot", h.slot(), "--inbox-partition-by", "day"}, &out), 0)
      << out;
  EXPECT_FALSE(absl::StrContains(out, "setup: partition")) << out;  // nothing more to create
  EXPECT_EQ(InboxLeaves(h.db()), 5);
}

// docs/operations.md, "Moving to a partitioned inbox", run as written: the plain
// inbox out of the way, then setup makes the partitioned one.
TEST(PartitionedInbox, MovingAPlainInboxAsTheReadmeSaysGivesAPartitionedOne) {
  RelayHarness h(kTopics);
  h.db().Exec("INSERT INTO inbox (message_id) VALUES (gen_random_uuid())");
  for (const std::string& sql : DocBlocks("docs/operations.md", "sql", "-- consumers stopped")) {
    h.db().Exec(sql);
  }
  const auto commands =
      DocCommands("docs/operations.md", "outboxd setup --pg \"$PG\" --inbox-partition-by day",
                  h.db().conninfo(), h.cluster().bootstraps());
  ASSERT_EQ(commands.size(), 1u);
  std::vector<std::string> args = commands[0];
  args.insert(args.end(), {"--slot", h.slot()});
  std::string out;
  ASSERT_EQ(h.RunOutboxd(args, &out), 0) << out;
  EXPECT_EQ(InboxLeaves(h.db()), 5);
  EXPECT_EQ(h.db().Scalar("SELECT count(*) FROM inbox_plain"), "1");
}

// A redelivery carries the same id and created_at, so the same key: a duplicate,
// whichever partition it falls in (DEFAULT included); a message without the header
// is marked with kUndatedCreatedAt, so its redelivery conflicts too.
TEST(PartitionedInbox, AMessageProcessedTwiceIsADuplicateInEveryPartition) {
  RelayHarness h(kTopics);
  std::string out;
  ReplaceWithPartitionedInbox(h, &out);
  CreateDayPartition(h.db(), "inbox", "old2", -2);
  h.db().Exec("CREATE TABLE efeitos (message_id uuid)");
  pg::Connection conn = h.db().Connect();
  int runs = 0;
  inbox::Handler effect = [&runs](pg::Connection& c, const inbox::Message& m) {
    ++runs;
    return c.ExecParams("INSERT INTO efeitos VALUES ($1)", {m.id}).status();
  };
  std::vector<inbox::Message> messages;
  int n = 0;
  for (int days : {-2, 0, 1, 40, -40}) {  // 40 and -40: DEFAULT
    messages.push_back(Msg(absl::StrFormat("%08d-6d8c-4a39-9c1e-3f1d2a7c9e10", ++n),
                           CreatedAtHeader(h.db(), days)));
  }
  messages.push_back(Msg("99999999-6d8c-4a39-9c1e-3f1d2a7c9e10", std::nullopt));
  for (const inbox::Message& m : messages) {
    for (inbox::Outcome expected : {inbox::Outcome::kProcessed, inbox::Outcome::kDuplicate}) {
      absl::StatusOr<inbox::Outcome> outcome = inbox::Process(conn, m, effect);
      ASSERT_TRUE(outcome.ok()) << m.id << ": " << outcome.status();
      EXPECT_EQ(*outcome, expected) << m.id;
    }
  }
  EXPECT_EQ(runs, 6);
  EXPECT_EQ(h.db().Scalar("SELECT count(*) FROM efeitos"), "6");
  EXPECT_EQ(h.db().Scalar("SELECT count(*) FROM inbox_old2"), "1");
  EXPECT_EQ(h.db().Scalar("SELECT count(*) FROM inbox_default"), "3");
  EXPECT_EQ(h.db().Scalar("SELECT evento_criado_em FROM inbox WHERE message_id = "
                          "'99999999-6d8c-4a39-9c1e-3f1d2a7c9e10'"),
            "-infinity");

  // The same event without its header (a table without a created-at column: streamed
  // with the commit time, backfilled again with none after a recreated slot).
  absl::StatusOr<inbox::Outcome> undated =
      inbox::Process(conn, Msg(messages[1].id, std::nullopt), effect);
  ASSERT_TRUE(undated.ok()) << undated.status();
  EXPECT_EQ(*undated, inbox::Outcome::kDuplicate);

  // The key told instead of looked up, and the same message again: still a duplicate.
  absl::StatusOr<inbox::Outcome> told =
      inbox::Process(conn, messages[1], effect, {.key = inbox::InboxKey::kIdAndCreatedAt});
  ASSERT_TRUE(told.ok()) << told.status();
  EXPECT_EQ(*told, inbox::Outcome::kDuplicate);
  // A created_at that is no timestamp cannot be marked: an error, nothing ran.
  absl::StatusOr<inbox::Outcome> bad =
      inbox::Process(conn, Msg("aaaaaaaa-6d8c-4a39-9c1e-3f1d2a7c9e10", "yesterday-ish"), effect);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument) << bad.status();
  EXPECT_EQ(runs, 6);
}

// Cleanup drops whole the inbox partitions whose range ended before the cut-off and
// whose marks were all processed before it, keeps the newer ones and one holding a
// mark processed late, and deletes DEFAULT's old marks one by one.
TEST(PartitionedInbox, CleanupDropsExactlyTheInboxPartitionsOlderThanTheRetention) {
  RelayHarness h(kTopics);
  std::string out;
  ReplaceWithPartitionedInbox(h, &out);
  for (int days : {-10, -9, -8, -3})
    CreateDayPartition(h.db(), "inbox", absl::StrCat("old", -days), days);
  // Marks processed when their event was created, a day later for old9's late one.
  const auto mark = [&h](int created_days, int processed_days, const std::string& created = "") {
    h.db().Exec(absl::StrFormat(
        "INSERT INTO inbox (message_id, evento_criado_em, processado_em) VALUES "
        "(gen_random_uuid(), %s, now() + interval '%d days')",
        created.empty() ? absl::StrFormat("now() + interval '%d days'", created_days) : created,
        processed_days));
  };
  for (int days : {-10, -9, -8, -3, 0, 1}) mark(days, days);
  mark(-9, -1);                       // consumed late: old9 is kept
  mark(0, -20, "'-infinity'");        // no created_at, processed long ago: deleted
  mark(0, 0, "'-infinity'");          // no created_at, processed now: kept
  mark(-60, -60);                     // before every range: DEFAULT, deleted
  EXPECT_EQ(InboxLeaves(h.db()), 9);  // old10, old9, old8, old3, today, three ahead, DEFAULT
  EXPECT_EQ(h.db().Scalar("SELECT count(*) FROM inbox_default"), "3");

  ASSERT_EQ(Outboxd(h, {"cleanup", "--inbox-retention", "5d"}, &out), 0) << out;
  EXPECT_EQ(InboxLeaves(h.db()), 7) << out;  // old10 and old8 dropped
  EXPECT_EQ(h.db().Scalar("SELECT to_regclass('inbox_old10') IS NULL AND "
                          "to_regclass('inbox_old8') IS NULL AND "
                          "to_regclass('inbox_old9') IS NOT NULL AND "
                          "to_regclass('inbox_old3') IS NOT NULL"),
            "t");
  EXPECT_TRUE(
      absl::StrContains(out, "created 0 inbox partitions ahead, dropped 2 inbox partitions"))
      << out;
  EXPECT_TRUE(absl::StrContains(out, "and 2 inbox rows older than 5d")) << out;
  EXPECT_EQ(h.db().Scalar("SELECT count(*) FROM inbox_default"), "1");
  EXPECT_EQ(h.db().Scalar("SELECT count(*) FROM inbox_old9"), "2") << "not deleted row by row";
  EXPECT_EQ(h.db().Scalar("SELECT count(*) FROM inbox"), "6");

  // A missing partition ahead is made again by the next round.
  const std::string last_ahead = h.db().Scalar(
      "SELECT 'inbox_p' || to_char(now() AT TIME ZONE 'UTC' + interval '3 days', 'YYYYMMDD')");
  h.db().Exec("DROP TABLE " + last_ahead);
  ASSERT_EQ(Outboxd(h, {"cleanup", "--inbox-retention", "5d"}, &out), 0) << out;
  EXPECT_TRUE(absl::StrContains(out, "created 1 inbox partitions ahead, dropped 0")) << out;
  EXPECT_EQ(InboxLeaves(h.db()), 7) << out;
}

// End to end: outbox rows over several days, relayed to Kafka with their created_at
// header, consumed into the partitioned inbox (each mark in its event's partition);
// a second group reads them all again and every one is a duplicate.
TEST(PartitionedInbox, TheConsumerDeduplicatesRelayedEventsOnAPartitionedInbox) {
  RelayHarness h(kTopics);
  std::string out;
  ReplaceWithPartitionedInbox(h, &out);
  h.db().Exec("CREATE TABLE efeitos (message_id uuid)");
  h.StartRelay({"--cleanup-interval", "0s"});
  constexpr int kEvents = 12;
  for (int i = 0; i < kEvents; ++i) {
    const int days = std::vector<int>{0, 1, 2, 30}[i % 4];  // 30: DEFAULT
    h.db().Exec(absl::StrFormat(
        "INSERT INTO outbox (aggregate_id, tipo, payload, criado_em) VALUES ('pedido-%d', "
        "'pedido.confirmado', '{\"pedidoId\": \"p%d\"}', now() + interval '%d days')",
        i, i, days));
  }
  ASSERT_TRUE(h.collector().WaitForCount(kEvents, absl::Seconds(60))) << h.relay().Log();

  inbox::Handler effect = [](pg::Connection& c, const inbox::Message& m) {
    return c.ExecParams("INSERT INTO efeitos VALUES ($1)", {m.id}).status();
  };
  // Consumes `group` until `n` messages were handled; their results counted.
  const auto consume = [&](const std::string& group, int n) {
    std::map<inbox::Delivery::Result, int> results;
    auto consumer = inbox::Consumer::Create(
        h.db().Connect(),
        {.brokers = h.cluster().bootstraps(), .group_id = group, .topics = kTopics}, effect);
    EXPECT_TRUE(consumer.ok()) << consumer.status();
    if (!consumer.ok()) return results;
    for (const inbox::Delivery& d : PollDeliveries(**consumer, n)) ++results[d.result];
    return results;
  };
  std::map<inbox::Delivery::Result, int> first = consume("billing", kEvents);
  EXPECT_EQ(first[inbox::Delivery::Result::kProcessed], kEvents);
  std::map<inbox::Delivery::Result, int> again = consume("billing-again", kEvents);
  EXPECT_EQ(again[inbox::Delivery::Result::kDuplicate], kEvents);
  EXPECT_EQ(h.db().Scalar("SELECT count(*) FROM efeitos"), absl::StrCat(kEvents));
  // Each mark carries its event's created-at, so it sits in that day's partition.
  EXPECT_EQ(h.db().Scalar("SELECT count(*) FROM inbox i JOIN outbox o ON o.id = i.message_id "
                          "AND o.criado_em = i.evento_criado_em"),
            absl::StrCat(kEvents));
  EXPECT_EQ(h.db().Scalar("SELECT count(*) FROM inbox_default"), absl::StrCat(kEvents / 4));
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

// The consumer looks the inbox's key up once; an inbox moved to a partitioned one
// under it (not the documented way) costs one failed attempt, then the key is looked up
// again and the retry marks the message in the partitioned inbox.
TEST(PartitionedInbox, AnInboxMovedUnderARunningConsumerCostsOneRetry) {
  RelayHarness h(kTopics);
  h.db().Exec("CREATE TABLE efeitos (message_id uuid)");
  h.StartRelay({"--cleanup-interval", "0s"});
  const auto insert_event = [&h](int i) {
    h.db().Exec(
        absl::StrFormat("INSERT INTO outbox (aggregate_id, tipo, payload) VALUES ('pedido-%d', "
                        "'pedido.confirmado', '{\"pedidoId\": \"p%d\"}')",
                        i, i));
  };
  inbox::Handler effect = [](pg::Connection& c, const inbox::Message& m) {
    return c.ExecParams("INSERT INTO efeitos VALUES ($1)", {m.id}).status();
  };
  auto consumer = inbox::Consumer::Create(
      h.db().Connect(),
      {.brokers = h.cluster().bootstraps(), .group_id = "billing", .topics = kTopics}, effect);
  ASSERT_TRUE(consumer.ok()) << consumer.status();
  // The results of the deliveries up to the first one processed.
  const auto until_processed = [&consumer]() {
    std::vector<inbox::Delivery::Result> results;
    WaitUntil(
        absl::Seconds(60),
        [&] { return !results.empty() && results.back() == inbox::Delivery::Result::kProcessed; },
        [&] {
          for (const inbox::Delivery& d :
               PollDeliveries(**consumer, 1, nullptr, absl::Milliseconds(200))) {
            results.push_back(d.result);
          }
        });
    return results;
  };
  insert_event(1);
  EXPECT_EQ(until_processed(), std::vector{inbox::Delivery::Result::kProcessed});

  h.db().Exec(
      "ALTER TABLE inbox RENAME TO inbox_plain; "
      "ALTER INDEX inbox_pkey RENAME TO inbox_plain_pkey");
  std::string out;
  ASSERT_EQ(Outboxd(h, {"setup", "--slot", h.slot(), "--inbox-partition-by", "day"}, &out), 0)
      << out;
  insert_event(2);
  EXPECT_EQ(until_processed(),
            (std::vector{inbox::Delivery::Result::kFailed, inbox::Delivery::Result::kProcessed}));
  EXPECT_EQ(h.db().Scalar("SELECT count(*) FROM inbox"), "1");
  EXPECT_EQ(h.db().Scalar("SELECT count(*) FROM efeitos"), "2");
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

}  // namespace
}  // namespace outboxd::test
