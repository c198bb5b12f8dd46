// The content's one reader (the relay) and its writers (the SQL function, and
// SignedContent for tests) live together, so the format has one home. Pure: no
// libpq, so tests/fuzz/emitted_event_fuzz.cc builds it on its own.
#include "outbox/emitted_event.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <simdjson.h>

#include <array>
#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/civil_time.h"

namespace outboxd::outbox {
namespace {

constexpr char kSeparator = '\0';
constexpr size_t kBlock = 64;     // SHA-256's block: the padded keys' size
constexpr size_t kMacHex = 64;    // 32 bytes of HMAC-SHA256 as hex
constexpr size_t kUuidText = 36;  // 8-4-4-4-12

using Digest = std::array<unsigned char, 32>;

// Takes the text up to the next NUL from `rest`; false when there is none.
bool NextField(std::string_view& rest, std::string_view& field) {
  const size_t end = rest.find(kSeparator);
  if (end == std::string_view::npos) return false;
  field = rest.substr(0, end);
  rest.remove_prefix(end + 1);
  return true;
}

// SHA-256 of the parts, in order, without joining them.
Digest Sha256(std::initializer_list<std::string_view> parts) {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  Digest out{};
  unsigned int size = 0;
  if (ctx == nullptr || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) return out;
  for (std::string_view part : parts) EVP_DigestUpdate(ctx.get(), part.data(), part.size());
  EVP_DigestFinal_ex(ctx.get(), out.data(), &size);
  return out;
}

std::string_view AsText(const Digest& digest) {
  return std::string_view(reinterpret_cast<const char*>(digest.data()), digest.size());
}

// The pinned abseil's string_view is its own type.
absl::string_view Absl(std::string_view text) {
  return absl::string_view(text.data(), text.size());
}

// HMAC-SHA256 (RFC 2104) of version NUL rest, as lowercase hex: exactly what
// outboxd_emit computes with SQL's sha256() over the same padded keys.
std::string Mac(const EmitKey& key, std::string_view version, std::string_view rest) {
  const Digest inner = Sha256({key.inner_pad, version, std::string_view("\0", 1), rest});
  return absl::BytesToHexString(Absl(AsText(Sha256({key.outer_pad, AsText(inner)}))));
}

bool IsUuid(std::string_view id) {
  if (id.size() != kUuidText) return false;
  for (size_t i = 0; i < id.size(); ++i) {
    const bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash ? id[i] != '-' : !absl::ascii_isxdigit(static_cast<unsigned char>(id[i]))) {
      return false;
    }
  }
  return true;
}

bool Digits(std::string_view text, size_t at, size_t n, int& value) {
  if (at + n > text.size()) return false;
  value = 0;
  for (size_t i = at; i < at + n; ++i) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(text[i]))) return false;
    value = value * 10 + (text[i] - '0');
  }
  return true;
}

// "YYYY-MM-DD HH:MM:SS[.f{1,6}]+00", a date and time that exist.
bool IsUtcTimestamp(std::string_view t) {
  int y, mo, d, h, mi, s;
  if (!Digits(t, 0, 4, y) || !Digits(t, 5, 2, mo) || !Digits(t, 8, 2, d) || !Digits(t, 11, 2, h) ||
      !Digits(t, 14, 2, mi) || !Digits(t, 17, 2, s)) {
    return false;
  }
  if (t[4] != '-' || t[7] != '-' || t[10] != ' ' || t[13] != ':' || t[16] != ':') return false;
  std::string_view rest = t.substr(19);
  if (!rest.empty() && rest[0] == '.') {
    size_t n = 1;
    while (n < rest.size() && absl::ascii_isdigit(static_cast<unsigned char>(rest[n]))) ++n;
    if (n == 1 || n > 7) return false;
    rest.remove_prefix(n);
  }
  if (rest != "+00") return false;
  // A civil time normalises what does not exist (02-30 becomes 03-02): compare back.
  const absl::CivilSecond c(y, mo, d, h, mi, s);
  return c.year() == y && c.month() == mo && c.day() == d && c.hour() == h && c.minute() == mi &&
         c.second() == s;
}

bool IsUtf8(std::string_view text) { return simdjson::validate_utf8(text.data(), text.size()); }

EmittedRead Refuse(Rejection reason, std::string why) {
  EmittedRead read;
  read.rejected = reason;
  read.why = std::move(why);
  return read;
}

enum class Layout { kUnsigned, kSigned, kSignedWithHeaders };

// The fields after the version (and the mac), each checked.
EmittedRead ReadFields(std::string_view rest, Layout layout) {
  EmittedRead read;
  OutboxEvent& e = read.event;
  const bool signed_content = layout != Layout::kUnsigned;
  for (std::string_view* field : {&e.id, &e.aggregate_id, &e.type, &e.created_at}) {
    if (!NextField(rest, *field)) {
      return Refuse(Rejection::kInvalidField,
                    "is truncated: id, aggregate_id, type, created_at and payload expected");
    }
  }
  // Version 3 only: the headers object's jsonb text, never empty (outboxd_emit writes
  // version 2 without headers). The relay checks it as it checks a headers column.
  if (layout == Layout::kSignedWithHeaders &&
      (!NextField(rest, e.headers) || e.headers.empty() || !IsUtf8(e.headers))) {
    return Refuse(Rejection::kInvalidField, "has no headers field, or one that is not UTF-8");
  }
  e.payload = rest;
  if (!IsUuid(e.id)) return Refuse(Rejection::kInvalidField, "has an id that is not a UUID");
  for (std::string_view field : {e.aggregate_id, e.type}) {
    if (field.empty() || field.size() > kMaxEmittedField || !IsUtf8(field)) {
      return Refuse(Rejection::kInvalidField,
                    "has an aggregate_id or type that is empty, over 1024 bytes or not UTF-8");
    }
  }
  // Version 1 could leave created_at empty: the relay takes the commit time.
  if ((signed_content || !e.created_at.empty()) && !IsUtcTimestamp(e.created_at)) {
    return Refuse(Rejection::kInvalidField,
                  "has a created_at that is not a UTC timestamp (YYYY-MM-DD HH:MM:SS.ffffff+00)");
  }
  if (!IsUtf8(e.payload)) {
    return Refuse(Rejection::kInvalidField, "has a payload that is not UTF-8");
  }
  return read;
}

}  // namespace

std::string_view RejectionName(Rejection reason) {
  switch (reason) {
    case Rejection::kNone:
      return "none";
    case Rejection::kTooLarge:
      return "too_large";
    case Rejection::kUnsigned:
      return "unsigned";
    case Rejection::kBadSignature:
      return "bad_signature";
    case Rejection::kInvalidField:
      return "invalid_field";
    case Rejection::kNonTransactional:
      return "non_transactional";
  }
  return "unknown";
}

EmittedRead ReadEmittedEvent(std::string_view content, const EmitKey& key, pg::Lsn lsn) {
  if (content.size() > kMaxEmittedContent) {
    return Refuse(Rejection::kTooLarge, absl::StrCat("is ", content.size(), " bytes, over the ",
                                                     kMaxEmittedContent, " outboxd_emit writes"));
  }
  if (content == kEmitCutByServer) {
    return Refuse(
        Rejection::kTooLarge,
        absl::StrCat("was over the ", kMaxEmittedContent,
                     " bytes outboxd_emit writes (left out by the bulk catch-up's query)"));
  }
  std::string_view version;
  if (!NextField(content, version) || (version != kEmitVersion && version != kEmitVersionHeaders &&
                                       version != kEmitVersionUnsigned)) {
    return Refuse(Rejection::kUnsigned, "was not written by outboxd_emit (no outboxd-v2 version)");
  }
  if (version == kEmitVersionUnsigned) {
    if (lsn >= key.unsigned_before) {
      return Refuse(Rejection::kUnsigned,
                    "is unsigned (outboxd-v1), written after outboxd setup made outboxd_emit sign");
    }
    return ReadFields(content, Layout::kUnsigned);
  }
  std::string_view mac;
  if (!NextField(content, mac) || mac.size() != kMacHex || key.inner_pad.size() != kBlock ||
      CRYPTO_memcmp(mac.data(), Mac(key, version, content).data(), kMacHex) != 0) {
    return Refuse(Rejection::kBadSignature,
                  "has no valid signature: not written by outboxd_emit with this database's key");
  }
  return ReadFields(content,
                    version == kEmitVersionHeaders ? Layout::kSignedWithHeaders : Layout::kSigned);
}

std::string SignedContent(const OutboxEvent& event, const EmitKey& key) {
  std::string rest;
  for (std::string_view field : {event.id, event.aggregate_id, event.type, event.created_at}) {
    rest.append(field);
    rest.push_back(kSeparator);
  }
  if (!event.headers.empty()) {
    rest.append(event.headers);
    rest.push_back(kSeparator);
  }
  rest.append(event.payload);
  const std::string_view version = event.headers.empty() ? kEmitVersion : kEmitVersionHeaders;
  std::string out(version);
  out.push_back(kSeparator);
  out.append(Mac(key, version, rest));
  out.push_back(kSeparator);
  out.append(rest);
  return out;
}

std::string EmittedContent(const OutboxEvent& event) {
  std::string out(kEmitVersionUnsigned);
  for (std::string_view field : {event.id, event.aggregate_id, event.type, event.created_at}) {
    out.push_back(kSeparator);
    out.append(field);
  }
  out.push_back(kSeparator);
  out.append(event.payload);
  return out;
}

EmitKey KeyFromSecret(std::string_view secret) {
  EmitKey key{.inner_pad = std::string(kBlock, '\x36'), .outer_pad = std::string(kBlock, '\x5c')};
  for (size_t i = 0; i < secret.size() && i < kBlock; ++i) {
    key.inner_pad[i] = static_cast<char>(key.inner_pad[i] ^ secret[i]);
    key.outer_pad[i] = static_cast<char>(key.outer_pad[i] ^ secret[i]);
  }
  return key;
}

namespace {

// One overload of outboxd_emit: without headers (three arguments, version 2, as
// before version 3 existed) or with them (a fourth, version 3 when it is not NULL).
// Generated from one text so the two cannot drift apart.
enum class Overload { kWithoutHeaders, kWithHeaders };

std::string EmitOverloadSql(const pg::TableName& function, const pg::TableName& key_table,
                            Overload overload) {
  const bool with_headers = overload == Overload::kWithHeaders;
  const std::string headers_check = with_headers
                                        ? absl::StrCat(R"sql(
  IF $4 IS NOT NULL AND (pg_catalog.jsonb_typeof($4) <> 'object' OR
      pg_catalog.jsonb_path_exists($4, '$.* ? (@.type() != "string")')) THEN
    RAISE EXCEPTION 'outboxd_emit: headers must be NULL or a JSON object of string values'
      USING ERRCODE = '22023';
  END IF;
  IF $4 IS NOT NULL AND pg_catalog.jsonb_path_exists($4, '$.keyvalue() ? (@.key like_regex ")sql",
                                                       OwnHeaderRegex(), R"sql(" flag "i")') THEN
    RAISE EXCEPTION 'outboxd_emit: a header key is one of outboxd''s own headers (id, type, ...); rename it'
      USING ERRCODE = '22023';
  END IF;)sql")
                                        : "";
  return absl::StrCat("CREATE OR REPLACE FUNCTION ", function.quoted,
                      with_headers ? "(aggregate_id text, type text, payload jsonb, headers jsonb)"
                                   : "(aggregate_id text, type text, payload jsonb)",
                      R"sql(
RETURNS uuid LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $outboxd$
DECLARE
  event_id uuid := pg_catalog.gen_random_uuid();
  sep CONSTANT bytea := '\x00'::bytea;
  version CONSTANT bytea := pg_catalog.convert_to()sql",
                      with_headers ? absl::StrCat("CASE WHEN $4 IS NULL THEN '", kEmitVersion,
                                                  "' ELSE '", kEmitVersionHeaders, "' END")
                                   : absl::StrCat("'", kEmitVersion, "'"),
                      R"sql(, 'UTF8');
  pads record;
  rest bytea;
BEGIN
  IF coalesce($1, '') = '' OR coalesce($2, '') = '' THEN
    RAISE EXCEPTION 'outboxd_emit: aggregate_id and type must not be empty (they are the key and topic)'
      USING ERRCODE = '22023';
  END IF;
  IF pg_catalog.octet_length(pg_catalog.convert_to($1, 'UTF8')) > )sql",
                      kMaxEmittedField,
                      R"sql( OR pg_catalog.octet_length(pg_catalog.convert_to($2, 'UTF8')) > )sql",
                      kMaxEmittedField, R"sql( THEN
    RAISE EXCEPTION 'outboxd_emit: aggregate_id and type must be at most )sql",
                      kMaxEmittedField, R"sql( bytes each' USING ERRCODE = '22023';
  END IF;
  IF pg_catalog.jsonb_typeof($3) IS NULL OR pg_catalog.jsonb_typeof($3) NOT IN ('object', 'array') THEN
    RAISE EXCEPTION 'outboxd_emit: payload must be a JSON object or array' USING ERRCODE = '22023';
  END IF;)sql",
                      headers_check, R"sql(
  SELECT k.inner_pad, k.outer_pad INTO pads FROM )sql",
                      key_table.quoted, R"sql( k WHERE k.id = 1;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'outboxd_emit: no signing key in )sql",
                      key_table.name, R"sql(; run outboxd setup' USING ERRCODE = '55000';
  END IF;
  rest := pg_catalog.convert_to(event_id::text, 'UTF8') || sep ||
    pg_catalog.convert_to($1, 'UTF8') || sep ||
    pg_catalog.convert_to($2, 'UTF8') || sep ||
    pg_catalog.convert_to(pg_catalog.to_char(pg_catalog.now() AT TIME ZONE 'UTC',
                                             'YYYY-MM-DD HH24:MI:SS.US') || '+00', 'UTF8') || sep ||)sql",
                      with_headers ? R"sql(
    CASE WHEN $4 IS NULL THEN ''::bytea ELSE pg_catalog.convert_to($4::text, 'UTF8') || sep END ||)sql"
                                   : "",
                      R"sql(
    pg_catalog.convert_to($3::text, 'UTF8');
  IF pg_catalog.octet_length(rest) + )sql",
                      sizeof(kEmitVersion) + kMacHex + 1, R"sql( > )sql", kMaxEmittedContent,
                      R"sql( THEN
    RAISE EXCEPTION 'outboxd_emit: the event is over )sql",
                      kMaxEmittedContent,
                      R"sql( bytes (Kafka''s default message.max.bytes is 1000000)'
      USING ERRCODE = '54000';
  END IF;
  PERFORM pg_catalog.pg_logical_emit_message(true, ')sql",
                      kEmitPrefix, R"sql(', version || sep ||
    pg_catalog.convert_to(pg_catalog.encode(pg_catalog.sha256(pads.outer_pad ||
      pg_catalog.sha256(pads.inner_pad || version || sep || rest)), 'hex'), 'UTF8') || sep || rest);
  RETURN event_id;
END
$outboxd$)sql");
}

}  // namespace

std::string EmitFunctionSql(const pg::TableName& function, const pg::TableName& key_table) {
  // SECURITY DEFINER: the function reads the key as its owner, which the caller may
  // not. Its search_path is fixed with pg_catalog first, so no caller's schema can
  // put an operator or function of its own in the signing path (PostgreSQL's
  // "Writing SECURITY DEFINER Functions Safely"); that costs each call a configuration
  // save and restore. created_at is rendered as the walsender renders a timestamptz
  // column in UTC, so the relay handles it as it handles a row's. Two overloads, not
  // one with a defaulted fourth argument: CREATE OR REPLACE cannot change an existing
  // function's arguments, and the three-argument one keeps its grants and its version
  // 2 content, which a relay from before version 3 reads.
  return absl::StrCat(EmitOverloadSql(function, key_table, Overload::kWithoutHeaders), ";\n",
                      EmitOverloadSql(function, key_table, Overload::kWithHeaders));
}

}  // namespace outboxd::outbox
