// Decoder tests on messages captured from a real PostgreSQL 15 server
// (captured_messages.h), on every truncation of them, on hand-made garbage, and on a
// deterministic stream of random bytes.
#include "pgoutput/decoder.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pgoutput/captured_messages.h"

namespace outboxd::pgoutput {
namespace {

using ::outboxd::pgoutput::testing::FromHex;
using ::outboxd::pgoutput::testing::kAllCapturedMessages;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// Relation and type OIDs of the capture (see captured_messages.h).
constexpr uint32_t kOutboxOid = 16385;
constexpr uint32_t kPedidoStatusOid = 16400;
constexpr uint32_t kPedidoOid = 16407;
constexpr uint32_t kClienteOid = 16412;

// Built-in type OIDs (pg_type.dat).
constexpr uint32_t kInt4Oid = 23;
constexpr uint32_t kInt8Oid = 20;
constexpr uint32_t kTextOid = 25;
constexpr uint32_t kNumericOid = 1700;
constexpr uint32_t kTimestamptzOid = 1184;
constexpr uint32_t kUuidOid = 2950;
constexpr uint32_t kJsonbOid = 3802;

// Decodes `bytes` (which must outlive the result: messages view into it) and returns
// the T alternative, failing the test if decoding fails or yields another type.
template <typename T>
T DecodeAs(const std::string& bytes) {
  absl::StatusOr<Message> message = Decode(bytes);
  EXPECT_TRUE(message.ok()) << message.status();
  if (!message.ok()) return T{};
  const T* typed = std::get_if<T>(&*message);
  EXPECT_NE(typed, nullptr) << "decoded to variant index " << message->index();
  return typed == nullptr ? T{} : *typed;
}

// "t:<text>", "b:<hex>", "n" or "u" per value, so a tuple compares in one line.
std::vector<std::string> Render(const Tuple& tuple) {
  std::vector<std::string> out;
  for (const TupleValue& value : tuple) {
    const absl::string_view data(value.data.data(), value.data.size());
    switch (value.kind) {
      case ValueKind::kNull:
        out.push_back("n");
        break;
      case ValueKind::kUnchangedToast:
        out.push_back("u");
        break;
      case ValueKind::kText:
        out.push_back(absl::StrCat("t:", data));
        break;
      case ValueKind::kBinary:
        out.push_back(absl::StrCat("b:", absl::BytesToHexString(data)));
        break;
    }
  }
  return out;
}

struct ExpectedColumn {
  uint8_t flags;
  std::string_view name;
  uint32_t type_oid;
  int32_t type_modifier;
};

void ExpectColumns(const Relation& relation, const std::vector<ExpectedColumn>& expected) {
  ASSERT_EQ(relation.columns.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    SCOPED_TRACE(absl::StrCat("column ", i));
    EXPECT_EQ(relation.columns[i].flags, expected[i].flags);
    EXPECT_EQ(relation.columns[i].name, expected[i].name);
    EXPECT_EQ(relation.columns[i].type_oid, expected[i].type_oid);
    EXPECT_EQ(relation.columns[i].type_modifier, expected[i].type_modifier);
  }
}

const std::vector<ExpectedColumn> kOutboxColumns = {
    {1, "seq", kInt8Oid, -1},
    {0, "id", kUuidOid, -1},
    {0, "aggregate_id", kTextOid, -1},
    {0, "tipo", kTextOid, -1},
    {0, "payload", kJsonbOid, -1},
    {0, "criado_em", kTimestamptzOid, -1},
    {0, "publicado_em", kTimestamptzOid, -1},
    {0, "tentativas", kInt4Oid, -1},
    {0, "ultimo_erro", kTextOid, -1},
    {0, "proxima_tentativa_em", kTimestamptzOid, -1},
};

// ---------------------------------------------------------------------------------
// Captured messages, field by field.

TEST(PgoutputDecoder, DecodesBeginCapturedFromServer) {
  const std::string bytes = FromHex(testing::kBeginSingleInsert);
  const Begin begin = DecodeAs<Begin>(bytes);
  EXPECT_EQ(begin.final_lsn, 0x153C858u);
  EXPECT_EQ(begin.commit_time, 849529717010261);  // 2026-12-02 12:28:37.010261 UTC
  EXPECT_EQ(begin.xid, 734u);
}

TEST(PgoutputDecoder, DecodesCommitCapturedFromServer) {
  const std::string bytes = FromHex(testing::kCommitSingleInsert);
  const Commit commit = DecodeAs<Commit>(bytes);
  EXPECT_EQ(commit.flags, 0);
  EXPECT_EQ(commit.commit_lsn, 0x153C858u);  // the Begin's final LSN
  EXPECT_EQ(commit.end_lsn, 0x153C888u);     // what the slot reported for this row
  EXPECT_EQ(commit.commit_time, 849529717010261);
}

TEST(PgoutputDecoder, DecodesRelationCapturedFromServer) {
  const std::string bytes = FromHex(testing::kRelationOutbox);
  const Relation relation = DecodeAs<Relation>(bytes);
  EXPECT_EQ(relation.id, kOutboxOid);
  EXPECT_EQ(relation.nspname, "public");
  EXPECT_EQ(relation.relname, "outbox");
  EXPECT_EQ(relation.replica_identity, 'd');
  ExpectColumns(relation, kOutboxColumns);
}

TEST(PgoutputDecoder, DecodesInsertCapturedFromServer) {
  const std::string bytes = FromHex(testing::kInsertOutbox);
  const Insert insert = DecodeAs<Insert>(bytes);
  EXPECT_EQ(insert.relation_id, kOutboxOid);
  EXPECT_THAT(Render(insert.tuple),
              ElementsAre("t:1", "t:132677f9-c0e7-4b54-94b3-6d69ab833bef", "t:pedido-42",
                          "t:pedido.confirmado", R"(t:{"total": 99.9, "pedido": 42})",
                          "t:2026-12-02 12:28:37.006109+00", "n", "t:0", "n",
                          "t:2026-12-02 12:28:37.006109+00"));
}

TEST(PgoutputDecoder, DecodesBinaryInsertCapturedFromServer) {
  const std::string bytes = FromHex(testing::kInsertOutboxBinary);
  const Insert insert = DecodeAs<Insert>(bytes);
  EXPECT_EQ(insert.relation_id, kOutboxOid);
  // Values in each type's send format: int8 big-endian, uuid as 16 bytes, jsonb with
  // its version byte 1, timestamptz as microseconds since 2000.
  EXPECT_THAT(Render(insert.tuple),
              ElementsAre("b:0000000000000001", "b:132677f9c0e74b5494b36d69ab833bef",
                          "b:70656469646f2d3432", "b:70656469646f2e636f6e6669726d61646f",
                          "b:017b22746f74616c223a2039392e392c202270656469646f223a2034327d",
                          "b:000304a48d021f1d", "n", "b:00000000", "n", "b:000304a48d021f1d"));
}

TEST(PgoutputDecoder, DecodesMultiRowInsertAsOneTransaction) {
  // Three rows of one statement share a transaction: one Begin, three Inserts, one
  // Commit (the "rows sharing one LSN" trap: positions must be tracked per transaction).
  const std::string begin_bytes = FromHex(testing::kBeginMultiInsert);
  const std::string commit_bytes = FromHex(testing::kCommitMultiInsert);
  const Begin begin = DecodeAs<Begin>(begin_bytes);
  const Commit commit = DecodeAs<Commit>(commit_bytes);
  EXPECT_EQ(begin.xid, 735u);
  EXPECT_EQ(begin.final_lsn, 0x153CCA8u);
  EXPECT_EQ(commit.commit_lsn, 0x153CCA8u);
  EXPECT_EQ(commit.end_lsn, 0x153CCD8u);

  struct Row {
    std::string_view hex;
    std::string_view seq, id, aggregate_id, tipo, payload;
  };
  const Row rows[] = {
      {testing::kInsertOutboxMulti1, "t:2", "t:9411dfe6-9469-428e-a893-87858a998975", "t:a-1",
       "t:t.x", R"(t:{"n": 1})"},
      {testing::kInsertOutboxMulti2, "t:3", "t:df73a2c0-9479-41e2-abda-5143898ededc", "t:a-2",
       "t:t.x", R"(t:{"n": 2})"},
      {testing::kInsertOutboxMulti3, "t:4", "t:2322608a-0648-4010-a79d-11b159966885", "t:a-1",
       "t:t.y", R"(t:{"n": 3})"},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(row.seq);
    const std::string bytes = FromHex(row.hex);
    const Insert insert = DecodeAs<Insert>(bytes);
    EXPECT_EQ(insert.relation_id, kOutboxOid);
    EXPECT_THAT(Render(insert.tuple),
                ElementsAre(row.seq, row.id, row.aggregate_id, row.tipo, row.payload,
                            "t:2026-12-02 12:28:37.010915+00", "n", "t:0", "n",
                            "t:2026-12-02 12:28:37.010915+00"));
  }
}

TEST(PgoutputDecoder, DecodesTypeCapturedFromServer) {
  const std::string bytes = FromHex(testing::kTypePedidoStatus);
  const Type type = DecodeAs<Type>(bytes);
  EXPECT_EQ(type.id, kPedidoStatusOid);
  EXPECT_EQ(type.nspname, "public");
  EXPECT_EQ(type.name, "pedido_status");
}

TEST(PgoutputDecoder, DecodesRelationWithFullIdentityAndTypeModifier) {
  const std::string bytes = FromHex(testing::kRelationPedido);
  const Relation relation = DecodeAs<Relation>(bytes);
  EXPECT_EQ(relation.id, kPedidoOid);
  EXPECT_EQ(relation.nspname, "public");
  EXPECT_EQ(relation.relname, "pedido");
  EXPECT_EQ(relation.replica_identity, 'f');
  // REPLICA IDENTITY FULL flags every column as key; numeric(10,2) has typmod
  // ((10 << 16) | 2) + VARHDRSZ.
  ExpectColumns(relation, {{1, "id", kInt4Oid, -1},
                           {1, "status", kPedidoStatusOid, -1},
                           {1, "total", kNumericOid, (10 << 16 | 2) + 4}});
}

TEST(PgoutputDecoder, DecodesInsertWithEnumValue) {
  const std::string bytes = FromHex(testing::kInsertPedido);
  const Insert insert = DecodeAs<Insert>(bytes);
  EXPECT_EQ(insert.relation_id, kPedidoOid);
  EXPECT_THAT(Render(insert.tuple), ElementsAre("t:7", "t:novo", "t:10.50"));
}

TEST(PgoutputDecoder, DecodesUpdateWithOldRowUnderFullIdentity) {
  const std::string bytes = FromHex(testing::kUpdatePedidoOldRow);
  const Update update = DecodeAs<Update>(bytes);
  EXPECT_EQ(update.relation_id, kPedidoOid);
  EXPECT_EQ(update.old_kind, 'O');
  EXPECT_THAT(Render(update.old_tuple), ElementsAre("t:7", "t:novo", "t:10.50"));
  EXPECT_THAT(Render(update.new_tuple), ElementsAre("t:7", "t:pago", "t:10.50"));
}

TEST(PgoutputDecoder, DecodesDeleteWithOldRowUnderFullIdentity) {
  const std::string bytes = FromHex(testing::kDeletePedidoOldRow);
  const Delete del = DecodeAs<Delete>(bytes);
  EXPECT_EQ(del.relation_id, kPedidoOid);
  EXPECT_EQ(del.old_kind, 'O');
  EXPECT_THAT(Render(del.old_tuple), ElementsAre("t:7", "t:pago", "t:10.50"));
}

TEST(PgoutputDecoder, DecodesUpdateWithoutOldTupleAndUnchangedToast) {
  const std::string bytes = FromHex(testing::kUpdateClienteUnchangedToast);
  const Update update = DecodeAs<Update>(bytes);
  EXPECT_EQ(update.relation_id, kClienteOid);
  EXPECT_EQ(update.old_kind, 0);  // default identity, key unchanged: no old tuple
  EXPECT_THAT(update.old_tuple, IsEmpty());
  // notas is stored out of line and was not updated: 'u', its value is not sent.
  EXPECT_THAT(Render(update.new_tuple), ElementsAre("t:1", "t:Ana Maria", "u"));
}

TEST(PgoutputDecoder, DecodesUpdateWithOldKey) {
  const std::string bytes = FromHex(testing::kUpdateClienteOldKey);
  const Update update = DecodeAs<Update>(bytes);
  EXPECT_EQ(update.relation_id, kClienteOid);
  EXPECT_EQ(update.old_kind, 'K');
  // The key tuple has every column; those outside the key are sent as NULL.
  EXPECT_THAT(Render(update.old_tuple), ElementsAre("t:1", "n", "n"));
  EXPECT_THAT(Render(update.new_tuple), ElementsAre("t:2", "t:Ana Maria", "u"));
}

TEST(PgoutputDecoder, DecodesDeleteWithOldKey) {
  const std::string bytes = FromHex(testing::kDeleteClienteOldKey);
  const Delete del = DecodeAs<Delete>(bytes);
  EXPECT_EQ(del.relation_id, kClienteOid);
  EXPECT_EQ(del.old_kind, 'K');
  EXPECT_THAT(Render(del.old_tuple), ElementsAre("t:2", "n", "n"));
}

TEST(PgoutputDecoder, DecodesTruncateOfTwoRelations) {
  const std::string bytes = FromHex(testing::kTruncate);
  const Truncate truncate = DecodeAs<Truncate>(bytes);
  EXPECT_EQ(truncate.options, 2);  // RESTART IDENTITY, no CASCADE
  EXPECT_THAT(truncate.relation_ids, ElementsAre(kPedidoOid, kClienteOid));
}

TEST(PgoutputDecoder, DecodesTransactionalLogicalMessage) {
  const std::string bytes = FromHex(testing::kLogicalMessageTransactional);
  const LogicalMessage message = DecodeAs<LogicalMessage>(bytes);
  EXPECT_EQ(message.flags, 1);
  EXPECT_EQ(message.lsn, 0x153E598u);
  EXPECT_EQ(message.prefix, "prefix");
  EXPECT_EQ(message.content, "content");
}

TEST(PgoutputDecoder, DecodesNonTransactionalLogicalMessage) {
  const std::string bytes = FromHex(testing::kLogicalMessageNonTransactional);
  const LogicalMessage message = DecodeAs<LogicalMessage>(bytes);
  EXPECT_EQ(message.flags, 0);
  EXPECT_EQ(message.lsn, 0x153E618u);
  EXPECT_EQ(message.prefix, "outboxd");
  EXPECT_EQ(message.content, "non-transactional");
}

// outboxd_emit's content (src/outbox/emitted_event.h) separates its fields with NUL
// bytes: the content is counted bytes, never cut at a NUL as the prefix is.
TEST(PgoutputDecoder, DecodesLogicalMessageContentWithNulBytesWhole) {
  const std::string bytes = FromHex(testing::kLogicalMessageOutboxdEvent);
  const LogicalMessage message = DecodeAs<LogicalMessage>(bytes);
  EXPECT_EQ(message.flags, 1);
  EXPECT_EQ(message.prefix, "outboxd");
  EXPECT_EQ(message.content.substr(0, 11), std::string_view("outboxd-v1\0", 11));
  EXPECT_EQ(std::count(message.content.begin(), message.content.end(), '\0'), 5);
  EXPECT_EQ(message.content.substr(message.content.rfind('\0') + 1), R"({"totalCentavos": 1000})");
}

TEST(PgoutputDecoder, DecodesOriginTransaction) {
  const std::string begin_bytes = FromHex(testing::kBeginWithOrigin);
  const std::string origin_bytes = FromHex(testing::kOriginUpstream);
  const std::string commit_bytes = FromHex(testing::kCommitWithOrigin);
  const Begin begin = DecodeAs<Begin>(begin_bytes);
  const Origin origin = DecodeAs<Origin>(origin_bytes);
  const Commit commit = DecodeAs<Commit>(commit_bytes);
  EXPECT_EQ(begin.xid, 746u);
  EXPECT_EQ(origin.commit_lsn, 0xABCDEFu);  // pg_replication_origin_xact_setup('0/ABCDEF')
  EXPECT_EQ(origin.name, "upstream");
  // The transaction carries the origin's commit timestamp, not the local clock:
  // 2024-01-02 03:04:05 UTC.
  EXPECT_EQ(begin.commit_time, 757479845000000);
  EXPECT_EQ(commit.commit_time, 757479845000000);
  EXPECT_EQ(commit.commit_lsn, 0x153EC78u);
  EXPECT_EQ(commit.end_lsn, 0x153ECC0u);
}

TEST(PgoutputDecoder, DecodesRelationAndInsertAfterAlterTable) {
  const std::string relation_bytes = FromHex(testing::kRelationOutboxAltered);
  const std::string insert_bytes = FromHex(testing::kInsertOutboxAltered);
  const Relation relation = DecodeAs<Relation>(relation_bytes);
  EXPECT_EQ(relation.id, kOutboxOid);
  std::vector<ExpectedColumn> columns = kOutboxColumns;
  columns.push_back({0, "trace_id", kTextOid, -1});
  ExpectColumns(relation, columns);

  const Insert insert = DecodeAs<Insert>(insert_bytes);
  EXPECT_THAT(Render(insert.tuple),
              ElementsAre("t:5", "t:8a6ef2b9-b1d7-4d3b-9e81-65595d5cfa25", "t:pedido-43",
                          "t:pedido.pago", "t:{}", "t:2026-12-02 12:28:37.026221+00", "n", "t:0",
                          "n", "t:2026-12-02 12:28:37.026221+00", "t:trace-1"));
}

TEST(PgoutputDecoder, EveryCommitMatchesTheBeginBeforeIt) {
  // Walks the whole captured stream (minus the binary re-peek) as the relay would.
  std::vector<std::string> storage;
  const Begin* open = nullptr;
  Begin last_begin;
  int transactions = 0;
  for (const auto& captured : kAllCapturedMessages) {
    if (captured.name == "InsertOutboxBinary") continue;
    SCOPED_TRACE(captured.name);
    storage.push_back(FromHex(captured.hex));
    absl::StatusOr<Message> message = Decode(storage.back());
    ASSERT_TRUE(message.ok()) << message.status();
    if (const auto* begin = std::get_if<Begin>(&*message)) {
      EXPECT_EQ(open, nullptr) << "Begin inside a transaction";
      last_begin = *begin;
      open = &last_begin;
    } else if (const auto* commit = std::get_if<Commit>(&*message)) {
      ASSERT_NE(open, nullptr) << "Commit outside a transaction";
      EXPECT_EQ(commit->commit_lsn, open->final_lsn);
      EXPECT_GT(commit->end_lsn, commit->commit_lsn);
      EXPECT_EQ(commit->commit_time, open->commit_time);
      open = nullptr;
      ++transactions;
    } else if (const auto* logical = std::get_if<LogicalMessage>(&*message)) {
      EXPECT_EQ(open != nullptr, (logical->flags & 1) != 0) << "transactional flag";
    } else {
      EXPECT_NE(open, nullptr) << "change outside a transaction";
    }
  }
  EXPECT_EQ(open, nullptr);
  EXPECT_EQ(transactions, 13);
}

// ---------------------------------------------------------------------------------
// DecodeInto reuse.

TEST(PgoutputDecoder, DecodeIntoReusedMessageMatchesDecode) {
  // Alternate message types through one Message so every alternative is entered both
  // fresh and reused; the result must not keep anything from the previous message.
  Message reused;
  std::vector<std::string> storage;
  for (int round = 0; round < 2; ++round) {
    for (const auto& captured : kAllCapturedMessages) {
      SCOPED_TRACE(captured.name);
      storage.push_back(FromHex(captured.hex));
      ASSERT_TRUE(DecodeInto(storage.back(), reused).ok());
      absl::StatusOr<Message> fresh = Decode(storage.back());
      ASSERT_TRUE(fresh.ok());
      ASSERT_EQ(reused.index(), fresh->index());
      if (const auto* insert = std::get_if<Insert>(&reused)) {
        EXPECT_EQ(Render(insert->tuple), Render(std::get<Insert>(*fresh).tuple));
      } else if (const auto* update = std::get_if<Update>(&reused)) {
        const Update& want = std::get<Update>(*fresh);
        EXPECT_EQ(update->old_kind, want.old_kind);
        EXPECT_EQ(Render(update->old_tuple), Render(want.old_tuple));
        EXPECT_EQ(Render(update->new_tuple), Render(want.new_tuple));
      } else if (const auto* relation = std::get_if<Relation>(&reused)) {
        const Relation& want = std::get<Relation>(*fresh);
        EXPECT_EQ(relation->relname, want.relname);
        ASSERT_EQ(relation->columns.size(), want.columns.size());
        for (size_t i = 0; i < want.columns.size(); ++i) {
          EXPECT_EQ(relation->columns[i].name, want.columns[i].name);
        }
      } else if (const auto* truncate = std::get_if<Truncate>(&reused)) {
        EXPECT_EQ(truncate->relation_ids, std::get<Truncate>(*fresh).relation_ids);
      }
    }
  }
}

// ---------------------------------------------------------------------------------
// RelationCache.

TEST(RelationCache, SecondRelationForSameIdReplacesTheFirst) {
  // ALTER TABLE on the outbox mid-stream (docs/architecture.md trap "Unknown message types and
  // Relation changes"): the new schema must replace the cached one, or columns are
  // mis-mapped.
  const std::string before = FromHex(testing::kRelationOutbox);
  const std::string after = FromHex(testing::kRelationOutboxAltered);
  RelationCache cache;
  cache.Put(DecodeAs<Relation>(before));
  ASSERT_NE(cache.Find(kOutboxOid), nullptr);
  EXPECT_EQ(cache.Find(kOutboxOid)->columns.size(), 10u);

  cache.Put(DecodeAs<Relation>(after));
  const Relation* cached = cache.Find(kOutboxOid);
  ASSERT_NE(cached, nullptr);
  ASSERT_EQ(cached->columns.size(), 11u);
  EXPECT_EQ(cached->columns[10].name, "trace_id");
}

TEST(RelationCache, KeepsRelationsApartAndOutlivesTheInput) {
  RelationCache cache;
  for (std::string_view hex :
       {testing::kRelationOutbox, testing::kRelationPedido, testing::kRelationCliente}) {
    std::string bytes = FromHex(hex);
    cache.Put(DecodeAs<Relation>(bytes));
    bytes.assign(bytes.size(), '\xff');  // the cache owns its strings
  }
  ASSERT_NE(cache.Find(kPedidoOid), nullptr);
  EXPECT_EQ(cache.Find(kPedidoOid)->relname, "pedido");
  EXPECT_EQ(cache.Find(kPedidoOid)->columns[1].name, "status");
  ASSERT_NE(cache.Find(kClienteOid), nullptr);
  EXPECT_EQ(cache.Find(kClienteOid)->replica_identity, 'd');
  ASSERT_NE(cache.Find(kOutboxOid), nullptr);
  EXPECT_EQ(cache.Find(kOutboxOid)->columns[4].name, "payload");
  EXPECT_EQ(cache.Find(12345), nullptr);
}

// ---------------------------------------------------------------------------------
// Malformed input.

TEST(PgoutputDecoder, RejectsEveryStrictPrefixOfEveryCapturedMessage) {
  Message reused;
  for (const auto& captured : kAllCapturedMessages) {
    const std::string bytes = FromHex(captured.hex);
    for (size_t length = 0; length < bytes.size(); ++length) {
      SCOPED_TRACE(absl::StrCat(std::string(captured.name), " truncated to ", length, " bytes"));
      // A copy of exactly `length` bytes, so AddressSanitizer would catch a read past it.
      const std::string prefix = bytes.substr(0, length);
      absl::StatusOr<Message> decoded = Decode(prefix);
      ASSERT_FALSE(decoded.ok());
      EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_FALSE(DecodeInto(prefix, reused).ok());
    }
  }
}

TEST(PgoutputDecoder, RejectsTrailingBytesAfterEveryCapturedMessage) {
  for (const auto& captured : kAllCapturedMessages) {
    SCOPED_TRACE(captured.name);
    const std::string bytes = absl::StrCat(FromHex(captured.hex), std::string(1, '\0'));
    absl::StatusOr<Message> decoded = Decode(bytes);
    ASSERT_FALSE(decoded.ok());
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(decoded.status().message()), HasSubstr("1 trailing bytes"));
  }
}

struct GarbageCase {
  std::string_view name;
  std::string_view hex;
  std::string_view error;  // a substring of the expected message
};

// Hand-made malformed messages, hex with spaces between fields.
const GarbageCase kGarbageCases[] = {
    {"empty input", "", "empty message"},
    {"unknown type byte", "53 00000001", "unknown message type 0x53 ('S')"},
    {"NUL type byte", "00", "unknown message type 0x00"},
    {"streaming abort (protocol 2)", "41 00000001 00000002", "unknown message type 0x41 ('A')"},
    {"Begin one byte short", "42 0000000000000001 0000000000000002 000000", "truncated xid"},
    {"Begin with trailing byte", "42 0000000000000001 0000000000000002 00000003 00",
     "pgoutput Begin message: 1 trailing bytes"},
    {"Insert with unknown tuple kind", "49 00004001 4e 0001 78",
     "unknown tuple value kind 0x78 ('x') in column 0"},
    {"Insert with kind byte 0xff", "49 00004001 4e 0002 6e ff",
     "unknown tuple value kind 0xff in column 1"},
    {"Insert without N tag", "49 00004001 4b 0001 6e", "expected tuple tag 0x4e ('N')"},
    {"Insert column count beyond input", "49 00004001 4e ffff 6e6e6e",
     "tuple column count 65535 exceeds the 3 bytes left"},
    {"Insert value length beyond input", "49 00004001 4e 0001 74 000003e8 414243",
     "pgoutput Insert message: truncated tuple value: need 1000 bytes, 3 left"},
    {"Insert value length 2^31-1", "49 00004001 4e 0001 62 7fffffff 00",
     "truncated tuple value: need 2147483647 bytes, 1 left"},
    {"Insert negative value length", "49 00004001 4e 0001 74 ffffffff 00",
     "negative length -1 in tuple column 0"},
    {"Insert missing value length", "49 00004001 4e 0001 74 0000", "truncated tuple value length"},
    {"Update with bad tag", "55 00004001 58 0001 6e", "expected tuple tag 'K', 'O' or 'N'"},
    {"Update with old key but no new tuple", "55 00004001 4b 0001 6e", "truncated tuple tag"},
    {"Update with old key then K again", "55 00004001 4b 0001 6e 4b 0001 6e", "got 0x4b ('K')"},
    {"Delete with N tag", "44 00004001 4e 0001 6e", "expected tuple tag 'K' or 'O'"},
    {"Relation column count beyond input",
     "52 00004001 7000 7400 64 ffff 01 6100 00000017 ffffffff",
     "column count 65535 exceeds the 11 bytes left"},
    {"Relation unterminated name", "52 00004001 7075626c6963 00 6f7574626f78",
     "unterminated string relation name"},
    {"Relation unknown replica identity", "52 00004001 00 00 78 0000",
     "unknown replica identity 0x78 ('x')"},
    {"Relation column missing type modifier", "52 00004001 00 00 64 0001 00 61626300 00000017 ffff",
     "truncated column type modifier"},
    {"Truncate relation count beyond input", "54 ffffffff 00 00004001",
     "relation count 4294967295 exceeds the 4 bytes left"},
    {"Truncate one OID short", "54 00000002 00 00004001 0000",
     "relation count 2 exceeds the 6 bytes left"},
    {"Message content length beyond input", "4d 01 0000000000000001 7000 00000010 41",
     "truncated content: need 16 bytes, 1 left"},
    {"Message negative content length", "4d 01 0000000000000001 7000 80000000",
     "negative content length"},
    {"Message unterminated prefix", "4d 01 0000000000000001 707265666978",
     "unterminated string prefix"},
    {"Origin unterminated name", "4f 0000000000abcdef 7570", "unterminated string origin name"},
    {"Type missing name", "59 00004010 7075626c696300", "unterminated string type name"},
    {"Commit truncated end LSN", "43 00 0000000000000001 00000000", "truncated end LSN"},
};

TEST(PgoutputDecoder, RejectsGarbageWithAShortDescription) {
  for (const GarbageCase& garbage : kGarbageCases) {
    SCOPED_TRACE(garbage.name);
    std::string hex(garbage.hex);
    hex.erase(std::remove(hex.begin(), hex.end(), ' '), hex.end());
    const std::string bytes = FromHex(hex);
    absl::StatusOr<Message> decoded = Decode(bytes);
    ASSERT_FALSE(decoded.ok());
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(decoded.status().message()), HasSubstr(garbage.error));
  }
}

TEST(PgoutputDecoder, AcceptsEmptyTuplesAndZeroLengthValues) {
  // Edge cases that are valid: a relation with no columns, an empty text value, a
  // truncate of zero relations, an empty logical message.
  struct ValidCase {
    std::string_view name;
    std::string_view hex;
  };
  const ValidCase cases[] = {
      {"Insert of zero columns", "49 00004001 4e 0000"},
      {"Insert of an empty text value", "49 00004001 4e 0001 74 00000000"},
      {"Relation of zero columns", "52 00004001 00 00 6e 0000"},
      {"Truncate of zero relations", "54 00000000 01"},
      {"Message with empty prefix and content", "4d 00 0000000000000000 00 00000000"},
  };
  for (const ValidCase& valid : cases) {
    SCOPED_TRACE(valid.name);
    std::string hex(valid.hex);
    hex.erase(std::remove(hex.begin(), hex.end(), ' '), hex.end());
    const std::string bytes = FromHex(hex);
    absl::StatusOr<Message> decoded = Decode(bytes);
    EXPECT_TRUE(decoded.ok()) << decoded.status();
  }
}

// Feeds a deterministic stream of random and mutated inputs to the decoder. Under
// AddressSanitizer (scripts/fuzz builds the same paths) this is a cheap fuzzer; here
// it must simply never crash and only ever return OK or InvalidArgument.
TEST(PgoutputDecoder, NeverCrashesOnRandomBytes) {
  std::mt19937_64 rng(20240601);
  std::vector<std::string> seeds;
  for (const auto& captured : kAllCapturedMessages) seeds.push_back(FromHex(captured.hex));
  const std::string_view kTypes = "BCORYIUDTMSx";
  Message reused;
  int decoded_ok = 0;
  constexpr int kInputs = 300000;
  for (int i = 0; i < kInputs; ++i) {
    std::string input;
    if (i % 2 == 0) {
      // Random bytes after a plausible type byte, so every message body is reached.
      input.resize(1 + rng() % 64);
      for (char& c : input) c = static_cast<char>(rng());
      input[0] = kTypes[rng() % kTypes.size()];
    } else {
      // A captured message with a few bytes overwritten, cut short or extended.
      input = seeds[rng() % seeds.size()];
      const int edits = 1 + static_cast<int>(rng() % 4);
      for (int e = 0; e < edits && !input.empty(); ++e) {
        input[rng() % input.size()] = static_cast<char>(rng());
      }
      if (rng() % 4 == 0) input.resize(rng() % (input.size() + 8));
    }
    absl::Status status = DecodeInto(input, reused);
    if (status.ok()) {
      ++decoded_ok;
    } else {
      ASSERT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    }
  }
  // Mutating a text byte keeps a message valid: some inputs must decode, or the loop
  // would not be exercising the decoders past their first field.
  EXPECT_GT(decoded_ok, kInputs / 100);
}

}  // namespace
}  // namespace outboxd::pgoutput
