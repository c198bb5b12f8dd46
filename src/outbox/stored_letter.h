// A dead letter as its table row holds it. A poison event may carry anything a row or
// a message can: bytes that are not UTF-8, a NUL, an aggregate id of 6 kB. The text
// columns (and the btree indexes on id and aggregate_id, whose entries cannot exceed
// ~2.7 kB) must still take it, so storing a letter never fails on its content.
//
// Each field is stored as it is when PostgreSQL takes it as text: valid UTF-8 (as
// the server checks it), no NUL, and for the two indexed keys (id, aggregate_id) at
// most kMaxStoredKeyBytes and without the marker below. Any other value is stored as
// its stand-in: the value escaped (bytes that are not UTF-8 and control characters
// as \xHH, a backslash as \\; a key's cut to its first kShownKeyBytes), the marker
// "~sha256:" and the SHA-256 of the original bytes in hex:
//
//   aggregate_id "pedido-\xff"        ->  pedido-\xff~sha256:6f1a...e3 (64 hex digits)
//
// The stand-in of a key is unique to its value (the hash; a plain key never holds the
// marker), so the gate can park and look up aggregates by their stored key
// (StoredKey) whatever the table kept. When any field needed a stand-in, the original
// bytes of every field go to the bytea column `original` (layout at EncodeOriginal),
// and a replay publishes those, not the stand-ins.
//
//   StoredLetter row = ToStored(letter);                 // what INSERT sends
//   DeadLetter back = FromStored(row);                   // what replay publishes
//   assert(back.aggregate_id == letter.aggregate_id);
#ifndef OUTBOXD_OUTBOX_STORED_LETTER_H_
#define OUTBOXD_OUTBOX_STORED_LETTER_H_

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "outbox/dead_letter.h"

namespace outboxd::outbox {

// Keys longer than this get a stand-in: two of them and a bigint must fit a btree
// entry (2,704 bytes with the default 8 kB page) uncompressed.
inline constexpr size_t kMaxStoredKeyBytes = 1024;
// How much of a long key's escaped text its stand-in shows before the marker.
inline constexpr size_t kShownKeyBytes = 200;
// Between a stand-in's escaped text and its hash.
inline constexpr char kStandInMarker[] = "~sha256:";

// The fields as the table's text columns hold them, and the original bytes when any
// field needed a stand-in (nullopt: every field is stored as it is).
struct StoredLetter {
  DeadLetter text;
  std::optional<std::string> original;
};

// Whether PostgreSQL accepts `value` as text in a UTF-8 database: valid UTF-8 (no
// overlong form, surrogate or code point past U+10FFFF) without NUL.
bool IsStorableText(std::string_view value);

// The value an indexed key (id, aggregate_id) is stored as: `key` itself, or its
// stand-in. Different keys never share a stored key.
std::string StoredKey(std::string_view key);
// Whether StoredKey(key) is `key` itself (no copy needed to look it up).
bool IsPlainKey(std::string_view key);

// The row for `letter`. Never fails: every text field is valid UTF-8 without NUL,
// and the keys are at most kMaxStoredKeyBytes.
StoredLetter ToStored(const DeadLetter& letter);

// The letter a row holds: each field from `original` while the column still holds its
// stand-in, else the column's text (a person may have fixed it, e.g. the payload). A
// field left as a stand-in with no original bytes to restore it (`original` missing or
// unreadable) sets DeadLetter::original_lost: a replay must not publish the stand-in.
DeadLetter FromStored(const StoredLetter& row);

// `original`'s layout: for id, aggregate_id, type, payload, created_at, topic and
// headers in that order, the length as 4 bytes big-endian, then the bytes. A value
// written before the headers field (six fields) still reads.
std::string EncodeOriginal(const DeadLetter& letter);

}  // namespace outboxd::outbox

#endif  // OUTBOXD_OUTBOX_STORED_LETTER_H_
