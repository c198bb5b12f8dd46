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
#include "integration/relay_harness.h"
#include "support/doc_commands.h"

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

}  // namespace
}  // namespace outboxd::test
