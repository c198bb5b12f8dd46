#include "support/sdk_events.h"

#include <cstdlib>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "simdjson.h"
#include "support/child_process.h"

namespace outboxd::test {
namespace {

using ::testing::HasSubstr;

// pedido-77's, written into the column by the INSERT itself.
constexpr char kTraceparent[] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

std::string Field(simdjson::dom::element object, const char* name) {
  std::string_view value;
  return object[name].get_string().get(value) ? std::string("(none)") : std::string(value);
}

// What a reader should find of each event: its data's total and the consumer span's
// trace id, parent span id and tracestate ("(none)" for pedido-78's missing trace).
struct Expected {
  double total;
  std::string traceparent;
  std::string tracestate;
  std::string trace_id;
  std::string parent_id;
};

std::map<std::string, Expected> ExpectedEvents(const WriterSpan& span) {
  return {{"pedido-77",
           {10.5, kTraceparent, "(none)", "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"}},
          {"pedido-78", {3, "(none)", "(none)", "(none)", "(none)"}},
          {"pedido-79", {7, span.traceparent, span.tracestate, span.trace_id, span.span_id}}};
}

// The CloudEvent's attributes against its row (found by subject): `id_and_minute` is
// the row's "id|created-at to the minute".
void ExpectAttributesOfTheRow(simdjson::dom::element event, TestDatabase& db,
                              const std::string& line) {
  const std::string subject = Field(event, "subject");
  const std::string id_and_minute = db.Scalar(absl::StrCat(
      "SELECT id || '|' || to_char(criado_em AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI') "
      "FROM outbox WHERE aggregate_id = '",
      subject, "'"));
  const size_t bar = id_and_minute.find('|');
  ASSERT_NE(bar, std::string::npos) << "no row of subject " << subject << ": " << line;
  const std::string id = id_and_minute.substr(0, bar);
  EXPECT_EQ(Field(event, "specversion"), "1.0") << line;
  EXPECT_EQ(Field(event, "id"), id) << line;
  EXPECT_EQ(Field(event, "type"), "pedido.confirmado") << line;
  EXPECT_EQ(Field(event, "source"), absl::StrCat("/outboxd/", db.name(), "/outbox")) << line;
  EXPECT_EQ(Field(event, "partitionkey"), subject) << line;
  EXPECT_EQ(Field(event, "datacontenttype"), "application/json") << line;
  EXPECT_THAT(Field(event, "time"), HasSubstr(id_and_minute.substr(bar + 1))) << line;
}

// The consumer's span: the trace it continued, under which parent.
void ExpectTrace(simdjson::dom::element line_json, const Expected& want, const std::string& line) {
  simdjson::dom::element trace;
  ASSERT_FALSE(line_json["trace"].get(trace)) << line;
  if (want.trace_id == "(none)") {
    EXPECT_TRUE(trace.is_null()) << "a trace where the row had none: " << line;
    return;
  }
  EXPECT_EQ(Field(trace, "trace_id"), want.trace_id) << line;
  EXPECT_EQ(Field(trace, "parent_id"), want.parent_id) << line;
  EXPECT_EQ(Field(trace, "tracestate"), want.tracestate) << line;
}

}  // namespace

std::string TracingNode(const std::string& script) {
  const std::string dir = absl::StrCat(OUTBOXD_SOURCE_DIR, "/tests/tracing/node");
  EXPECT_EQ(system(absl::StrCat(OUTBOXD_SOURCE_DIR, "/scripts/npm-deps ", dir).c_str()), 0);
  return absl::StrCat("node ", dir, "/", script);
}

WriterSpan StartWriterSpan() {
  int rc = -1;
  const std::vector<std::string> lines = CommandLines(TracingNode("start_span.mjs"), &rc);
  EXPECT_EQ(rc, 0);
  if (lines.size() != 1) {
    ADD_FAILURE() << "start_span.mjs printed " << ::testing::PrintToString(lines);
    return {};
  }
  simdjson::dom::parser parser;
  simdjson::dom::element span;
  EXPECT_FALSE(parser.parse(lines[0]).get(span)) << lines[0];
  return {Field(span, "traceparent"), Field(span, "tracestate"), Field(span, "trace_id"),
          Field(span, "span_id")};
}

void InsertTracedEvents(TestDatabase& db, const WriterSpan& span) {
  db.Exec(absl::StrCat(
      "INSERT INTO outbox (aggregate_id, tipo, payload, headers) VALUES ('pedido-77', "
      "'pedido.confirmado', '{\"total\": 10.5, \"itens\": [1, 2]}', '{\"traceparent\": \"",
      kTraceparent, "\"}')"));
  db.Exec(
      "INSERT INTO outbox (aggregate_id, tipo, payload) VALUES ('pedido-78', "
      "'pedido.confirmado', '{\"total\": 3}')");
  // The application that cannot change its INSERT (docs/tracing.md).
  db.Exec(absl::StrCat("BEGIN; SET LOCAL outboxd.traceparent = '", span.traceparent,
                       "'; SET LOCAL outboxd.tracestate = '", span.tracestate,
                       "'; INSERT INTO outbox (aggregate_id, tipo, payload) VALUES ('pedido-79', "
                       "'pedido.confirmado', '{\"total\": 7}'); COMMIT"));
}

void ExpectTheSdkReadTheEvents(const std::string& command, TestDatabase& db,
                               const std::string& format, const WriterSpan& span) {
  int rc = -1;
  const std::vector<std::string> lines = CommandLines(command, &rc);
  EXPECT_EQ(rc, 0) << ::testing::PrintToString(lines);
  ASSERT_EQ(lines.size(), static_cast<size_t>(kTracedEvents)) << ::testing::PrintToString(lines);
  std::map<std::string, Expected> expected = ExpectedEvents(span);
  simdjson::dom::parser parser;
  for (const std::string& line : lines) {
    simdjson::dom::element read;
    ASSERT_FALSE(parser.parse(line).get(read)) << line;
    std::string subject = Field(read, "subject");
    if (format == "json") {
      subject = db.Scalar(absl::StrCat("SELECT aggregate_id FROM outbox WHERE id::text = '",
                                       Field(read, "id"), "'"));
    } else {
      ExpectAttributesOfTheRow(read, db, line);
    }
    auto want = expected.find(subject);
    ASSERT_NE(want, expected.end()) << "an event of no row, or read twice: " << line;
    if (format != "json") {
      EXPECT_EQ(Field(read, "traceparent"), want->second.traceparent) << line;
      EXPECT_EQ(Field(read, "tracestate"), want->second.tracestate) << line;
    }
    double total = 0;
    ASSERT_FALSE(read["data"]["total"].get_double().get(total)) << line;
    EXPECT_EQ(total, want->second.total) << line;
    ExpectTrace(read, want->second, line);
    expected.erase(want);
  }
}

}  // namespace outboxd::test
