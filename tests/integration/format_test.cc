// `outboxd run --format json|envelope|protobuf`, `--header NAME=/json/pointer` and
// `--key-pointer` end to end (issue 7, point 4): rows inserted in PostgreSQL, read
// back from the broker by a consumer's means (simdjson, the generated protobuf code)
// and compared field by field with the outbox table; and the dead letter of an event
// without its key field, stored with its payload so a replay encodes it again.
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "outbox/event.h"
#include "support/decoded_event.h"
#include "support/relay_harness.h"

namespace outboxd::test {
namespace {

using ::testing::HasSubstr;

const std::vector<std::string> kTopics = {"pedido.confirmado"};

// Nested objects and arrays, every scalar type, escapes and non-ASCII text; the first
// two carry a trace context and a customer, the third neither.
const std::vector<std::string> kPayloads = {
    R"({"pedidoId": "77", "customer": {"id": "c-1"}, "total": 10.50, "itens": [1, 2.5, true, null],)"
    R"( "trace": {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}})",
    R"({"nota": "ação \"citada\" \\ ✓ 😀\n", "customer": {"id": 42}, "vazio": {},)"
    R"( "trace": {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}})",
    R"([{"lista": "no customer, no trace"}])",
};

void Insert(pg::Connection& conn, const std::string& aggregate, const std::string& payload) {
  auto r = conn.ExecParams(
      "INSERT INTO outbox (aggregate_id, tipo, payload) VALUES ($1, 'pedido.confirmado', $2)",
      {aggregate, payload});
  ASSERT_TRUE(r.ok()) << r.status();
}

std::string IsoTimestamp(const std::string& pg_timestamptz) {
  std::string buffer;
  return std::string(outbox::IsoTimestamp(pg_timestamptz, buffer));
}

// Every message matches its outbox row: the value decoded in `format`, the contract's
// headers, and the lsn in the value (when the format has one) equal to the header.
void ExpectMatchesOutbox(RelayHarness& h, const std::string& format,
                         const std::vector<CollectedMessage>& messages) {
  std::map<std::string, OutboxRow> rows;
  for (OutboxRow& row : h.OutboxRows()) rows.emplace(row.id, std::move(row));
  for (const CollectedMessage& m : messages) {
    absl::StatusOr<DecodedEvent> event = DecodeEvent(format, m);
    ASSERT_TRUE(event.ok()) << event.status() << "\n" << m.value;
    ASSERT_TRUE(rows.count(event->id)) << event->id;
    const OutboxRow& row = rows[event->id];
    EXPECT_EQ(event->type, row.type);
    EXPECT_EQ(event->aggregate_id, row.aggregate_id);
    EXPECT_EQ(event->created_at, IsoTimestamp(row.created_at));
    if (format == "envelope") {
      EXPECT_EQ(event->payload, Minify(row.payload));
      // Embedded byte for byte as PostgreSQL renders it, not re-printed.
      EXPECT_THAT(m.value, ::testing::EndsWith(absl::StrCat(",\"payload\":", row.payload, "}")));
    } else {
      EXPECT_EQ(event->payload, row.payload);
    }
    ASSERT_TRUE(event->lsn.has_value());
    EXPECT_TRUE(pg::ParseLsn(*event->lsn).ok()) << *event->lsn;
    EXPECT_EQ(event->lsn, m.Header("lsn"));
    EXPECT_EQ(m.Header("id"), row.id);
    EXPECT_EQ(m.Header("type"), row.type);
    EXPECT_EQ(m.Header("aggregate_id"), row.aggregate_id);
    EXPECT_EQ(m.Header("created_at"), IsoTimestamp(row.created_at));
  }
}

// The default, without any format flag: the value is the payload as PostgreSQL renders
// the jsonb (whitespace included), keyed by aggregate_id, no content-type.
TEST(ValueFormat, JsonByDefaultIsThePayloadAsPostgresRendersIt) {
  RelayHarness h(kTopics);
  h.StartRelay();
  auto conn = h.db().Connect();
  for (size_t i = 0; i < kPayloads.size(); ++i) Insert(conn, absl::StrCat("agg-", i), kPayloads[i]);
  ASSERT_TRUE(h.collector().WaitForCount(kPayloads.size(), absl::Seconds(30))) << h.relay().Log();
  std::vector<CollectedMessage> messages = h.collector().Messages();
  ExpectMatchesOutbox(h, "json", messages);
  for (const CollectedMessage& m : messages) {
    EXPECT_EQ(m.key, m.Header("aggregate_id"));
    EXPECT_EQ(m.headers.size(), 6u) << "id, type, aggregate_id, created_at, lsn, outboxd_slot";
    EXPECT_EQ(m.Header("outboxd_slot"), h.db().name() + "/" + h.slot());
  }
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

class ValueFormatTest : public ::testing::TestWithParam<std::string> {};

// Each format with two payload headers and the key from a payload field.
TEST_P(ValueFormatTest, RoundTripsWithPayloadHeadersAndKey) {
  const std::string format = GetParam();
  RelayHarness h(kTopics);
  h.StartRelay({"--format", format, "--header", "traceparent=/trace/traceparent", "--header",
                "total=/total", "--key-pointer", "/customer/id"});
  auto conn = h.db().Connect();
  Insert(conn, "agg-0", kPayloads[0]);
  Insert(conn, "agg-1", kPayloads[1]);
  ASSERT_TRUE(h.collector().WaitForCount(2, absl::Seconds(30))) << h.relay().Log();
  std::vector<CollectedMessage> messages = h.collector().Messages();
  ASSERT_EQ(messages.size(), 2u);
  ExpectMatchesOutbox(h, format, messages);
  std::map<std::string, CollectedMessage> by_aggregate;
  for (const CollectedMessage& m : messages) by_aggregate[*m.Header("aggregate_id")] = m;
  const CollectedMessage& first = by_aggregate["agg-0"];
  const CollectedMessage& second = by_aggregate["agg-1"];
  EXPECT_EQ(first.key, "c-1");
  EXPECT_EQ(second.key, "42");
  EXPECT_EQ(first.Header("traceparent"),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  EXPECT_EQ(second.Header("traceparent"),
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
  EXPECT_EQ(first.Header("total"), "10.50");
  EXPECT_EQ(second.Header("total"), std::nullopt) << "a missing field leaves its header out";
  const std::optional<std::string> content_type = first.Header("content-type");
  if (format == "json") {
    EXPECT_EQ(content_type, std::nullopt);
  } else {
    EXPECT_THAT(content_type.value_or(""), HasSubstr(format == "envelope" ? "json" : "protobuf"));
  }
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

// No key field: the event goes to the dead letters with the reason and its payload
// (not the encoded value), its aggregate's next event follows it, other aggregates
// flow; once the payload is fixed in the table, a replay with the same flags
// publishes it in the format, keyed by the field.
TEST_P(ValueFormatTest, AMissingKeyFieldIsADeadLetterAndReplaysInTheFormat) {
  const std::string format = GetParam();
  const std::vector<std::string> flags = {"--format", format, "--key-pointer", "/customer/id"};
  RelayHarness h(kTopics);
  h.StartRelay(flags);
  auto conn = h.db().Connect();
  Insert(conn, "agg-2", kPayloads[2]);  // no customer: dead letter
  Insert(conn, "agg-2", kPayloads[0]);  // follows it
  Insert(conn, "agg-0", kPayloads[0]);
  ASSERT_TRUE(h.collector().WaitForCount(1, absl::Seconds(30))) << h.relay().Log();
  EXPECT_TRUE(h.WaitForConfirmed(h.CurrentWalLsn(), absl::Seconds(15))) << h.relay().Log();
  pg::Result letters = h.db().Exec(
      "SELECT aggregate_id, payload, error FROM outbox_dead_letter ORDER BY seq");
  ASSERT_EQ(letters.rows(), 2) << h.relay().Log();
  const std::vector<OutboxRow> rows = h.OutboxRows();
  EXPECT_EQ(letters.Get(0, 0), "agg-2");
  EXPECT_EQ(letters.Get(0, 1), rows[0].payload) << "the payload, not the encoded value";
  EXPECT_THAT(std::string(letters.Get(0, 2)), HasSubstr("--key-pointer /customer/id"));
  EXPECT_EQ(letters.Get(1, 1), rows[1].payload);
  EXPECT_EQ(h.collector().Messages().size(), 1u);

  h.db().Exec(
      "UPDATE outbox_dead_letter SET payload = '{\"customer\": {\"id\": \"fixed\"}}' "
      "WHERE payload LIKE '[%'");
  const std::vector<std::string> replay = h.ReplayArgs(flags);
  std::string out;
  EXPECT_EQ(h.RunOutboxd(replay, &out), 0) << out;
  ASSERT_TRUE(h.collector().WaitForCount(3, absl::Seconds(30)));
  std::vector<std::string> replayed_keys;
  for (const CollectedMessage& m : h.collector().Messages()) {
    if (m.Header("aggregate_id") != "agg-2") continue;
    replayed_keys.push_back(m.key);
    absl::StatusOr<DecodedEvent> event = DecodeEvent(format, m);
    ASSERT_TRUE(event.ok()) << event.status();
    EXPECT_EQ(event->aggregate_id, "agg-2");
  }
  // Different keys, maybe different partitions: the order between them is not kept.
  EXPECT_THAT(replayed_keys, ::testing::UnorderedElementsAre("fixed", "c-1"));
  EXPECT_EQ(h.db().Scalar("SELECT count(*) FROM outbox_dead_letter"), "0");
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

// A refusal that comes in the delivery report carries the encoded value: the letter
// still stores the payload inside it.
TEST_P(ValueFormatTest, ABrokerRefusalStoresThePayloadNotTheValue) {
  RelayHarness h(kTopics);
  h.StartRelay({"--format", GetParam()});
  auto conn = h.db().Connect();
  Insert(conn, "warmup", "{}");
  ASSERT_TRUE(h.collector().WaitForCount(1, absl::Seconds(30))) << h.relay().Log();
  h.cluster().PushProduceErrors(10, 50);  // MSG_SIZE_TOO_LARGE: permanent
  Insert(conn, "refused", kPayloads[1]);
  h.db().WaitForScalar("SELECT count(*) FROM outbox_dead_letter", "1");
  h.cluster().ClearProduceErrors();
  EXPECT_EQ(h.db().Scalar("SELECT aggregate_id || ' ' || payload FROM outbox_dead_letter"),
            "refused " + h.OutboxRows()[1].payload)
      << h.relay().Log();
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

INSTANTIATE_TEST_SUITE_P(Formats, ValueFormatTest,
                         ::testing::Values("json", "envelope", "protobuf"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace outboxd::test
