// libFuzzer target for the WAL-only outbox's message content (outbox/emitted_event.h):
// what the relay does with every message carrying outboxd's prefix, whoever wrote it.
// Built by scripts/fuzz with clang, ASan and UBSan; seeds in
// tests/fuzz/corpus/emitted_event/.
//
// The first byte chooses what the rest is:
//   even: a message's content as any role could write it, read under a fixed key at
//         a position below or above the unsigned horizon. Checks: an accepted event's
//         fields are views into the content; its id is a UUID; an accepted version-2
//         content is exactly what SignedContent makes of its event (so nothing was
//         accepted that the key did not sign); a refusal's reason is never kNone.
//   odd:  the fields of an event, NUL-separated (id, aggregate_id, type, created_at,
//         payload), signed with the key as outboxd_emit would. Checks: the signature
//         always holds (the only refusals are kInvalidField and kTooLarge), and an
//         accepted event reads back exactly as signed.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "outbox/emitted_event.h"

namespace {

using namespace outboxd;

void Check(bool condition) {
  if (!condition) std::abort();
}

const outbox::EmitKey& Key() {
  static const outbox::EmitKey key = [] {
    outbox::EmitKey k = outbox::KeyFromSecret("fuzzing key, never a real one");
    k.unsigned_before = 0x1000;
    return k;
  }();
  return key;
}

bool Inside(std::string_view part, std::string_view whole) {
  return part.empty() ||
         (part.data() >= whole.data() && part.data() + part.size() <= whole.data() + whole.size());
}

void ReadAnyContent(std::string_view content, pg::Lsn lsn) {
  const outbox::EmittedRead read = outbox::ReadEmittedEvent(content, Key(), lsn);
  if (!read.ok()) {
    Check(read.rejected != outbox::Rejection::kNone);
    return;
  }
  const outbox::OutboxEvent& e = read.event;
  for (std::string_view field : {e.id, e.aggregate_id, e.type, e.created_at, e.payload}) {
    Check(Inside(field, content));
  }
  Check(e.id.size() == 36 && !e.aggregate_id.empty() && !e.type.empty());
  Check(content.size() <= outbox::kMaxEmittedContent);
  if (content.substr(0, 11) == std::string_view("outboxd-v2\0", 11)) {
    Check(outbox::SignedContent(e, Key()) == content);
  } else {
    Check(lsn < Key().unsigned_before);  // version 1, read only below the horizon
  }
}

void SignAndRead(std::string_view fields) {
  std::string_view parts[5];
  for (int i = 0; i < 4; ++i) {
    const size_t nul = fields.find('\0');
    parts[i] = fields.substr(0, nul);
    fields = nul == std::string_view::npos ? std::string_view() : fields.substr(nul + 1);
  }
  parts[4] = fields;
  const outbox::OutboxEvent event{.id = parts[0],
                                  .aggregate_id = parts[1],
                                  .type = parts[2],
                                  .payload = parts[4],
                                  .created_at = parts[3]};
  const std::string content = outbox::SignedContent(event, Key());
  const outbox::EmittedRead read = outbox::ReadEmittedEvent(content, Key(), 0x2000);
  if (!read.ok()) {
    Check(read.rejected == outbox::Rejection::kInvalidField ||
          read.rejected == outbox::Rejection::kTooLarge);
    return;
  }
  Check(read.event.id == event.id && read.event.aggregate_id == event.aggregate_id &&
        read.event.type == event.type && read.event.created_at == event.created_at &&
        read.event.payload == event.payload);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 0) {
    ReadAnyContent(input, data[0] % 4 == 0 ? 0x800 : 0x2000);
  } else {
    SignAndRead(input);
  }
  return 0;
}
