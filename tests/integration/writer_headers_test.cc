// The writer API carries headers (issue 32): outbox::Enqueue writes NewEvent::headers
// to the --headers-column, outbox::EmitEvent (outboxd_emit's overload with headers)
// into the WAL-only message, and both reach the broker as headers, read by the
// collector and by kcat. `outboxd setup` upgrades an install from before the overload:
// the roles granted the three-argument function get the new one, PUBLIC neither.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "outbox/writer.h"
#include "support/relay_harness.h"

namespace outboxd::test {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;

const std::vector<std::string> kTopics = {"pedido.confirmado"};
constexpr char kTraceparent[] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

outbox::NewEvent Traced(const std::string& aggregate) {
  return {.aggregate_id = aggregate,
          .type = "pedido.confirmado",
          .payload = R"({"n": 1})",
          .headers = {{"traceparent", kTraceparent}, {"tenant", "acme \"eu\""}}};
}

// The one message of `aggregate` the collector holds, after waiting for `count`.
CollectedMessage MessageOf(RelayHarness& h, size_t count, const std::string& aggregate) {
  EXPECT_TRUE(h.collector().WaitForCount(count, absl::Seconds(30))) << h.relay().Log();
  for (const CollectedMessage& m : h.collector().Messages()) {
    if (m.Header("aggregate_id") == aggregate) return m;
  }
  ADD_FAILURE() << "no message of " << aggregate;
  return {};
}

// "traced" (event `id`) arrived with Traced's headers, "plain" without; kcat agrees.
void ExpectTracedAndPlain(RelayHarness& h, const std::string& id) {
  const CollectedMessage m = MessageOf(h, 2, "traced");
  EXPECT_EQ(m.Header("id"), id);
  EXPECT_EQ(m.Header("traceparent"), kTraceparent);
  EXPECT_EQ(m.Header("tenant"), "acme \"eu\"");
  EXPECT_EQ(MessageOf(h, 2, "plain").Header("traceparent"), std::nullopt);
  EXPECT_THAT(KcatHeaders(h, "pedido.confirmado"),
              Contains(HasSubstr(absl::StrCat("traceparent=", kTraceparent))));
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

TEST(WriterHeaders, EnqueueWritesTheHeadersColumnAndTheHeadersReachTheBroker) {
  RelayHarness h(kTopics);
  ASSERT_EQ(h.RunOutboxd({"setup", "--pg", h.db().conninfo(), "--slot", h.slot(),
                          "--headers-column", "headers"}),
            0);
  h.StartRelay({"--headers-column", "headers"});
  pg::Connection conn = h.db().Connect();
  outbox::WriterOptions options;
  ASSERT_TRUE(conn.Exec("BEGIN").ok());
  // Headers but no column named: refused before the INSERT, the transaction usable.
  absl::StatusOr<std::string> unnamed = outbox::Enqueue(conn, Traced("lost"), options);
  EXPECT_THAT(std::string(unnamed.status().message()),
              HasSubstr("WriterOptions::columns.headers names no column"));
  outbox::NewEvent forged = Traced("forged");
  forged.headers.push_back({"ID", "not-the-id"});
  options.columns.headers = "headers";
  EXPECT_THAT(std::string(outbox::Enqueue(conn, forged, options).status().message()),
              HasSubstr("header \"ID\" is one of outboxd's own headers"));
  absl::StatusOr<std::string> id = outbox::Enqueue(conn, Traced("traced"), options);
  ASSERT_TRUE(id.ok()) << id.status();
  ASSERT_TRUE(
      outbox::Enqueue(conn, {.aggregate_id = "plain", .type = "pedido.confirmado", .payload = "{}"},
                      options)
          .ok());
  ASSERT_TRUE(conn.Exec("COMMIT").ok());

  ExpectTracedAndPlain(h, *id);
}

TEST(WriterHeaders, EmitEventCarriesHeadersThroughTheWalOnlySource) {
  RelayHarness h(kTopics);
  h.StartRelay({"--source", "messages"});
  pg::Connection conn = h.db().Connect();
  ASSERT_TRUE(conn.Exec("BEGIN").ok());
  absl::StatusOr<std::string> id = outbox::EmitEvent(conn, Traced("traced"));
  ASSERT_TRUE(id.ok()) << id.status();
  ASSERT_TRUE(outbox::EmitEvent(
                  conn, {.aggregate_id = "plain", .type = "pedido.confirmado", .payload = "{}"})
                  .ok());
  ASSERT_TRUE(conn.Exec("COMMIT").ok());
  // outboxd_emit checks the headers as the column's constraints do.
  for (const char* bad : {R"({"n": 1})", R"(["x"])", R"({"Type": "forged"})"}) {
    absl::StatusOr<pg::Result> refused = conn.ExecParams(
        "SELECT outboxd_emit('a', 'pedido.confirmado', '{}', $1::jsonb)", {std::string(bad)});
    EXPECT_THAT(std::string(refused.status().message()), HasSubstr("outboxd_emit: ")) << bad;
  }

  ExpectTracedAndPlain(h, *id);
}

// An install from before the overload: only the three-argument function, granted to
// a writer. Setup adds the overload, grants it to that writer, and PUBLIC may call
// neither; setup again changes nothing.
TEST(WriterHeaders, SetupUpgradesAnOlderEmitFunctionKeepingItsCallersAndNoPublicExecute) {
  RelayHarness h(kTopics);
  const std::string writer = h.slot() + "_writer";
  h.db().Exec(
      absl::StrCat("DROP FUNCTION outboxd_emit(text, text, jsonb, jsonb); CREATE ROLE ", writer,
                   "; GRANT EXECUTE ON FUNCTION outboxd_emit(text, text, jsonb) TO ", writer));
  const std::vector<std::string> setup = {"setup", "--pg", h.db().conninfo(), "--slot", h.slot()};
  ASSERT_EQ(h.RunOutboxd(setup), 0);
  ASSERT_EQ(h.RunOutboxd(setup), 0);
  const std::string can = absl::StrCat(
      "SELECT has_function_privilege('", writer,
      "', 'outboxd_emit(text, text, jsonb, jsonb)', 'EXECUTE')::text || ' ' || "
      "has_function_privilege('public', 'outboxd_emit(text, text, jsonb, jsonb)', 'EXECUTE') || "
      "' ' || has_function_privilege('public', 'outboxd_emit(text, text, jsonb)', 'EXECUTE')");
  EXPECT_EQ(h.db().Scalar(can), "true false false");
  h.db().Exec("DROP OWNED BY " + writer + "; DROP ROLE " + writer);
}

}  // namespace
}  // namespace outboxd::test
