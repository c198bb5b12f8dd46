// libFuzzer target for the replication stream's CopyData framing (pg/copy_data.h):
// the XLogData ('w') and primary keepalive ('k') messages the walsender sends, parsed
// before the pgoutput decoder sees anything. Built by scripts/fuzz with clang, ASan and
// UBSan; seeds in tests/fuzz/corpus/copy_data/.
//
// Beyond "does not crash", it checks what the parser promises: errors are DataLoss;
// an XLogData's data is exactly the bytes after the 25-byte header (a view into the
// input, every byte read so ASan sees any overrun); the integers are the big-endian
// fields of the layout; a keepalive needs its 18 bytes and only its flag byte decides
// reply_requested.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <variant>

#include "pg/copy_data.h"

namespace {

using namespace outboxd::pg;

void Check(bool condition) {
  if (!condition) std::abort();
}

uint64_t BigEndian(std::string_view input, size_t at) {
  uint64_t value = 0;
  for (size_t i = 0; i < 8; ++i) value = value << 8 | static_cast<uint8_t>(input[at + i]);
  return value;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<StreamMessage> parsed = ParseCopyData(input);
  if (!parsed.ok()) {
    Check(parsed.status().code() == absl::StatusCode::kDataLoss);
    Check(!(input.size() >= 25 && input[0] == 'w') && !(input.size() >= 18 && input[0] == 'k'));
    return 0;
  }
  if (const auto* x = std::get_if<XLogData>(&*parsed)) {
    Check(input[0] == 'w' && input.size() >= 25);
    Check(x->data.data() == input.data() + 25 && x->data.size() == input.size() - 25);
    uint64_t sum = 0;
    for (char c : x->data) sum += static_cast<unsigned char>(c);
    Check(sum <= 255 * x->data.size());
    Check(x->wal_start == BigEndian(input, 1) && x->wal_end == BigEndian(input, 9));
    Check(static_cast<uint64_t>(x->send_time) == BigEndian(input, 17));
    return 0;
  }
  const auto* k = std::get_if<Keepalive>(&*parsed);
  Check(k != nullptr);  // the parser never returns NoMessage or StreamEnd
  Check(input[0] == 'k' && input.size() >= 18);
  Check(k->wal_end == BigEndian(input, 1));
  Check(static_cast<uint64_t>(k->send_time) == BigEndian(input, 9));
  Check(k->reply_requested == (input[17] != 0));
  return 0;
}
