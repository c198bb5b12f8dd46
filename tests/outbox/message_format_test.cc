// MessageEncoder (outbox/message_format.h) without services: each value format, JSON
// escaping and unicode, every JSON scalar type at a --header pointer, missing and
// non-scalar fields, the key from a payload field, and PayloadOf undoing each format.
#include "outbox/message_format.h"

#include <algorithm>
#include <map>
#include <string>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "outbox/v1/event.pb.h"
#include "simdjson.h"

namespace outboxd::outbox {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

// Awkward on purpose: quotes, backslash, control characters, non-ASCII text.
constexpr char kAggregate[] = "agg \"7\"\\\n\t\x01 ação ✓ 😀";
constexpr char kPayload[] =
    R"({"n": 1, "neg": -5, "big": 18446744073709551615, "price": 10.50, "exp": 1e3, )"
    R"("yes": true, "no": false, "nothing": null, "obj": {"k": "v"}, "list": [1, "two"], )"
    R"("text": "a \"q\" \\ \u00e9 ✓", "a/b": "slash", "m~n": "tilde", )"
    R"("trace": {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}})";

OutboxEvent Event(std::string_view payload = kPayload) {
  return {.id = "0b6f3c1e-2b1a-4c55-9d2e-7f00d1c0ffee",
          .aggregate_id = kAggregate,
          .type = "pedido.confirmado",
          .payload = payload,
          .created_at = "2026-12-02 12:22:45.123+00"};
}

std::map<std::string, std::string> Headers(const EncodedMessage& m) {
  std::map<std::string, std::string> out;
  for (const sink::Header& h : m.headers) {
    EXPECT_TRUE(out.emplace(std::string(h.name), std::string(h.value)).second) << h.name;
  }
  return out;
}

std::vector<std::string> HeaderNames(const EncodedMessage& m) {
  std::vector<std::string> names;
  for (const sink::Header& h : m.headers) names.emplace_back(h.name);
  return names;
}

TEST(MessageEncoder, JsonIsThePayloadItselfKeyedByAggregate) {
  MessageEncoder encoder;
  const OutboxEvent event = Event();
  ASSERT_TRUE(encoder.Encode(event, "0/16B3748").ok());
  const EncodedMessage& m = encoder.message();
  EXPECT_EQ(m.value.data(), event.payload.data()) << "the json value must not be copied";
  EXPECT_EQ(m.value, kPayload);
  EXPECT_EQ(m.key, kAggregate);
  EXPECT_THAT(HeaderNames(m), ElementsAre("id", "type", "aggregate_id", "created_at", "lsn"));
  auto h = Headers(m);
  EXPECT_EQ(h["id"], event.id);
  EXPECT_EQ(h["type"], "pedido.confirmado");
  EXPECT_EQ(h["aggregate_id"], kAggregate);
  EXPECT_EQ(h["created_at"], "2026-12-02T12:22:45.123+00:00");
  EXPECT_EQ(h["lsn"], "0/16B3748");
}

TEST(MessageEncoder, NoLsnMeansNoLsnHeader) {
  MessageEncoder encoder;
  ASSERT_TRUE(encoder.Encode(Event(), "").ok());
  EXPECT_THAT(HeaderNames(encoder.message()),
              ElementsAre("id", "type", "aggregate_id", "created_at"));
}

// The CDC relay marks every message with its database and slot, so a restarted relay
// reading the topic back tells its own messages from other producers'.
TEST(MessageEncoder, ASlotMarkAddsTheOutboxdSlotHeaderToEveryMessage) {
  MessageEncoder encoder;
  encoder.SetSlotMark(SlotMark("app", "outboxd"));
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(encoder.Encode(Event(), "0/16B3748").ok());
    EXPECT_THAT(HeaderNames(encoder.message()),
                ElementsAre("id", "type", "aggregate_id", "created_at", "lsn", "outboxd_slot"));
    EXPECT_EQ(Headers(encoder.message())["outboxd_slot"], "app/outboxd");
  }
  EXPECT_THAT(ParseHeaderPointer("outboxd_slot=/a").status().message(),
              HasSubstr("outboxd's own headers"));
}

TEST(MessageEncoder, EnvelopeEscapesTheFieldsAndEmbedsThePayload) {
  MessageEncoder encoder({.format = ValueFormat::kEnvelope});
  ASSERT_TRUE(encoder.Encode(Event(), "0/16B3748").ok());
  const EncodedMessage& m = encoder.message();
  EXPECT_EQ(m.key, kAggregate);
  EXPECT_EQ(Headers(m)["content-type"], "application/vnd.outboxd.envelope+json");
  // The payload's own bytes, embedded as JSON (not a string), last.
  EXPECT_THAT(std::string(m.value), ::testing::EndsWith(std::string(",\"payload\":") + kPayload + "}"));

  simdjson::dom::parser parser;
  simdjson::dom::element root;
  ASSERT_EQ(parser.parse(std::string(m.value)).get(root), simdjson::SUCCESS) << m.value;
  EXPECT_EQ(std::string_view(root["id"]), "0b6f3c1e-2b1a-4c55-9d2e-7f00d1c0ffee");
  EXPECT_EQ(std::string_view(root["type"]), "pedido.confirmado");
  EXPECT_EQ(std::string_view(root["aggregate_id"]), kAggregate);
  EXPECT_EQ(std::string_view(root["created_at"]), "2026-12-02T12:22:45.123+00:00");
  EXPECT_EQ(std::string_view(root["lsn"]), "0/16B3748");
  EXPECT_TRUE(root["payload"].is_object());
  EXPECT_EQ(int64_t(root["payload"]["n"]), 1);
  EXPECT_EQ(std::string_view(root["payload"]["text"]), "a \"q\" \\ é ✓");
  // Control characters are \u escapes, never raw bytes.
  EXPECT_THAT(std::string(m.value), HasSubstr(R"(agg \"7\"\\\n\t\u0001 ação ✓ 😀)"));
}

TEST(MessageEncoder, EnvelopeWithoutLsnHasANullLsn) {
  MessageEncoder encoder({.format = ValueFormat::kEnvelope});
  ASSERT_TRUE(encoder.Encode(Event(R"({"a": [1, {"b": null}]})"), "").ok());
  EXPECT_EQ(encoder.message().value,
            R"({"id":"0b6f3c1e-2b1a-4c55-9d2e-7f00d1c0ffee","type":"pedido.confirmado",)"
            R"("aggregate_id":"agg \"7\"\\\n\t\u0001 ação ✓ 😀",)"
            R"("created_at":"2026-12-02T12:22:45.123+00:00","lsn":null,)"
            R"("payload":{"a": [1, {"b": null}]}})");
}

// A backfilled row of a table without a created-at column (a Debezium outbox table)
// has no created_at: no header, and null in the envelope, rather than "".
TEST(MessageEncoder, NoCreatedAtMeansNoHeaderAndANullEnvelopeField) {
  OutboxEvent event = Event(R"({"a": 1})");
  event.created_at = "";
  MessageEncoder json;
  ASSERT_TRUE(json.Encode(event, "0/16B3748").ok());
  EXPECT_THAT(HeaderNames(json.message()), ElementsAre("id", "type", "aggregate_id", "lsn"));
  MessageEncoder envelope({.format = ValueFormat::kEnvelope});
  ASSERT_TRUE(envelope.Encode(event, "0/16B3748").ok());
  EXPECT_THAT(std::string(envelope.message().value),
              HasSubstr(R"("created_at":null,"lsn":"0/16B3748",)"));
  const std::string value(envelope.message().value);
  std::vector<sink::Header> headers(envelope.message().headers.begin(),
                                     envelope.message().headers.end());
  absl::StatusOr<std::string_view> payload = envelope.PayloadOf(value, headers);
  ASSERT_TRUE(payload.ok()) << payload.status();
  EXPECT_EQ(*payload, R"({"a": 1})");
}

TEST(MessageEncoder, ProtobufDecodesWithTheGeneratedCode) {
  MessageEncoder encoder({.format = ValueFormat::kProtobuf});
  ASSERT_TRUE(encoder.Encode(Event(), "0/16B3748").ok());
  const EncodedMessage& m = encoder.message();
  EXPECT_EQ(Headers(m)["content-type"], "application/x-protobuf; messageType=outbox.v1.Event");
  ::outbox::v1::Event decoded;
  ASSERT_TRUE(decoded.ParseFromString(std::string(m.value)));
  EXPECT_EQ(decoded.id(), "0b6f3c1e-2b1a-4c55-9d2e-7f00d1c0ffee");
  EXPECT_EQ(decoded.type(), "pedido.confirmado");
  EXPECT_EQ(decoded.aggregate_id(), kAggregate);
  EXPECT_EQ(decoded.created_at(), "2026-12-02T12:22:45.123+00:00");
  EXPECT_EQ(decoded.lsn(), "0/16B3748");
  EXPECT_EQ(decoded.payload_json(), kPayload);
}

// The encoder writes the wire format itself: byte for byte what the generated code
// writes, with and without an lsn (an empty proto3 string is not written).
TEST(MessageEncoder, ProtobufBytesEqualTheGeneratedSerializer) {
  const std::string big_payload = R"({"blob": ")" + std::string(300, 'x') + R"("})";
  for (std::string_view lsn : {"0/16B3748", ""}) {
    for (std::string_view payload : {std::string_view(kPayload), std::string_view(big_payload)}) {
      MessageEncoder encoder({.format = ValueFormat::kProtobuf});
      ASSERT_TRUE(encoder.Encode(Event(payload), lsn).ok());
      ::outbox::v1::Event expected;
      expected.set_id("0b6f3c1e-2b1a-4c55-9d2e-7f00d1c0ffee");
      expected.set_type("pedido.confirmado");
      expected.set_aggregate_id(kAggregate);
      expected.set_created_at("2026-12-02T12:22:45.123+00:00");
      expected.set_lsn(std::string(lsn));
      expected.set_payload_json(std::string(payload));
      EXPECT_EQ(encoder.message().value, expected.SerializeAsString()) << lsn;
    }
  }
}

TEST(MessageEncoder, HeadersFromPointersCarryEveryScalarTypeAsJsonText) {
  struct Case {
    std::string header;
    std::string pointer;
    std::string value;
    std::string why;
  };
  const std::vector<Case> cases = {
      {"traceparent", "/trace/traceparent",
       "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
      {"n", "/n", "1"},
      {"neg", "/neg", "-5"},
      {"big", "/big", "18446744073709551615"},
      {"price", "/price", "10.50", "a decimal as written, not as a double prints"},
      {"exp", "/exp", "1e3"},
      {"yes", "/yes", "true"},
      {"no", "/no", "false"},
      {"text", "/text", "a \"q\" \\ é ✓", "strings unquoted and unescaped"},
      {"second", "/list/1", "two"},
      {"slash", "/a~1b", "slash"},
      {"tilde", "/m~0n", "tilde"}};
  std::vector<HeaderPointer> pointers;
  for (const Case& c : cases) pointers.push_back({c.header, c.pointer});
  MessageEncoder encoder({.headers = pointers});
  ASSERT_TRUE(encoder.Encode(Event(), "0/1").ok());
  auto h = Headers(encoder.message());
  for (const Case& c : cases) EXPECT_EQ(h[c.header], c.value) << c.header << ": " << c.why;
  EXPECT_EQ(h["lsn"], "0/1");
}

TEST(MessageEncoder, MissingNullAndNonScalarFieldsLeaveTheirHeaderOut) {
  MessageEncoder encoder({.format = ValueFormat::kEnvelope,
                          .headers = {{"missing", "/no/such"},
                                      {"nothing", "/nothing"},
                                      {"obj", "/obj"},
                                      {"list", "/list"},
                                      {"past_end", "/list/9"},
                                      {"through_scalar", "/n/x"},
                                      {"present", "/obj/k"}}});
  ASSERT_TRUE(encoder.Encode(Event(), "0/1").ok());
  EXPECT_THAT(HeaderNames(encoder.message()),
              ElementsAre("id", "type", "aggregate_id", "created_at", "lsn", "content-type",
                          "present"));
}

TEST(MessageEncoder, KeyFromAPayloadField) {
  MessageEncoder encoder({.key_pointer = "/obj/k"});
  ASSERT_TRUE(encoder.Encode(Event(), "0/1").ok());
  EXPECT_EQ(encoder.message().key, "v");
  EXPECT_EQ(Headers(encoder.message())["aggregate_id"], kAggregate);

  MessageEncoder numeric({.key_pointer = "/big"});
  ASSERT_TRUE(numeric.Encode(Event(), "0/1").ok());
  EXPECT_EQ(numeric.message().key, "18446744073709551615");
}

TEST(MessageEncoder, AMissingOrNonScalarKeyFieldFailsTheEventButKeepsItsHeaders) {
  for (const char* pointer : {"/no/such", "/nothing", "/obj", "/list"}) {
    MessageEncoder encoder({.format = ValueFormat::kProtobuf, .key_pointer = pointer});
    absl::Status s = encoder.Encode(Event(), "0/1");
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << pointer;
    EXPECT_THAT(s.message(), HasSubstr(std::string("--key-pointer ") + pointer));
    // What the dead letter is built from: the contract's headers, the payload as is.
    const EncodedMessage& m = encoder.message();
    EXPECT_EQ(m.key, kAggregate);
    EXPECT_EQ(m.value, kPayload);
    EXPECT_EQ(Headers(m)["id"], "0b6f3c1e-2b1a-4c55-9d2e-7f00d1c0ffee");
  }
}

TEST(MessageEncoder, APoisonPayloadFailsWithTheCheckersReason) {
  MessageEncoder encoder({.format = ValueFormat::kEnvelope});
  absl::Status scalar = encoder.Encode(Event("42"), "0/1");
  EXPECT_THAT(scalar.message(), HasSubstr("scalar"));
  EXPECT_EQ(encoder.message().value, "42");
  absl::Status broken = encoder.Encode(Event("{\"a\":"), "0/1");
  EXPECT_THAT(broken.message(), HasSubstr("not valid JSON"));
}

// The headers column's keys and values, after outboxd's own headers and before the
// --header ones, in every format.
TEST(MessageEncoder, TheRowsHeadersBecomeHeadersInEveryFormat) {
  for (ValueFormat format : {ValueFormat::kJson, ValueFormat::kEnvelope, ValueFormat::kProtobuf}) {
    MessageEncoder encoder({.format = format, .headers = {{"n", "/n"}}});
    OutboxEvent event = Event();
    event.headers = R"({"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",)"
                    R"( "tracestate": "a=\"b\""})";
    ASSERT_TRUE(encoder.Encode(event, "0/1").ok()) << ValueFormatName(format);
    std::vector<std::string> names = HeaderNames(encoder.message());
    ASSERT_GE(names.size(), 3u);
    EXPECT_THAT(std::vector<std::string>(names.end() - 3, names.end()),
                ElementsAre("traceparent", "tracestate", "n"));
    auto h = Headers(encoder.message());
    EXPECT_EQ(h["traceparent"], "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
    EXPECT_EQ(h["tracestate"], "a=\"b\"") << "unescaped";
  }
}

// A row that names a header a --header also gives (in any case): one header of that
// name, the row's value, never two.
TEST(MessageEncoder, ARowsHeaderStandsOverAHeaderFlagOfTheSameName) {
  MessageEncoder encoder({.headers = {{"Tenant", "/n"}, {"other", "/n"}}});
  OutboxEvent event = Event(R"({"n": "from-payload"})");
  event.headers = R"({"tenant": "from-row"})";
  ASSERT_TRUE(encoder.Encode(event, "0/1").ok());
  std::vector<std::string> names = HeaderNames(encoder.message());
  EXPECT_EQ(std::count_if(names.begin(), names.end(),
                          [](const std::string& n) { return absl::EqualsIgnoreCase(n, "tenant"); }),
            1);
  auto h = Headers(encoder.message());
  EXPECT_EQ(h["tenant"], "from-row");
  EXPECT_EQ(h["other"], "from-payload");
  event.headers = "";  // no row headers: the flag's value
  ASSERT_TRUE(encoder.Encode(event, "0/2").ok());
  EXPECT_EQ(Headers(encoder.message())["Tenant"], "from-payload");
}

// W3C Trace Context (outbox/trace_context.h): a malformed traceparent, from the row or
// a --header, is left out and said in dropped(); the event is still encoded. A
// tracestate beside no valid traceparent goes too.
TEST(MessageEncoder, AMalformedTraceContextIsDroppedAndTheEventStillEncoded) {
  constexpr char kParent[] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  MessageEncoder encoder({.headers = {{"traceparent", "/tp"}}});
  const std::string payload = absl::StrCat(R"({"tp": ")", kParent, R"("})");
  OutboxEvent event = Event(payload);
  event.headers = R"({"tracestate": "congo=t61rcWkgMzE", "k": "v"})";
  ASSERT_TRUE(encoder.Encode(event, "0/1").ok());
  EXPECT_TRUE(encoder.dropped().empty());
  EXPECT_EQ(Headers(encoder.message())["traceparent"], kParent);
  EXPECT_EQ(Headers(encoder.message())["tracestate"], "congo=t61rcWkgMzE");

  event.headers = R"({"TraceParent": "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
                      "tracestate": "congo=t61rcWkgMzE", "k": "v"})";
  ASSERT_TRUE(encoder.Encode(event, "0/2").ok());
  ASSERT_EQ(encoder.dropped().size(), 2u);
  EXPECT_EQ(encoder.dropped()[0].name, "traceparent");
  EXPECT_EQ(encoder.dropped()[0].reason, "zero_trace_id");
  EXPECT_EQ(encoder.dropped()[1].name, "tracestate");
  EXPECT_EQ(encoder.dropped()[1].reason, "without_valid_traceparent");
  auto h = Headers(encoder.message());
  EXPECT_FALSE(h.contains("TraceParent") || h.contains("traceparent") || h.contains("tracestate"))
      << "the row's value stands over the flag's, and is dropped";
  EXPECT_EQ(h["k"], "v");

  event.headers = R"({"tracestate": "Bad Key=1"})";
  ASSERT_TRUE(encoder.Encode(event, "0/3").ok());
  ASSERT_EQ(encoder.dropped().size(), 1u);
  EXPECT_EQ(encoder.dropped()[0].reason, "malformed");
  EXPECT_EQ(Headers(encoder.message())["traceparent"], kParent) << "the valid one stays";
}

// Not an object of strings, or an override of an own header in any case: the event
// fails with the reason (a dead letter) and keeps outboxd's headers only.
TEST(MessageEncoder, RowHeadersThatAreNotAnObjectOfStringsOrOverrideOursFailTheEvent) {
  const std::pair<std::string, std::string> cases[] = {
      {R"(["a"])", "not a JSON object"},
      {R"("text")", "not a JSON object"},
      {R"({"ok": "1", "n": 1})", "\"n\" has a value that is not a string"},
      {R"({"x": null})", "\"x\" has a value that is not a string"},
      {R"({"ok": "1", "Type": "forged"})", "\"Type\" is one of outboxd's own headers"},
      {R"({"NATS-MSG-ID": "dup"})", "\"NATS-MSG-ID\" is one of outboxd's own headers"},
  };
  MessageEncoder encoder;
  for (const auto& [json, why] : cases) {
    OutboxEvent event = Event();
    event.headers = json;
    absl::Status s = encoder.Encode(event, "0/1");
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << json;
    EXPECT_THAT(std::string(s.message()), HasSubstr(why)) << json;
    EXPECT_THAT(HeaderNames(encoder.message()),
                ElementsAre("id", "type", "aggregate_id", "created_at", "lsn"))
        << json;
  }
}

TEST(MessageEncoder, ReusedBuffersHoldOnlyTheLastEvent) {
  MessageEncoder encoder({.format = ValueFormat::kEnvelope, .headers = {{"t", "/text"}}});
  ASSERT_TRUE(encoder.Encode(Event(), "0/1").ok());
  const std::string big(encoder.message().value);
  ASSERT_TRUE(encoder.Encode(Event(R"({"text": "x"})"), "").ok());
  EXPECT_LT(encoder.message().value.size(), big.size());
  EXPECT_THAT(std::string(encoder.message().value), ::testing::EndsWith(R"("payload":{"text": "x"}})"));
  EXPECT_EQ(Headers(encoder.message())["t"], "x");
}

// CloudEvents binary mode (docs/tracing.md): the payload is the value, outboxd's own
// headers stay (the inbox and --dedupe read them), and the attributes follow under the
// binding's prefix; a valid trace context is copied, a row's header under the prefix is
// dropped (it would stand beside outboxd's own attribute).
TEST(MessageEncoder, CloudEventsBinaryModePutsTheAttributesInPrefixedHeaders) {
  MessageEncoder encoder({.format = ValueFormat::kCloudEvents,
                          .ce_source = "/outboxd/app/outbox",
                          .ce_prefix = "ce_"});
  OutboxEvent event = Event();
  const std::string row =
      R"({"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", )"
      R"("ce_source": "/forged"})";
  event.headers = row;
  ASSERT_TRUE(encoder.Encode(event, "0/16B3748").ok());
  const EncodedMessage& m = encoder.message();
  EXPECT_EQ(m.value, kPayload);
  auto h = Headers(m);
  EXPECT_EQ(h["content-type"], "application/json");
  EXPECT_EQ(h["id"], event.id);
  EXPECT_EQ(h["ce_specversion"], "1.0");
  EXPECT_EQ(h["ce_id"], event.id);
  EXPECT_EQ(h["ce_source"], "/outboxd/app/outbox");
  EXPECT_EQ(h["ce_type"], "pedido.confirmado");
  EXPECT_EQ(h["ce_subject"], kAggregate);
  EXPECT_EQ(h["ce_time"], "2026-12-02T12:22:45.123+00:00");
  EXPECT_EQ(h["ce_partitionkey"], kAggregate);
  EXPECT_EQ(h["ce_traceparent"], "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  EXPECT_FALSE(h.contains("ce_tracestate")) << "none given: none sent";
  ASSERT_EQ(encoder.dropped().size(), 1u);
  EXPECT_EQ(encoder.dropped()[0].reason, "cloudevents_attribute");
  MessageEncoder amqp({.format = ValueFormat::kCloudEvents, .ce_prefix = "cloudEvents_"});
  ASSERT_TRUE(amqp.Encode(Event(), "").ok());
  EXPECT_EQ(Headers(amqp.message())["cloudEvents_specversion"], "1.0");
}

// Structured mode: one JSON object, the attributes escaped, the payload as "data" as
// written (numbers as they were), content-type application/cloudevents+json.
TEST(MessageEncoder, CloudEventsStructuredModeIsOneJsonEventWithTheData) {
  MessageEncoder encoder({.format = ValueFormat::kCloudEventsJson, .ce_source = "/s"});
  ASSERT_TRUE(encoder.Encode(Event(), "0/16B3748").ok());
  EXPECT_EQ(Headers(encoder.message())["content-type"], "application/cloudevents+json");
  simdjson::dom::parser parser;
  simdjson::dom::element e;
  ASSERT_FALSE(parser.parse(std::string(encoder.message().value)).get(e))
      << encoder.message().value;
  std::string_view v;
  EXPECT_FALSE(e["subject"].get_string().get(v));
  EXPECT_EQ(v, kAggregate);
  EXPECT_FALSE(e["specversion"].get_string().get(v));
  EXPECT_EQ(v, "1.0");
  EXPECT_FALSE(e["source"].get_string().get(v));
  EXPECT_EQ(v, "/s");
  EXPECT_FALSE(e["datacontenttype"].get_string().get(v));
  EXPECT_EQ(v, "application/json");
  EXPECT_THAT(std::string(encoder.message().value), HasSubstr(R"("price": 10.50)"));
}

TEST(MessageEncoder, PayloadOfUndoesEveryFormat) {
  for (ValueFormat format : {ValueFormat::kJson, ValueFormat::kEnvelope, ValueFormat::kProtobuf,
                             ValueFormat::kCloudEvents, ValueFormat::kCloudEventsJson}) {
    for (std::string_view lsn : {"0/16B3748", ""}) {
      MessageEncoder encoder({.format = format});
      ASSERT_TRUE(encoder.Encode(Event(), lsn).ok());
      const std::string value(encoder.message().value);
      std::vector<sink::Header> headers(encoder.message().headers.begin(),
                                         encoder.message().headers.end());
      absl::StatusOr<std::string_view> payload = encoder.PayloadOf(value, headers);
      ASSERT_TRUE(payload.ok()) << ValueFormatName(format) << ": " << payload.status();
      EXPECT_EQ(*payload, kPayload) << ValueFormatName(format);
    }
  }
  MessageEncoder envelope({.format = ValueFormat::kEnvelope});
  EXPECT_FALSE(envelope.PayloadOf(R"({"id":"other","payload":{}})", {}).ok());
  MessageEncoder protobuf({.format = ValueFormat::kProtobuf});
  EXPECT_FALSE(protobuf.PayloadOf("\xff\xff\xff", {}).ok());
}

// What a failed delivery's dead letter keeps of its headers (issue 32): the row's (and
// --header's), not outboxd's own nor the CloudEvents attributes, which replay makes
// again; none: "".
TEST(MessageEncoder, RowHeadersOfIsWhatTheRowAddedInEveryFormat) {
  for (ValueFormat format : {ValueFormat::kJson, ValueFormat::kEnvelope, ValueFormat::kCloudEvents,
                             ValueFormat::kCloudEventsJson}) {
    MessageEncoder encoder({.format = format, .ce_prefix = "ce_"});
    encoder.SetSlotMark("app/slot");
    OutboxEvent event = Event();
    event.headers = R"({"tenant": "a\"b", "traceparent": )"
                    R"("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"})";
    ASSERT_TRUE(encoder.Encode(event, "0/16B3748").ok());
    EXPECT_EQ(encoder.RowHeadersOf(encoder.message().headers),
              R"({"tenant":"a\"b","traceparent":)"
              R"("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"})")
        << ValueFormatName(format);
    ASSERT_TRUE(encoder.Encode(Event(), "0/16B3748").ok());
    EXPECT_EQ(encoder.RowHeadersOf(encoder.message().headers), "") << ValueFormatName(format);
  }
}

TEST(MessageFormatFlags, FormatsHeadersAndPointersAreChecked) {
  EXPECT_EQ(*ParseValueFormat("protobuf"), ValueFormat::kProtobuf);
  EXPECT_THAT(ParseValueFormat("xml").status().message(),
              HasSubstr("expected json (the payload), envelope, protobuf, cloudevents or "
                        "cloudevents-json"));
  absl::StatusOr<HeaderPointer> h = ParseHeaderPointer("traceparent=/trace/traceparent");
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->name, "traceparent");
  EXPECT_EQ(h->pointer, "/trace/traceparent");
  EXPECT_THAT(ParseHeaderPointer("traceparent").status().message(),
              HasSubstr("expected NAME=/json/pointer"));
  EXPECT_THAT(ParseHeaderPointer("=/a").status().message(), HasSubstr("NAME=/json/pointer"));
  EXPECT_THAT(ParseHeaderPointer("id=/a").status().message(), HasSubstr("outboxd's own headers"));
  // In any case, and the NATS sink's own one too.
  for (const char* flag : {"Id=/a", "CONTENT-TYPE=/a", "Nats-Msg-Id=/a", "OUTBOXD_SLOT=/a"}) {
    EXPECT_THAT(ParseHeaderPointer(flag).status().message(), HasSubstr("outboxd's own headers"))
        << flag;
  }
  EXPECT_THAT(ParseHeaderPointer("t=trace").status().message(), HasSubstr("must start with /"));
  EXPECT_TRUE(CheckJsonPointer("/a~0b/~1c/0").ok());
  EXPECT_FALSE(CheckJsonPointer("/a~2").ok());
  EXPECT_FALSE(CheckJsonPointer("/a~").ok());
  EXPECT_FALSE(CheckJsonPointer("").ok());
}

}  // namespace
}  // namespace outboxd::outbox
