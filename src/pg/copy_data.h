// The messages the walsender sends inside CopyData once START_REPLICATION ... LOGICAL
// has switched the connection to CopyBoth, and their parser. Pure (no libpq): the
// fuzz target tests/fuzz/copy_data_fuzz.cc builds it on its own.
// Layout: https://www.postgresql.org/docs/current/protocol-replication.html
//
//   OUTBOXD_ASSIGN_OR_RETURN(StreamMessage m, ParseCopyData(payload));
//   if (auto* x = std::get_if<XLogData>(&m)) decoder.Decode(x->data);
#ifndef OUTBOXD_PG_COPY_DATA_H_
#define OUTBOXD_PG_COPY_DATA_H_

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <variant>

#include "absl/status/statusor.h"
#include "pg/lsn.h"

namespace outboxd::pg {

// 'w' message: a chunk of WAL decoded by the output plugin.
struct XLogData {
  Lsn wal_start = 0;      // start of the data in WAL
  Lsn wal_end = 0;        // current end of WAL on the server
  int64_t send_time = 0;  // microseconds since 2000-01-01
  std::string_view data;  // the pgoutput message; valid until the next Next()
};

// 'k' message: primary keepalive.
struct Keepalive {
  Lsn wal_end = 0;
  int64_t send_time = 0;
  bool reply_requested = false;
};

struct NoMessage {};  // nothing buffered; wait for socket() to become readable
struct StreamEnd {};  // server ended the copy stream

using StreamMessage = std::variant<NoMessage, XLogData, Keepalive, StreamEnd>;

// Parses one CopyData payload from the walsender ('w' or 'k'), bounds-checked:
// truncated or unknown messages are DataLoss. XLogData::data points into `message`.
absl::StatusOr<StreamMessage> ParseCopyData(std::string_view message);

// The big-endian 64-bit integer at `at` (an LSN, a timestamp) of a replication or
// pgoutput message; the caller checks that 8 bytes are there.
uint64_t ReadU64(std::string_view bytes, size_t at);

}  // namespace outboxd::pg

#endif  // OUTBOXD_PG_COPY_DATA_H_
