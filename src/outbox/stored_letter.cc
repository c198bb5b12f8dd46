// The one place that decides what of a dead letter the table holds as text, and how
// the original bytes come back from it.
#include "outbox/stored_letter.h"

#include <openssl/sha.h>

#include <array>
#include <cstdint>

#include "absl/strings/str_cat.h"

namespace outboxd::outbox {
namespace {

constexpr char kHex[] = "0123456789abcdef";
constexpr size_t kHashHexDigits = 2 * SHA256_DIGEST_LENGTH;

// Length of the valid UTF-8 sequence at s[i] (PostgreSQL's pg_utf8_islegal: no
// overlong forms, no surrogates, nothing past U+10FFFF), 0 when there is none.
size_t Utf8SequenceLength(std::string_view s, size_t i) {
  const auto at = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = at(0);
  if (c < 0x80) return 1;
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + n > s.size() || at(1) < lo || at(1) > hi) return 0;
  for (size_t k = 2; k < n; ++k) {
    if ((at(k) & 0xC0) != 0x80) return 0;
  }
  return n;
}

std::string Sha256Hex(std::string_view bytes) {
  std::array<unsigned char, SHA256_DIGEST_LENGTH> digest;
  SHA256(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), digest.data());
  std::string hex;
  hex.reserve(kHashHexDigits);
  for (unsigned char b : digest) {
    hex.push_back(kHex[b >> 4]);
    hex.push_back(kHex[b & 0xf]);
  }
  return hex;
}

// `value` escaped to at most `limit` bytes (whole escapes and characters only), then
// the marker and its hash.
std::string StandIn(std::string_view value, size_t limit) {
  std::string out;
  for (size_t i = 0; i < value.size();) {
    const auto c = static_cast<unsigned char>(value[i]);
    const size_t n = Utf8SequenceLength(value, i);
    std::string piece;
    if (c == '\\') {
      piece = "\\\\";
    } else if (n == 0 || c < 0x20 || c == 0x7f) {
      piece = {'\\', 'x', kHex[c >> 4], kHex[c & 0xf]};
    } else {
      piece = std::string(value.substr(i, n));
    }
    if (out.size() + piece.size() > limit) break;
    out += piece;
    i += n == 0 || c < 0x20 || c == 0x7f ? 1 : n;
  }
  return absl::StrCat(out, kStandInMarker, Sha256Hex(value));
}

bool LooksLikeStandIn(std::string_view text) {
  const size_t tail = sizeof(kStandInMarker) - 1 + kHashHexDigits;
  if (text.size() < tail) return false;
  std::string_view end = text.substr(text.size() - tail);
  if (end.substr(0, sizeof(kStandInMarker) - 1) != kStandInMarker) return false;
  for (char c : end.substr(sizeof(kStandInMarker) - 1)) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// kKey: an indexed key; kText: a field `original` gives back; kReadable: our own text
// (the error), which needs only to be storable.
enum class Kind { kKey, kText, kReadable };

std::string StoredField(std::string_view value, Kind kind) {
  if (kind == Kind::kKey) return StoredKey(value);
  // Text that ends as a stand-in does would read back as a lost one (found by
  // scripts/fuzz): it gets a stand-in too, and its bytes go to `original`.
  if (IsStorableText(value) && (kind == Kind::kReadable || !LooksLikeStandIn(value))) {
    return std::string(value);
  }
  return StandIn(value, std::string_view::npos);
}

struct Field {
  std::string DeadLetter::*member;
  Kind kind;
};
// EncodeOriginal's order.
constexpr std::array<Field, 7> kFields = {{{&DeadLetter::id, Kind::kKey},
                                           {&DeadLetter::aggregate_id, Kind::kKey},
                                           {&DeadLetter::type, Kind::kText},
                                           {&DeadLetter::payload, Kind::kText},
                                           {&DeadLetter::created_at, Kind::kText},
                                           {&DeadLetter::topic, Kind::kText},
                                           {&DeadLetter::headers, Kind::kText}}};
// The fields an `original` written before the headers field holds.
constexpr size_t kFieldsBeforeHeaders = 6;

// The fields of an `original` value, and how many it holds (all, or those before the
// headers field); nullopt when it is not one.
struct Original {
  std::array<std::string_view, kFields.size()> fields;
  size_t count = 0;
};
std::optional<Original> DecodeOriginal(std::string_view bytes) {
  Original original;
  for (std::string_view& field : original.fields) {
    if (bytes.empty() && original.count == kFieldsBeforeHeaders) return original;
    if (bytes.size() < 4) return std::nullopt;
    uint32_t n = 0;
    for (int k = 0; k < 4; ++k) n = (n << 8) | static_cast<unsigned char>(bytes[k]);
    bytes.remove_prefix(4);
    if (n > bytes.size()) return std::nullopt;
    field = bytes.substr(0, n);
    bytes.remove_prefix(n);
    ++original.count;
  }
  if (!bytes.empty()) return std::nullopt;
  return original;
}

}  // namespace

bool IsStorableText(std::string_view value) {
  for (size_t i = 0; i < value.size();) {
    if (value[i] == '\0') return false;
    const size_t n = Utf8SequenceLength(value, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

bool IsPlainKey(std::string_view key) {
  return key.size() <= kMaxStoredKeyBytes && IsStorableText(key) &&
         key.find(kStandInMarker) == std::string_view::npos;
}

std::string StoredKey(std::string_view key) {
  if (IsPlainKey(key)) return std::string(key);
  return StandIn(key, kShownKeyBytes);
}

std::string EncodeOriginal(const DeadLetter& letter) {
  std::string out;
  for (const Field& f : kFields) {
    const std::string& value = letter.*f.member;
    const auto n = static_cast<uint32_t>(value.size());
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>(n >> shift));
    out += value;
  }
  return out;
}

StoredLetter ToStored(const DeadLetter& letter) {
  StoredLetter row{.text = letter};
  bool changed = false;
  for (const Field& f : kFields) {
    std::string stored = StoredField(letter.*f.member, f.kind);
    changed |= stored != letter.*f.member;
    row.text.*f.member = std::move(stored);
  }
  // Ours, but a broker's error text may quote a value: readable is enough here.
  row.text.error = StoredField(letter.error, Kind::kReadable);
  if (changed) row.original = EncodeOriginal(letter);
  row.text.original_lost = false;
  return row;
}

DeadLetter FromStored(const StoredLetter& row) {
  DeadLetter letter = row.text;
  letter.original_lost = false;
  std::optional<Original> original;
  if (row.original) original = DecodeOriginal(*row.original);
  for (size_t i = 0; i < kFields.size(); ++i) {
    std::string& text = letter.*kFields[i].member;
    if (original && i < original->count &&
        StoredField(original->fields[i], kFields[i].kind) == text) {
      text = std::string(original->fields[i]);
    } else if (LooksLikeStandIn(text)) {
      letter.original_lost = true;
    }
  }
  return letter;
}

}  // namespace outboxd::outbox
