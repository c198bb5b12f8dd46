// The WAL-only outbox's message content (outbox/emitted_event.h): what the relay reads
// back is exactly what was signed, NUL separators and all; anything not signed with
// the key, or signed but breaking a field's rule, is refused with its reason (the
// relay counts and skips it) rather than guessed at.
#include "outbox/emitted_event.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <string>

#include "absl/strings/escaping.h"
#include "gtest/gtest.h"

namespace outboxd::outbox {
namespace {

const OutboxEvent kEvent{.id = "0b6f6a3e-3c1e-4a35-9d0b-5f3b1c2d4e5f",
                         .aggregate_id = "pedido-77",
                         .type = "pedido.confirmado",
                         .payload = R"({"pedidoId": "pedido-77", "totalCentavos": 1000})",
                         .created_at = "2026-12-03 15:40:00.123456+00"};
constexpr char kSecret[] = "a 64-byte secret would be random; this one is for the tests only";
const EmitKey kKey = KeyFromSecret(kSecret);
constexpr pg::Lsn kLsn = 0x16B374D848;

Rejection ReasonOf(std::string_view content, const EmitKey& key = kKey, pg::Lsn lsn = kLsn) {
  return ReadEmittedEvent(content, key, lsn).rejected;
}

TEST(EmittedEvent, SignedContentReadsBackAsTheEventItCarries) {
  const std::string content = SignedContent(kEvent, kKey);
  EXPECT_EQ(content.substr(0, 11), std::string("outboxd-v2\0", 11));
  EmittedRead read = ReadEmittedEvent(content, kKey, kLsn);
  ASSERT_TRUE(read.ok()) << read.why;
  EXPECT_EQ(read.event.id, kEvent.id);
  EXPECT_EQ(read.event.aggregate_id, kEvent.aggregate_id);
  EXPECT_EQ(read.event.type, kEvent.type);
  EXPECT_EQ(read.event.created_at, kEvent.created_at);
  EXPECT_EQ(read.event.payload, kEvent.payload);
}

// An event with headers is version 3, the headers between created_at and payload;
// without them version 2, as before. The version is signed: v3 relabelled v2 fails.
TEST(EmittedEvent, HeadersMakeVersionThreeAndReadBack) {
  OutboxEvent event = kEvent;
  event.headers = R"({"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"})";
  const std::string content = SignedContent(event, kKey);
  EXPECT_EQ(content.substr(0, 11), std::string("outboxd-v3\0", 11));
  EmittedRead read = ReadEmittedEvent(content, kKey, kLsn);
  ASSERT_TRUE(read.ok()) << read.why;
  EXPECT_EQ(read.event.headers, event.headers);
  EXPECT_EQ(read.event.payload, kEvent.payload);
  EXPECT_EQ(read.event.created_at, kEvent.created_at);
  EXPECT_TRUE(ReadEmittedEvent(SignedContent(kEvent, kKey), kKey, kLsn).event.headers.empty());

  std::string relabelled = content;
  relabelled[9] = '2';
  EXPECT_EQ(ReasonOf(relabelled), Rejection::kBadSignature);
}

// The mac is RFC 2104's HMAC-SHA256 of the content without "mac NUL": what OpenSSL's
// HMAC computes from the secret itself, so SQL's sha256() over the pads agrees.
TEST(EmittedEvent, TheMacIsHmacSha256OfTheSignedBytes) {
  const std::string content = SignedContent(kEvent, kKey);
  const std::string signed_bytes = content.substr(0, 11) + content.substr(11 + 65);
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  HMAC(EVP_sha256(), kSecret, static_cast<int>(sizeof(kSecret) - 1),
       reinterpret_cast<const unsigned char*>(signed_bytes.data()), signed_bytes.size(), mac,
       &size);
  ASSERT_EQ(size, 32u);
  EXPECT_EQ(content.substr(11, 64),
            absl::BytesToHexString(absl::string_view(reinterpret_cast<char*>(mac), size)));
}

TEST(EmittedEvent, AnyChangedByteOrAnotherKeyBreaksTheSignature) {
  const std::string content = SignedContent(kEvent, kKey);
  for (size_t at = 11; at < content.size(); ++at) {
    std::string changed = content;
    changed[at] = static_cast<char>(changed[at] ^ 0x01);
    EXPECT_EQ(ReasonOf(changed), Rejection::kBadSignature) << "byte " << at;
  }
  EXPECT_EQ(ReasonOf(content, KeyFromSecret("another key")), Rejection::kBadSignature);
  EXPECT_EQ(ReasonOf(content, EmitKey{}), Rejection::kBadSignature) << "no key read";
  for (size_t cut = 11; cut < content.size(); ++cut) {
    EXPECT_EQ(ReasonOf(content.substr(0, cut)), Rejection::kBadSignature) << "cut at " << cut;
  }
}

TEST(EmittedEvent, UnsignedContentIsReadOnlyFromBeforeTheUpgrade) {
  const std::string v1 = EmittedContent(kEvent);
  EXPECT_EQ(ReasonOf(v1), Rejection::kUnsigned) << "a new install takes no version 1";
  const EmitKey upgraded{kKey.inner_pad, kKey.outer_pad, /*unsigned_before=*/kLsn + 1};
  EmittedRead read = ReadEmittedEvent(v1, upgraded, kLsn);
  ASSERT_TRUE(read.ok()) << read.why;
  EXPECT_EQ(read.event.id, kEvent.id);
  EXPECT_EQ(ReasonOf(v1, upgraded, kLsn + 1), Rejection::kUnsigned);
  // Its fields are checked too; an empty created_at is the commit time, as before.
  OutboxEvent no_time = kEvent, bad_id = kEvent;
  no_time.created_at = "";
  bad_id.id = "1";
  EXPECT_TRUE(ReadEmittedEvent(EmittedContent(no_time), upgraded, kLsn).ok());
  EXPECT_EQ(ReasonOf(EmittedContent(bad_id), upgraded, kLsn), Rejection::kInvalidField);
  for (const char* other : {"", "garbage", "outboxd-v3", "outboxd-v2"}) {
    EXPECT_EQ(ReasonOf(other), Rejection::kUnsigned) << other;
  }
}

TEST(EmittedEvent, ContentOverTheLimitIsRefusedBeforeAnythingIsRead) {
  OutboxEvent big = kEvent;
  const std::string payload = "[\"" + std::string(kMaxEmittedContent, 'x') + "\"]";
  big.payload = payload;
  EXPECT_EQ(ReasonOf(SignedContent(big, kKey)), Rejection::kTooLarge);
  big.payload = std::string_view(payload).substr(0, kMaxEmittedContent - 200);
  EXPECT_EQ(ReasonOf(SignedContent(big, kKey)), Rejection::kNone);
}

// Signed (the key leaked, or a bug in the function): every field is still checked.
TEST(EmittedEvent, SignedFieldsThatBreakTheirRulesAreRefused) {
  const std::string long_field(kMaxEmittedField + 1, 'a');
  auto with = [](auto change) {
    OutboxEvent e = kEvent;
    change(e);
    return ReasonOf(SignedContent(e, kKey));
  };
  for (const char* id :
       {"", "pedido-1", "0b6f6a3e-3c1e-4a35-9d0b-5f3b1c2d4e5",
        "0b6f6a3e+3c1e-4a35-9d0b-5f3b1c2d4e5f", "0b6f6a3e-3c1e-4a35-9d0b-5f3b1c2d4e5g"}) {
    EXPECT_EQ(with([&](OutboxEvent& e) { e.id = id; }), Rejection::kInvalidField) << id;
  }
  EXPECT_EQ(with([](OutboxEvent& e) { e.id = "0B6F6A3E-3C1E-4A35-9D0B-5F3B1C2D4E5F"; }),
            Rejection::kNone);
  for (std::string_view bad :
       {std::string_view(""), std::string_view("\xff\xfe"), std::string_view(long_field)}) {
    EXPECT_EQ(with([&](OutboxEvent& e) { e.aggregate_id = bad; }), Rejection::kInvalidField);
    EXPECT_EQ(with([&](OutboxEvent& e) { e.type = bad; }), Rejection::kInvalidField);
  }
  EXPECT_EQ(with([](OutboxEvent& e) { e.payload = "{\"a\": \"\xc3\x28\"}"; }),
            Rejection::kInvalidField);
  for (const char* time :
       {"", "garbage", "2026-02-29 10:00:00+00", "2026-13-01 10:00:00+00", "2026-12-03 24:00:00+00",
        "2026-12-03 15:40:00.1234567+00", "2026-12-03 15:40:00.+00", "2026-12-03 15:40:00+01",
        "2026-12-03T15:40:00+00", "2026-12-03 15:40:00"}) {
    EXPECT_EQ(with([&](OutboxEvent& e) { e.created_at = time; }), Rejection::kInvalidField) << time;
  }
  for (const char* time :
       {"2024-02-29 23:59:59+00", "2026-12-03 15:40:00.5+00", "2026-12-03 15:40:00.123456+00"}) {
    EXPECT_EQ(with([&](OutboxEvent& e) { e.created_at = time; }), Rejection::kNone) << time;
  }
}

TEST(EmittedEvent, TheWhyNeverCarriesTheContent) {
  OutboxEvent e = kEvent;
  e.id = "\x1b]0;owned\x07";
  const EmittedRead read = ReadEmittedEvent(SignedContent(e, kKey), kKey, kLsn);
  EXPECT_EQ(read.rejected, Rejection::kInvalidField);
  EXPECT_EQ(read.why.find("owned"), std::string::npos) << read.why;
}

}  // namespace
}  // namespace outboxd::outbox
