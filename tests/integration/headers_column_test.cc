// `--headers-column` end to end (issue 32, first slice): `outboxd setup` adds the
// column to an existing outbox with its checks, `outboxd run` publishes each key of a
// row's object as a Kafka header (read by the collector and by kcat), the checks
// refuse an override of outboxd's own headers and a non-string value at INSERT, and
// a row that bypasses them (the constraints dropped) is a dead letter with its reason
// while the rows after it flow. The column's default captures the transaction's
// `SET LOCAL outboxd.traceparent` / `outboxd.tracestate` (issue 32, second slice).
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "support/metrics_text.h"
#include "support/relay_harness.h"

namespace outboxd::test {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const std::vector<std::string> kTopics = {"pedido.confirmado"};
constexpr char kTraceparent[] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

// The harness's outbox with the headers column added by a second setup.
void AddHeadersColumn(RelayHarness& h) {
  std::string out;
  ASSERT_EQ(h.RunOutboxd({"setup", "--pg", h.db().conninfo(), "--slot", h.slot(),
                          "--headers-column", "headers"},
                         &out),
            0)
      << out;
  EXPECT_THAT(out, HasSubstr("headers"));
}

absl::Status Insert(pg::Connection& conn, const std::string& aggregate,
                    const std::optional<std::string>& headers) {
  return conn
      .ExecParams(
          "INSERT INTO outbox (aggregate_id, tipo, payload, headers) "
          "VALUES ($1, 'pedido.confirmado', '{}', $2::jsonb)",
          {aggregate, headers})
      .status();
}

TEST(HeadersColumn, EachKeyOfTheRowsObjectArrivesAsAKafkaHeader) {
  RelayHarness h(kTopics);
  AddHeadersColumn(h);
  h.StartRelay({"--headers-column", "headers", "--format", "envelope"});
  auto conn = h.db().Connect();
  ASSERT_TRUE(Insert(conn, "traced",
                     absl::StrCat(R"({"traceparent": ")", kTraceparent,
                                  R"(", "tracestate": "congo=t61rcWkgMzE"})"))
                  .ok());
  ASSERT_TRUE(Insert(conn, "plain", std::nullopt).ok());
  ASSERT_TRUE(h.collector().WaitForCount(2, absl::Seconds(30))) << h.relay().Log();
  for (const CollectedMessage& m : h.collector().Messages()) {
    if (m.Header("aggregate_id") == "traced") {
      EXPECT_EQ(m.Header("traceparent"), kTraceparent);
      EXPECT_EQ(m.Header("tracestate"), "congo=t61rcWkgMzE");
    } else {
      EXPECT_EQ(m.headers.size(), 7u) << "NULL: outboxd's own headers only";
    }
  }
  const std::vector<std::string> kcat = KcatHeaders(h, "pedido.confirmado");
  EXPECT_THAT(kcat, ::testing::Contains(HasSubstr(absl::StrCat("traceparent=", kTraceparent))));
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

TEST(HeadersColumn, TheChecksRefuseAnOverrideAndANonStringAtInsert) {
  RelayHarness h(kTopics);
  AddHeadersColumn(h);
  auto conn = h.db().Connect();
  absl::Status forged = Insert(conn, "a", R"({"ok": "1", "Nats-Msg-Id": "forged"})");
  EXPECT_THAT(std::string(forged.message()),
              HasSubstr("headers_must_not_override_outboxd_headers"));
  absl::Status number = Insert(conn, "a", R"({"attempt": 2})");
  EXPECT_THAT(std::string(number.message()), HasSubstr("headers_must_be_object_of_strings"));
  absl::Status array = Insert(conn, "a", R"(["x"])");
  EXPECT_THAT(std::string(array.message()), HasSubstr("headers_must_be_object_of_strings"));
  EXPECT_EQ(h.db().Scalar("SELECT count(*) FROM outbox"), "0");
}

// A table set up without the checks (here: dropped): the row is refused at publish,
// a dead letter saying why, and its neighbours flow.
TEST(HeadersColumn, ARowBypassingTheChecksIsADeadLetterWithItsReason) {
  RelayHarness h(kTopics);
  AddHeadersColumn(h);
  h.db().Exec(
      "ALTER TABLE outbox DROP CONSTRAINT headers_must_be_object_of_strings, "
      "DROP CONSTRAINT headers_must_not_override_outboxd_headers");
  h.StartRelay({"--headers-column", "headers"});
  auto conn = h.db().Connect();
  ASSERT_TRUE(Insert(conn, "number", R"({"attempt": 2})").ok());
  ASSERT_TRUE(Insert(conn, "forged", R"({"id": "not-the-id"})").ok());
  ASSERT_TRUE(Insert(conn, "fine", R"({"k": "v"})").ok());
  ASSERT_TRUE(h.collector().WaitForCount(1, absl::Seconds(30))) << h.relay().Log();
  h.db().WaitForScalar("SELECT count(*) FROM outbox_dead_letter", "2");
  pg::Result letters =
      h.db().Exec("SELECT aggregate_id, error FROM outbox_dead_letter ORDER BY seq");
  ASSERT_EQ(letters.rows(), 2);
  EXPECT_EQ(letters.Get(0, 0), "number");
  EXPECT_THAT(std::string(letters.Get(0, 1)),
              HasSubstr("\"attempt\" has a value that is not a string"));
  EXPECT_EQ(letters.Get(1, 0), "forged");
  EXPECT_THAT(std::string(letters.Get(1, 1)), HasSubstr("\"id\" is one of outboxd's own headers"));
  const std::vector<CollectedMessage> messages = h.collector().Messages();
  ASSERT_EQ(messages.size(), 1u);
  EXPECT_EQ(messages[0].Header("aggregate_id"), "fine");
  EXPECT_EQ(messages[0].Header("k"), "v");
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();

  // The letters keep the headers as the row held them: a person fixes them there, and
  // replay publishes the fixed ones.
  EXPECT_EQ(h.db().Scalar("SELECT string_agg(headers, ' ' ORDER BY seq) FROM outbox_dead_letter"),
            R"({"attempt": 2} {"id": "not-the-id"})");
  h.db().Exec(
      "UPDATE outbox_dead_letter SET headers = CASE aggregate_id WHEN 'number' THEN "
      "'{\"attempt\": \"2\"}' ELSE '{\"forged-id\": \"not-the-id\"}' END");
  std::string out;
  EXPECT_EQ(h.RunOutboxd(h.ReplayArgs(), &out), 0) << out;
  ASSERT_TRUE(h.collector().WaitForCount(3, absl::Seconds(30))) << out;
  std::map<std::string, std::string> replayed;
  for (const CollectedMessage& m : h.collector().Messages()) {
    replayed[m.Header("aggregate_id").value_or("")] =
        absl::StrCat(m.Header("attempt").value_or("-"), " ", m.Header("forged-id").value_or("-"),
                     " ", m.Header("id").value_or("-") == "not-the-id" ? "forged" : "own id");
  }
  EXPECT_EQ(replayed, (std::map<std::string, std::string>{{"fine", "- - own id"},
                                                          {"number", "2 - own id"},
                                                          {"forged", "- not-the-id own id"}}));
}

// Issue 32: whichever way an event becomes a dead letter (refused by the encoder,
// following its parked aggregate, or refused by the broker after the produce, where
// only the message is left to read them from), the letter keeps the row's headers,
// and replay publishes them again, in the relay's format: here CloudEvents binary
// mode, whose attributes are not taken for the row's headers.
TEST(HeadersColumn, EveryKindOfDeadLetterKeepsTheRowsHeadersThroughReplay) {
  RelayHarness h(kTopics);
  AddHeadersColumn(h);
  h.StartRelay({"--headers-column", "headers", "--format", "cloudevents"});
  auto conn = h.db().Connect();
  const std::string traced = absl::StrCat(R"({"traceparent": ")", kTraceparent, R"("})");
  ASSERT_TRUE(conn.Exec("INSERT INTO outbox (aggregate_id, tipo, payload, headers) VALUES "
                        "('poison', 'pedido.confirmado', '42', '{\"tenant\": \"a\"}'), "
                        "('poison', 'pedido.confirmado', '{}', '{\"tenant\": \"b\"}')")
                  .ok());
  ASSERT_TRUE(Insert(conn, "warmup", std::nullopt).ok());
  ASSERT_TRUE(h.collector().WaitForCount(1, absl::Seconds(30))) << h.relay().Log();
  ASSERT_TRUE(h.db().WaitForScalar("SELECT count(*) FROM outbox_dead_letter", "2"));
  // MSG_SIZE_TOO_LARGE for every produce request for a while: a permanent refusal.
  h.cluster().PushProduceErrors(10, 50);
  ASSERT_TRUE(Insert(conn, "refused", traced).ok());
  ASSERT_TRUE(h.db().WaitForScalar("SELECT count(*) FROM outbox_dead_letter", "3"))
      << h.relay().Log();
  h.cluster().ClearProduceErrors();
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
  EXPECT_EQ(h.db().Scalar("SELECT string_agg(aggregate_id || ' ' || headers, ' | ' ORDER BY seq) "
                          "FROM outbox_dead_letter"),
            absl::StrCat(R"(poison {"tenant": "a"} | poison {"tenant": "b"} | refused )",
                         R"({"traceparent":")", kTraceparent, R"("})"));

  h.db().Exec("UPDATE outbox_dead_letter SET payload = '{\"n\": 1}' WHERE payload = '42'");
  // No --headers-column: each letter holds its headers.
  std::string out;
  EXPECT_EQ(h.RunOutboxd(h.ReplayArgs({"--format", "cloudevents"}), &out), 0) << out;
  EXPECT_THAT(out, HasSubstr("replayed 3 dead letter(s)"));
  ASSERT_TRUE(h.collector().WaitForCount(4, absl::Seconds(30))) << out;
  std::vector<std::string> seen;
  for (const CollectedMessage& m : h.collector().Messages()) {
    seen.push_back(absl::StrCat(m.Header("aggregate_id").value_or("-"),
                                " tenant=", m.Header("tenant").value_or("-"),
                                " traceparent=", m.Header("traceparent").value_or("-"),
                                " ce_traceparent=", m.Header("ce_traceparent").value_or("-"),
                                " ce_id=", m.Header("ce_id").has_value() ? "set" : "-"));
  }
  const std::string t = kTraceparent;
  EXPECT_THAT(seen, ::testing::UnorderedElementsAre(
                        "warmup tenant=- traceparent=- ce_traceparent=- ce_id=set",
                        "poison tenant=a traceparent=- ce_traceparent=- ce_id=set",
                        "poison tenant=b traceparent=- ce_traceparent=- ce_id=set",
                        absl::StrCat("refused tenant=- traceparent=", t, " ce_traceparent=", t,
                                     " ce_id=set")));
}

// Each statement string is one transaction on the same connection: what SET LOCAL
// said in one must be gone in the next.
TEST(HeadersColumn, SetLocalTraceContextReachesTheBrokerThroughAnInsertThatDoesNotNameTheColumn) {
  RelayHarness h(kTopics);
  AddHeadersColumn(h);
  h.StartRelay({"--headers-column", "headers"});
  auto conn = h.db().Connect();
  constexpr char kInsert[] =
      "INSERT INTO outbox (aggregate_id, tipo, payload) VALUES ('%s', 'pedido.confirmado', '{}')";
  const std::string set_local =
      absl::StrCat("SET LOCAL outboxd.traceparent = '", kTraceparent,
                   "'; SET LOCAL outboxd.tracestate = 'congo=t61rcWkgMzE';");
  for (const std::string& tx :
       {absl::StrCat("BEGIN; ", set_local, absl::StrFormat(kInsert, "traced"), "; COMMIT"),
        absl::StrCat("BEGIN; ", absl::StrFormat(kInsert, "next"), "; COMMIT"),
        absl::StrCat("BEGIN; SET LOCAL outboxd.traceparent = '", kTraceparent, "'; ",
                     absl::StrFormat(kInsert, "parent-only"), "; COMMIT"),
        absl::StrFormat(kInsert, "autocommit")}) {
    ASSERT_TRUE(conn.Exec(tx).ok()) << tx;
  }
  EXPECT_EQ(h.db().Scalar("SELECT string_agg(aggregate_id || '=' || coalesce(headers::text, "
                          "'NULL'), ' ' ORDER BY seq) FROM outbox"),
            absl::StrCat(R"(traced={"tracestate": "congo=t61rcWkgMzE", "traceparent": ")",
                         kTraceparent, R"("} next=NULL )", R"(parent-only={"traceparent": ")",
                         kTraceparent, R"("} autocommit=NULL)"));
  ASSERT_TRUE(h.collector().WaitForCount(4, absl::Seconds(30))) << h.relay().Log();
  for (const CollectedMessage& m : h.collector().Messages()) {
    const std::string aggregate = m.Header("aggregate_id").value_or("");
    const bool traced = aggregate == "traced" || aggregate == "parent-only";
    EXPECT_EQ(m.Header("traceparent").value_or("none"), traced ? kTraceparent : "none")
        << aggregate;
    EXPECT_EQ(m.Header("tracestate").value_or("none"),
              aggregate == "traced" ? "congo=t61rcWkgMzE" : "none")
        << aggregate;
  }
  const std::vector<std::string> kcat = KcatHeaders(h, "pedido.confirmado");
  ASSERT_EQ(kcat.size(), 4u);
  for (const std::string& line : kcat) {  // in partition order
    if (absl::StrContains(line, "aggregate_id=traced")) {
      EXPECT_THAT(line, HasSubstr(absl::StrCat("traceparent=", kTraceparent)));
      EXPECT_THAT(line, HasSubstr("tracestate=congo=t61rcWkgMzE"));
    } else if (absl::StrContains(line, "aggregate_id=next")) {
      EXPECT_THAT(line, Not(HasSubstr("trace")));
    }
  }
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

// A column an older setup added (no default): setup adds the default, once.
TEST(HeadersColumn, SetupGivesAnExistingColumnTheCapturingDefaultOnce) {
  RelayHarness h(kTopics);
  AddHeadersColumn(h);
  h.db().Exec("ALTER TABLE outbox ALTER COLUMN headers DROP DEFAULT");
  const std::vector<std::string> setup = {
      "setup", "--pg", h.db().conninfo(), "--slot", h.slot(), "--headers-column", "headers"};
  std::string out;
  ASSERT_EQ(h.RunOutboxd(setup, &out), 0) << out;
  EXPECT_THAT(out, HasSubstr("default of column outbox.headers"));
  ASSERT_EQ(h.RunOutboxd(setup, &out), 0) << out;
  EXPECT_THAT(out, Not(HasSubstr("default of column")));
  h.db().Exec(absl::StrCat(
      "BEGIN; SET LOCAL outboxd.traceparent = '", kTraceparent,
      "'; INSERT INTO outbox (aggregate_id, tipo, payload) VALUES ('a', 'b', '{}'); COMMIT"));
  EXPECT_EQ(h.db().Scalar("SELECT headers->>'traceparent' FROM outbox"), kTraceparent);
}

// A traceparent that is not W3C Trace Context, from the column or from a --header
// pointer, is left out and counted; the event arrives, with its valid headers.
TEST(HeadersColumn, AMalformedTraceparentIsDroppedAndCountedWhileTheEventArrives) {
  RelayHarness h(kTopics);
  AddHeadersColumn(h);
  h.StartRelay({"--headers-column", "headers", "--header", "traceparent=/tp"});
  auto conn = h.db().Connect();
  ASSERT_TRUE(Insert(conn, "upper-case",
                     R"({"traceparent": "00-4BF92F3577B34DA6A3CE929D0E0E4736-)"
                     R"(00f067aa0ba902b7-01", "k": "v"})")
                  .ok());
  ASSERT_TRUE(
      conn.ExecParams("INSERT INTO outbox (aggregate_id, tipo, payload) VALUES "
                      "('from-payload', 'pedido.confirmado', $1::jsonb)",
                      {R"({"tp": "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"})"})
          .ok());
  ASSERT_TRUE(
      Insert(conn, "valid", absl::StrCat(R"({"traceparent": ")", kTraceparent, R"("})")).ok());
  ASSERT_TRUE(h.collector().WaitForCount(3, absl::Seconds(30))) << h.relay().Log();
  for (const CollectedMessage& m : h.collector().Messages()) {
    const std::string aggregate = m.Header("aggregate_id").value_or("");
    EXPECT_EQ(m.Header("traceparent").value_or("none"),
              aggregate == "valid" ? kTraceparent : "none")
        << aggregate;
    if (aggregate == "upper-case") {
      EXPECT_EQ(m.Header("k"), "v");
    }
  }
  const std::string metrics = h.Metrics(h.relay());
  EXPECT_EQ(
      MetricValue(metrics,
                  R"(outboxd_headers_dropped_total{header="traceparent",reason="malformed"})"),
      1)
      << metrics;
  EXPECT_EQ(
      MetricValue(metrics,
                  R"(outboxd_headers_dropped_total{header="traceparent",reason="zero_parent_id"})"),
      1)
      << metrics;
  EXPECT_THAT(h.relay().Log(), HasSubstr("published without its traceparent header (malformed"));
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

}  // namespace
}  // namespace outboxd::test
