// The pgoutput logical replication messages, protocol version 1.
// Layout: https://www.postgresql.org/docs/current/protocol-logicalrep-message-formats.html
// Decoded messages hold string_views into the input buffer: they are valid only as
// long as the bytes passed to Decode().
#ifndef OUTBOXD_PGOUTPUT_MESSAGES_H_
#define OUTBOXD_PGOUTPUT_MESSAGES_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/container/inlined_vector.h"

namespace outboxd::pgoutput {

using Lsn = uint64_t;

struct Begin {
  Lsn final_lsn = 0;        // LSN of the commit record
  int64_t commit_time = 0;  // microseconds since 2000-01-01
  uint32_t xid = 0;
};

struct Commit {
  uint8_t flags = 0;
  Lsn commit_lsn = 0;  // LSN of the commit record
  Lsn end_lsn = 0;     // end of the commit record: the position to confirm
  int64_t commit_time = 0;
};

struct Origin {
  Lsn commit_lsn = 0;
  std::string_view name;
};

struct RelationColumn {
  uint8_t flags = 0;  // 1: part of the replica identity key
  std::string name;
  uint32_t type_oid = 0;
  int32_t type_modifier = 0;
};

// Owns its strings: relations are cached across messages.
struct Relation {
  uint32_t id = 0;
  std::string nspname;
  std::string relname;
  char replica_identity = 'd';
  std::vector<RelationColumn> columns;
};

struct Type {
  uint32_t id = 0;
  std::string_view nspname;
  std::string_view name;
};

enum class ValueKind : char {
  kNull = 'n',
  kUnchangedToast = 'u',
  kText = 't',
  kBinary = 'b',
};

struct TupleValue {
  ValueKind kind = ValueKind::kNull;
  std::string_view data;  // empty unless kText / kBinary
};

// Inline capacity covers the outbox table without a heap allocation per row.
using Tuple = absl::InlinedVector<TupleValue, 16>;

struct Insert {
  uint32_t relation_id = 0;
  Tuple tuple;
};

struct Update {
  uint32_t relation_id = 0;
  char old_kind = 0;  // 0 (absent), 'K' (key) or 'O' (old row)
  Tuple old_tuple;
  Tuple new_tuple;
};

struct Delete {
  uint32_t relation_id = 0;
  char old_kind = 'K';  // 'K' or 'O'
  Tuple old_tuple;
};

struct Truncate {
  uint8_t options = 0;  // 1: CASCADE, 2: RESTART IDENTITY
  std::vector<uint32_t> relation_ids;
};

// Logical decoding message (pg_logical_emit_message); sent only with messages 'true'.
struct LogicalMessage {
  uint8_t flags = 0;  // 1: transactional
  Lsn lsn = 0;
  std::string_view prefix;
  std::string_view content;
};

using Message = std::variant<Begin, Commit, Origin, Relation, Type, Insert, Update, Delete,
                             Truncate, LogicalMessage>;

}  // namespace outboxd::pgoutput

#endif  // OUTBOXD_PGOUTPUT_MESSAGES_H_
