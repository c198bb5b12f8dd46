// Row -> event mapping, timestamps and the payload check, without a server.
#include "outbox/event.h"

#include "gtest/gtest.h"
#include "outbox/payload_check.h"

namespace outboxd::outbox {
namespace {

pgoutput::Relation OutboxRelation(std::vector<std::string> names) {
  pgoutput::Relation rel{.id = 16384, .nspname = "public", .relname = "outbox"};
  for (auto& n : names) rel.columns.push_back({.name = n, .type_oid = 25});
  return rel;
}

pgoutput::TupleValue Text(std::string_view s) { return {pgoutput::ValueKind::kText, s}; }

// `row` of a table of text `columns`, mapped through `mapping`.
absl::StatusOr<OutboxEvent> MapRow(const ColumnMapping& mapping, std::vector<std::string> columns,
                                   const pgoutput::Tuple& row) {
  EventMapper mapper{mapping};
  absl::Status relation = mapper.SetRelation(OutboxRelation(std::move(columns)));
  EXPECT_TRUE(relation.ok()) << relation;
  return mapper.Map(row);
}

TEST(EventMapper, MapsTheDefaultColumnsByNameWhateverTheirPosition) {
  EventMapper mapper{ColumnMapping{}};
  ASSERT_TRUE(mapper
                  .SetRelation(OutboxRelation({"seq", "payload", "id", "tipo", "aggregate_id",
                                               "criado_em", "publicado_em"}))
                  .ok());
  pgoutput::Tuple row = {Text("1"),
                         Text("{}"),
                         Text("0b1f6a52-6d8c-4a39-9c1e-3f1d2a7c9e10"),
                         Text("pedido.confirmado"),
                         Text("77"),
                         Text("2026-12-02 12:00:00+00"),
                         {pgoutput::ValueKind::kNull, {}}};
  auto ev = mapper.Map(row);
  ASSERT_TRUE(ev.ok()) << ev.status();
  EXPECT_EQ(ev->id, "0b1f6a52-6d8c-4a39-9c1e-3f1d2a7c9e10");
  EXPECT_EQ(ev->aggregate_id, "77");
  EXPECT_EQ(ev->type, "pedido.confirmado");
  EXPECT_EQ(ev->payload, "{}");
  EXPECT_EQ(ev->created_at, "2026-12-02 12:00:00+00");
}

TEST(EventMapper, RenamedColumnsForADebeziumStyleTable) {
  auto ev = MapRow(
      ColumnMapping{.aggregate_id = "aggregateid", .type = "type", .created_at = "timestamp"},
      {"id", "aggregateid", "type", "payload", "timestamp"},
      {Text("i"), Text("a"), Text("t"), Text("[1]"), Text("ts")});
  ASSERT_TRUE(ev.ok()) << ev.status();
  EXPECT_EQ(ev->aggregate_id, "a");
  EXPECT_EQ(ev->type, "t");
}

// Debezium's outbox table has no timestamp column: `outboxd run` clears the name, and
// the relay supplies the commit time instead.
TEST(EventMapper, AnEmptyCreatedAtNameIsNotLookedUp) {
  auto ev = MapRow(ColumnMapping{.aggregate_id = "aggregateid", .type = "type", .created_at = ""},
                   {"id", "aggregatetype", "aggregateid", "type", "payload"},
                   {Text("i"), Text("pedido"), Text("a"), Text("t"), Text("{}")});
  ASSERT_TRUE(ev.ok()) << ev.status();
  EXPECT_EQ(ev->aggregate_id, "a");
  EXPECT_EQ(ev->type, "t");
  EXPECT_EQ(ev->payload, "{}");
  EXPECT_EQ(ev->created_at, "");
}

TEST(EventMapper, MissingColumnNamesTheColumnAndTheFlag) {
  EventMapper mapper{ColumnMapping{}};
  auto status = mapper.SetRelation(OutboxRelation({"id", "aggregate_id", "payload", "criado_em"}));
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(status.message().find("\"tipo\""), std::string::npos) << status;
  EXPECT_NE(status.message().find("--type-column"), std::string::npos) << status;
  EXPECT_FALSE(mapper.ready());
}

TEST(EventMapper, RelationChangeRemapsColumns) {
  EventMapper mapper{ColumnMapping{}};
  ASSERT_TRUE(
      mapper.SetRelation(OutboxRelation({"id", "aggregate_id", "tipo", "payload", "criado_em"}))
          .ok());
  // ALTER TABLE mid-stream: a column added in front moves every position.
  ASSERT_TRUE(mapper
                  .SetRelation(OutboxRelation(
                      {"extra", "id", "aggregate_id", "tipo", "payload", "criado_em"}))
                  .ok());
  pgoutput::Tuple row = {Text("x"), Text("i"), Text("a"), Text("t"), Text("{}"), Text("c")};
  auto ev = mapper.Map(row);
  ASSERT_TRUE(ev.ok());
  EXPECT_EQ(ev->id, "i");
  EXPECT_EQ(ev->created_at, "c");
  pgoutput::Tuple old_shape = {Text("i"), Text("a"), Text("t"), Text("{}"), Text("c")};
  EXPECT_FALSE(mapper.Map(old_shape).ok());
}

TEST(EventMapper, NullValueIsAnErrorNotACrash) {
  auto ev = MapRow(ColumnMapping{}, {"id", "aggregate_id", "tipo", "payload", "criado_em"},
                   {Text("i"), {pgoutput::ValueKind::kNull, {}}, Text("t"), Text("{}"), Text("c")});
  EXPECT_EQ(ev.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(EventMapper, TheHeadersColumnMayBeNullAndNamesItsFlagWhenMissing) {
  const ColumnMapping mapping{.headers = "headers"};
  const std::vector<std::string> columns = {"id",      "aggregate_id", "tipo",
                                            "payload", "criado_em",    "headers"};
  auto ev = MapRow(mapping, columns,
                   {Text("i"), Text("a"), Text("t"), Text("{}"), Text("c"), Text(R"({"k": "v"})")});
  ASSERT_TRUE(ev.ok()) << ev.status();
  EXPECT_EQ(ev->headers, R"({"k": "v"})");
  ev = MapRow(
      mapping, columns,
      {Text("i"), Text("a"), Text("t"), Text("{}"), Text("c"), {pgoutput::ValueKind::kNull, {}}});
  ASSERT_TRUE(ev.ok()) << ev.status();
  EXPECT_EQ(ev->headers, "") << "NULL: no headers of the row's own";
  EventMapper mapper{mapping};
  absl::Status missing =
      mapper.SetRelation(OutboxRelation({"id", "aggregate_id", "tipo", "payload", "criado_em"}));
  EXPECT_NE(missing.message().find("--headers-column"), std::string_view::npos) << missing;
}

TEST(IsoTimestamp, AddsTheTAndCompletesTheOffset) {
  std::string buf;
  EXPECT_EQ(IsoTimestamp("2026-12-02 12:22:45.123456+00", buf), "2026-12-02T12:22:45.123456+00:00");
  EXPECT_EQ(IsoTimestamp("2026-12-02 12:22:45+05:30", buf), "2026-12-02T12:22:45+05:30");
  EXPECT_EQ(IsoTimestamp("2026-12-02 12:22:45-03", buf), "2026-12-02T12:22:45-03:00");
}

TEST(PayloadChecker, AcceptsObjectsAndArrays) {
  PayloadChecker checker;
  EXPECT_TRUE(checker.Check(R"({"pedidoId": "77", "totalCentavos": 1000})").ok());
  EXPECT_TRUE(checker.Check(R"([1, 2, {"a": null}])").ok());
  EXPECT_TRUE(checker.Check(R"(  {}  )").ok());
}

TEST(PayloadChecker, RejectsScalarsAndInvalidJsonAsPoison) {
  PayloadChecker checker;
  for (std::string_view bad : {"42", "\"text\"", "null", "true", "{", "{\"a\":}", "", "[1,]"}) {
    EXPECT_EQ(checker.Check(bad).code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  // The parser is reused: a good payload after bad ones still passes.
  EXPECT_TRUE(checker.Check("{\"ok\":1}").ok());
}

TEST(PayloadChecker, LargePayloadThenSmallOne) {
  PayloadChecker checker;
  std::string big = "[";
  for (int i = 0; i < 100000; ++i) big += "1,";
  big += "1]";
  EXPECT_TRUE(checker.Check(big).ok());
  EXPECT_TRUE(checker.Check("[]").ok());
}

}  // namespace
}  // namespace outboxd::outbox
