// Pure pgoutput decoder: bytes -> Message. No I/O, no allocation for Insert on the
// outbox table. Every read is bounds-checked: truncated or garbage input returns
// InvalidArgument, never reads out of bounds.
//
//   OUTBOXD_ASSIGN_OR_RETURN(Message m, Decode(xlog.data));
//   if (auto* ins = std::get_if<Insert>(&m)) { ... }
#ifndef OUTBOXD_PGOUTPUT_DECODER_H_
#define OUTBOXD_PGOUTPUT_DECODER_H_

#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pgoutput/messages.h"

namespace outboxd::pgoutput {

// Decodes one pgoutput message (protocol version 1: the payload of an XLogData,
// starting at its type byte). Errors are InvalidArgument: empty, truncated or
// trailing input, an unknown message type or tuple value kind, a count or length
// larger than the input holds. The result's string_views point into `bytes`.
absl::StatusOr<Message> Decode(std::string_view bytes);

// Decodes into an existing Message, reusing its storage (the hot path): an Insert of
// up to 16 columns into a Message that already holds an Insert does not allocate.
// On error `out` holds an unspecified, valid message; do not use its contents.
//
//   Message message;
//   while (...) { OUTBOXD_RETURN_IF_ERROR(DecodeInto(xlog.data, message)); ... }
absl::Status DecodeInto(std::string_view bytes, Message& out);

// Relation schemas by id. A Relation message for a known id replaces the cached
// schema (ALTER TABLE mid-stream).
class RelationCache {
 public:
  void Put(Relation relation);
  const Relation* Find(uint32_t id) const;

 private:
  absl::flat_hash_map<uint32_t, Relation> relations_;
};

}  // namespace outboxd::pgoutput

#endif  // OUTBOXD_PGOUTPUT_DECODER_H_
