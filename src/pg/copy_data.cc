// CopyData payloads of the replication protocol (all integers big-endian), from
// https://www.postgresql.org/docs/current/protocol-replication.html.
#include "pg/copy_data.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace outboxd::pg {
namespace {

// XLogData: Byte1('w') Int64 wal_start, Int64 wal_end, Int64 send_time, Byten data.
constexpr size_t kXLogDataHeader = 1 + 8 + 8 + 8;
// Primary keepalive: Byte1('k') Int64 wal_end, Int64 send_time, Byte1 reply.
constexpr size_t kKeepaliveSize = 1 + 8 + 8 + 1;

}  // namespace

uint64_t ReadU64(std::string_view bytes, size_t at) {
  uint64_t value = 0;
  for (size_t i = 0; i < 8; ++i) value = value << 8 | static_cast<uint8_t>(bytes[at + i]);
  return value;
}

absl::StatusOr<StreamMessage> ParseCopyData(std::string_view message) {
  if (message.empty()) return absl::DataLossError("empty replication message");
  switch (message[0]) {
    case 'w': {
      if (message.size() < kXLogDataHeader) {
        return absl::DataLossError(absl::StrCat("truncated XLogData message: ", message.size(),
                                                " bytes, the header alone is 25"));
      }
      XLogData data;
      data.wal_start = ReadU64(message, 1);
      data.wal_end = ReadU64(message, 9);
      data.send_time = static_cast<int64_t>(ReadU64(message, 17));
      data.data = message.substr(kXLogDataHeader);
      return data;
    }
    case 'k': {
      if (message.size() < kKeepaliveSize) {
        return absl::DataLossError(
            absl::StrCat("truncated keepalive message: ", message.size(), " bytes instead of 18"));
      }
      Keepalive keepalive;
      keepalive.wal_end = ReadU64(message, 1);
      keepalive.send_time = static_cast<int64_t>(ReadU64(message, 9));
      keepalive.reply_requested = message[17] != 0;
      return keepalive;
    }
    default:
      return absl::DataLossError(absl::StrFormat("unknown replication message type 0x%02x",
                                                 static_cast<uint8_t>(message[0])));
  }
}

}  // namespace outboxd::pg
