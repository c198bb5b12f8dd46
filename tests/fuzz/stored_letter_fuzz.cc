// libFuzzer target for what the dead-letter table stores of a poison event
// (outbox/stored_letter.h): the relay writes whatever a row or a message held, so the
// conversion must take any bytes. Built by scripts/fuzz with clang, ASan and UBSan;
// seeds in tests/fuzz/corpus/stored_letter/.
//
// The input is six fields (id, aggregate_id, type, payload, created_at, topic), each a
// length byte then that many bytes (255: the rest), then bytes used as a stored
// `original` value. Checks: every text field ToStored makes is text PostgreSQL takes
// (IsStorableText), each key at most kMaxStoredKeyBytes; `original` is set exactly
// when a field changed; FromStored gives every original byte back, and a field a
// person edited wins over the original; two different keys never share a stored key;
// FromStored takes any `original` bytes without crashing.
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "outbox/stored_letter.h"

namespace {

using namespace outboxd;

void Check(bool condition) {
  if (!condition) std::abort();
}

std::string_view Take(std::string_view& in) {
  if (in.empty()) return {};
  const auto n = static_cast<uint8_t>(in[0]);
  in.remove_prefix(1);
  const size_t take = n == 255 ? in.size() : std::min<size_t>(n, in.size());
  std::string_view out = in.substr(0, take);
  in.remove_prefix(take);
  return out;
}

// A key of 1-8 kB from a short input: long keys are what the indexes cannot take.
std::string Longer(std::string_view field, uint8_t times) {
  std::string out;
  for (int i = 0; i < times % 64 && !field.empty(); ++i) out.append(field);
  return out.empty() ? std::string(field) : out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  const uint8_t repeat = in.empty() ? 0 : static_cast<uint8_t>(in[0]);
  outbox::DeadLetter letter{.lsn = "0/16B3748", .error = "test"};
  std::array<std::string*, 6> fields = {&letter.id,      &letter.aggregate_id, &letter.type,
                                        &letter.payload, &letter.created_at,   &letter.topic};
  for (std::string* field : fields) *field = std::string(Take(in));
  letter.aggregate_id = Longer(letter.aggregate_id, repeat);

  const outbox::StoredLetter row = outbox::ToStored(letter);
  bool changed = false;
  const std::array<const std::string*, 6> stored = {&row.text.id,         &row.text.aggregate_id,
                                                    &row.text.type,       &row.text.payload,
                                                    &row.text.created_at, &row.text.topic};
  for (size_t i = 0; i < stored.size(); ++i) {
    Check(outbox::IsStorableText(*stored[i]));
    changed |= *stored[i] != *fields[i];
  }
  Check(outbox::IsStorableText(row.text.error));
  Check(row.text.id.size() <= outbox::kMaxStoredKeyBytes);
  Check(row.text.aggregate_id.size() <= outbox::kMaxStoredKeyBytes);
  Check(row.text.aggregate_id == outbox::StoredKey(letter.aggregate_id));
  Check(row.original.has_value() == changed);

  // Read back: every original byte, whatever was a stand-in.
  const outbox::DeadLetter back = outbox::FromStored(row);
  Check(!back.original_lost);
  const std::array<const std::string*, 6> got = {&back.id,      &back.aggregate_id, &back.type,
                                                 &back.payload, &back.created_at,   &back.topic};
  for (size_t i = 0; i < got.size(); ++i) Check(*got[i] == *fields[i]);

  // A person fixed the payload in the table: the fix is what comes back.
  outbox::StoredLetter edited = row;
  edited.text.payload = "{\"fixed\":true}";
  if (edited.text.payload != row.text.payload) {
    Check(outbox::FromStored(edited).payload == "{\"fixed\":true}");
  }

  // Different keys, different stored keys.
  if (letter.id != letter.aggregate_id) {
    Check(outbox::StoredKey(letter.id) != outbox::StoredKey(letter.aggregate_id));
  }

  // Any bytes as `original`: no crash, and fields it cannot supply keep their text.
  outbox::StoredLetter garbage = row;
  garbage.original = std::string(in);
  (void)outbox::FromStored(garbage);
  return 0;
}
