// pgoutput decoder, protocol version 1: one function per message type.
//
// Layout: https://www.postgresql.org/docs/current/protocol-logicalrep-message-formats.html
// Every message starts with a Byte1 type tag. Integers are big-endian ("IntN" on that
// page), strings are NUL-terminated ("String"). The comments above each Decode*
// function give the fields after the tag, in order. Protocol version 1 without
// streaming never sends the transaction-id field the page marks "only present for
// streamed transactions", so it is not read here.
#include "pgoutput/decoder.h"

#include <cctype>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "absl/base/attributes.h"
#include "absl/base/optimization.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "base/annotate.h"
#include "base/status_macros.h"
#include "pgoutput/internal/byte_reader.h"

namespace outboxd::pgoutput {
namespace {

using internal::ByteReader;

// The smallest a Relation column can be on the wire: flags, an empty name's NUL, type
// OID and type modifier. Used to reject column counts the input cannot hold.
constexpr size_t kMinRelationColumnBytes = 1 + 1 + 4 + 4;

// Returns the T alternative of `out`, switching only if it holds another one, so a
// reused Message keeps the capacity of its tuples, vectors and strings. Each Decode*
// function therefore assigns every field of its message.
template <typename T>
T& Reuse(Message& out) {
  if (T* existing = std::get_if<T>(&out)) return *existing;
  return out.emplace<T>();
}

ABSL_ATTRIBUTE_NOINLINE ABSL_ATTRIBUTE_COLD absl::Status Invalid(absl::string_view what) {
  return absl::InvalidArgumentError(what);
}

// "0x53 ('S')" for printable bytes, "0x00" otherwise.
std::string DescribeByte(uint8_t byte) {
  std::string out = absl::StrCat("0x", absl::Hex(byte, absl::kZeroPad2));
  if (std::isprint(byte)) {
    absl::StrAppend(&out, " ('", std::string(1, static_cast<char>(byte)), "')");
  }
  return out;
}

ABSL_ATTRIBUTE_NOINLINE ABSL_ATTRIBUTE_COLD absl::Status AnnotateError(const absl::Status& status,
                                                                       const char* message) {
  return Annotate(status, absl::StrCat("pgoutput ", message, " message: "));
}

// TupleData (inside Insert, Update, Delete):
//   Int16  number of columns
//   per column:
//     Byte1  'n' NULL | 'u' unchanged TOASTed value (not sent) | 't' text | 'b' binary
//     for 't' and 'b' only:
//       Int32  length of the value
//       Byten  the value (text: the type's output function; binary: its send function)
absl::Status DecodeTupleData(ByteReader& r, Tuple& out) {
  OUTBOXD_ASSIGN_OR_RETURN(uint16_t column_count, r.ReadU16("tuple column count"));
  // Every column takes at least its kind byte; a count the input cannot hold is
  // garbage and must not size the tuple.
  if (ABSL_PREDICT_FALSE(column_count > r.remaining())) {
    return Invalid(absl::StrCat("tuple column count ", column_count, " exceeds the ", r.remaining(),
                                " bytes left"));
  }
  // resize, not clear: clear() frees a heap buffer that the next row would reallocate.
  out.resize(column_count);
  for (size_t i = 0; i < column_count; ++i) {
    TupleValue& value = out[i];
    OUTBOXD_ASSIGN_OR_RETURN(uint8_t kind, r.ReadU8("tuple value kind"));
    switch (kind) {
      case 'n':
      case 'u':
        value.kind = static_cast<ValueKind>(kind);
        value.data = {};
        break;
      case 't':
      case 'b': {
        OUTBOXD_ASSIGN_OR_RETURN(int32_t length, r.ReadI32("tuple value length"));
        if (ABSL_PREDICT_FALSE(length < 0)) {
          return Invalid(absl::StrCat("negative length ", length, " in tuple column ", i));
        }
        OUTBOXD_RETURN_IF_ERROR(
            r.ReadBytes(static_cast<size_t>(length), "tuple value", value.data));
        value.kind = static_cast<ValueKind>(kind);
        break;
      }
      default:
        return Invalid(
            absl::StrCat("unknown tuple value kind ", DescribeByte(kind), " in column ", i));
    }
  }
  return absl::OkStatus();
}

// Begin, 'B':
//   Int64  final LSN of the transaction (its commit record)
//   Int64  commit timestamp, microseconds since 2000-01-01
//   Int32  xid
absl::Status DecodeBegin(ByteReader& r, Begin& out) {
  OUTBOXD_ASSIGN_OR_RETURN(out.final_lsn, r.ReadU64("final LSN"));
  OUTBOXD_ASSIGN_OR_RETURN(out.commit_time, r.ReadI64("commit timestamp"));
  OUTBOXD_ASSIGN_OR_RETURN(out.xid, r.ReadU32("xid"));
  return absl::OkStatus();
}

// Commit, 'C':
//   Int8   flags (currently unused, 0)
//   Int64  LSN of the commit record
//   Int64  end LSN of the transaction (what the client confirms)
//   Int64  commit timestamp, microseconds since 2000-01-01
absl::Status DecodeCommit(ByteReader& r, Commit& out) {
  OUTBOXD_ASSIGN_OR_RETURN(out.flags, r.ReadU8("flags"));
  OUTBOXD_ASSIGN_OR_RETURN(out.commit_lsn, r.ReadU64("commit LSN"));
  OUTBOXD_ASSIGN_OR_RETURN(out.end_lsn, r.ReadU64("end LSN"));
  OUTBOXD_ASSIGN_OR_RETURN(out.commit_time, r.ReadI64("commit timestamp"));
  return absl::OkStatus();
}

// Origin, 'O' (after Begin, when the transaction came from a replication origin):
//   Int64   LSN of the commit on the origin server
//   String  origin name
absl::Status DecodeOrigin(ByteReader& r, Origin& out) {
  OUTBOXD_ASSIGN_OR_RETURN(out.commit_lsn, r.ReadU64("origin commit LSN"));
  OUTBOXD_ASSIGN_OR_RETURN(out.name, r.ReadCString("origin name"));
  return absl::OkStatus();
}

bool IsReplicaIdentity(uint8_t c) { return c == 'd' || c == 'n' || c == 'f' || c == 'i'; }

// Relation, 'R' (before the first change of a relation, and again after its schema
// changes):
//   Int32   relation OID
//   String  namespace ("" for pg_catalog)
//   String  relation name
//   Int8    replica identity: 'd' default, 'n' nothing, 'f' full, 'i' index
//   Int16   number of columns
//   per column:
//     Int8    flags (1: part of the replica identity key)
//     String  name
//     Int32   type OID
//     Int32   type modifier (atttypmod, -1 when none)
absl::Status DecodeRelation(ByteReader& r, Relation& out) {
  OUTBOXD_ASSIGN_OR_RETURN(out.id, r.ReadU32("relation OID"));
  OUTBOXD_ASSIGN_OR_RETURN(std::string_view nspname, r.ReadCString("namespace"));
  OUTBOXD_ASSIGN_OR_RETURN(std::string_view relname, r.ReadCString("relation name"));
  OUTBOXD_ASSIGN_OR_RETURN(uint8_t identity, r.ReadU8("replica identity"));
  if (ABSL_PREDICT_FALSE(!IsReplicaIdentity(identity))) {
    return Invalid(absl::StrCat("unknown replica identity ", DescribeByte(identity)));
  }
  OUTBOXD_ASSIGN_OR_RETURN(uint16_t column_count, r.ReadU16("column count"));
  if (ABSL_PREDICT_FALSE(column_count > r.remaining() / kMinRelationColumnBytes)) {
    return Invalid(
        absl::StrCat("column count ", column_count, " exceeds the ", r.remaining(), " bytes left"));
  }
  out.nspname.assign(nspname);
  out.relname.assign(relname);
  out.replica_identity = static_cast<char>(identity);
  out.columns.resize(column_count);
  for (RelationColumn& column : out.columns) {
    OUTBOXD_ASSIGN_OR_RETURN(column.flags, r.ReadU8("column flags"));
    OUTBOXD_ASSIGN_OR_RETURN(std::string_view name, r.ReadCString("column name"));
    column.name.assign(name);
    OUTBOXD_ASSIGN_OR_RETURN(column.type_oid, r.ReadU32("column type OID"));
    OUTBOXD_ASSIGN_OR_RETURN(column.type_modifier, r.ReadI32("column type modifier"));
  }
  return absl::OkStatus();
}

// Type, 'Y' (before a Relation with a column of a non-built-in type):
//   Int32   type OID
//   String  namespace ("" for pg_catalog)
//   String  type name
absl::Status DecodeType(ByteReader& r, Type& out) {
  OUTBOXD_ASSIGN_OR_RETURN(out.id, r.ReadU32("type OID"));
  OUTBOXD_ASSIGN_OR_RETURN(out.nspname, r.ReadCString("namespace"));
  OUTBOXD_ASSIGN_OR_RETURN(out.name, r.ReadCString("type name"));
  return absl::OkStatus();
}

// Reads the Byte1 tag that announces a TupleData and checks it is `expected`.
absl::Status ExpectTupleTag(ByteReader& r, uint8_t expected) {
  OUTBOXD_ASSIGN_OR_RETURN(uint8_t tag, r.ReadU8("tuple tag"));
  if (ABSL_PREDICT_FALSE(tag != expected)) {
    return Invalid(
        absl::StrCat("expected tuple tag ", DescribeByte(expected), ", got ", DescribeByte(tag)));
  }
  return absl::OkStatus();
}

// Insert, 'I':
//   Int32      relation OID
//   Byte1      'N' (a new tuple follows)
//   TupleData  the new row
absl::Status DecodeInsert(ByteReader& r, Insert& out) {
  OUTBOXD_ASSIGN_OR_RETURN(out.relation_id, r.ReadU32("relation OID"));
  OUTBOXD_RETURN_IF_ERROR(ExpectTupleTag(r, 'N'));
  return DecodeTupleData(r, out.tuple);
}

// Update, 'U':
//   Int32      relation OID
//   optional, only when the key changed ('K': the old key columns) or the relation is
//   REPLICA IDENTITY FULL ('O': the whole old row):
//     Byte1      'K' or 'O'
//     TupleData  the old key or row
//   Byte1      'N'
//   TupleData  the new row ('u' for TOASTed columns that did not change)
absl::Status DecodeUpdate(ByteReader& r, Update& out) {
  OUTBOXD_ASSIGN_OR_RETURN(out.relation_id, r.ReadU32("relation OID"));
  OUTBOXD_ASSIGN_OR_RETURN(uint8_t tag, r.ReadU8("tuple tag"));
  if (tag == 'K' || tag == 'O') {
    out.old_kind = static_cast<char>(tag);
    OUTBOXD_RETURN_IF_ERROR(DecodeTupleData(r, out.old_tuple));
    OUTBOXD_ASSIGN_OR_RETURN(tag, r.ReadU8("tuple tag"));
  } else {
    out.old_kind = 0;
    out.old_tuple.resize(0);
  }
  if (ABSL_PREDICT_FALSE(tag != 'N')) {
    return Invalid(absl::StrCat("expected tuple tag 'K', 'O' or 'N', got ", DescribeByte(tag)));
  }
  return DecodeTupleData(r, out.new_tuple);
}

// Delete, 'D':
//   Int32      relation OID
//   Byte1      'K' (old key columns) or 'O' (whole old row, REPLICA IDENTITY FULL)
//   TupleData  the old key or row
absl::Status DecodeDelete(ByteReader& r, Delete& out) {
  OUTBOXD_ASSIGN_OR_RETURN(out.relation_id, r.ReadU32("relation OID"));
  OUTBOXD_ASSIGN_OR_RETURN(uint8_t tag, r.ReadU8("tuple tag"));
  if (ABSL_PREDICT_FALSE(tag != 'K' && tag != 'O')) {
    return Invalid(absl::StrCat("expected tuple tag 'K' or 'O', got ", DescribeByte(tag)));
  }
  out.old_kind = static_cast<char>(tag);
  return DecodeTupleData(r, out.old_tuple);
}

// Truncate, 'T' (one message for all relations of one TRUNCATE statement):
//   Int32      number of relations
//   Int8       options (1: CASCADE, 2: RESTART IDENTITY; a bit set)
//   Int32 × n  relation OIDs
absl::Status DecodeTruncate(ByteReader& r, Truncate& out) {
  OUTBOXD_ASSIGN_OR_RETURN(uint32_t count, r.ReadU32("relation count"));
  OUTBOXD_ASSIGN_OR_RETURN(out.options, r.ReadU8("options"));
  if (ABSL_PREDICT_FALSE(count > r.remaining() / 4)) {
    return Invalid(
        absl::StrCat("relation count ", count, " exceeds the ", r.remaining(), " bytes left"));
  }
  out.relation_ids.resize(count);
  for (uint32_t& id : out.relation_ids) {
    OUTBOXD_ASSIGN_OR_RETURN(id, r.ReadU32("relation OID"));
  }
  return absl::OkStatus();
}

// Message, 'M' (pg_logical_emit_message, only with the `messages` option; a
// non-transactional one arrives outside any Begin/Commit):
//   Int8    flags (1: transactional)
//   Int64   LSN of the message
//   String  prefix
//   Int32   content length
//   Byten   content
absl::Status DecodeLogicalMessage(ByteReader& r, LogicalMessage& out) {
  OUTBOXD_ASSIGN_OR_RETURN(out.flags, r.ReadU8("flags"));
  OUTBOXD_ASSIGN_OR_RETURN(out.lsn, r.ReadU64("message LSN"));
  OUTBOXD_ASSIGN_OR_RETURN(out.prefix, r.ReadCString("prefix"));
  OUTBOXD_ASSIGN_OR_RETURN(int32_t length, r.ReadI32("content length"));
  if (ABSL_PREDICT_FALSE(length < 0)) {
    return Invalid(absl::StrCat("negative content length ", length));
  }
  OUTBOXD_ASSIGN_OR_RETURN(out.content, r.ReadBytes(static_cast<size_t>(length), "content"));
  return absl::OkStatus();
}

// Decodes the body into the T alternative of `out`, then insists the layout used every
// byte. Errors are prefixed with the message name.
template <typename T>
absl::Status DecodeAs(ByteReader& r, Message& out, absl::Status (*decode)(ByteReader&, T&),
                      const char* name) {
  absl::Status status = decode(r, Reuse<T>(out));
  if (ABSL_PREDICT_TRUE(status.ok())) status = r.ExpectEnd(name);
  if (ABSL_PREDICT_FALSE(!status.ok())) return AnnotateError(status, name);
  return status;
}

}  // namespace

absl::Status DecodeInto(std::string_view bytes, Message& out) {
  ByteReader r(bytes);
  if (ABSL_PREDICT_FALSE(r.empty())) return Invalid("pgoutput: empty message");
  const uint8_t type = *r.ReadU8("message type");
  switch (type) {
    case 'B':
      return DecodeAs<Begin>(r, out, DecodeBegin, "Begin");
    case 'C':
      return DecodeAs<Commit>(r, out, DecodeCommit, "Commit");
    case 'O':
      return DecodeAs<Origin>(r, out, DecodeOrigin, "Origin");
    case 'R':
      return DecodeAs<Relation>(r, out, DecodeRelation, "Relation");
    case 'Y':
      return DecodeAs<Type>(r, out, DecodeType, "Type");
    case 'I':
      return DecodeAs<Insert>(r, out, DecodeInsert, "Insert");
    case 'U':
      return DecodeAs<Update>(r, out, DecodeUpdate, "Update");
    case 'D':
      return DecodeAs<Delete>(r, out, DecodeDelete, "Delete");
    case 'T':
      return DecodeAs<Truncate>(r, out, DecodeTruncate, "Truncate");
    case 'M':
      return DecodeAs<LogicalMessage>(r, out, DecodeLogicalMessage, "Message");
    default:
      // Streaming ('S', 'E', 'c', 'A') and two-phase ('b', 'P', 'K', 'r', 's') messages
      // exist only in protocol versions 2 and later, which outboxd never requests.
      return Invalid(absl::StrCat("pgoutput: unknown message type ", DescribeByte(type),
                                  " (only protocol version 1 is supported)"));
  }
}

absl::StatusOr<Message> Decode(std::string_view bytes) {
  Message message;
  OUTBOXD_RETURN_IF_ERROR(DecodeInto(bytes, message));
  return message;
}

void RelationCache::Put(Relation relation) {
  const uint32_t id = relation.id;
  relations_.insert_or_assign(id, std::move(relation));
}

const Relation* RelationCache::Find(uint32_t id) const {
  auto it = relations_.find(id);
  return it == relations_.end() ? nullptr : &it->second;
}

}  // namespace outboxd::pgoutput
