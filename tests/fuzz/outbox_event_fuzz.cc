// libFuzzer target for the row -> event mapping and the payload check
// (outbox/event.h, outbox/payload_check.h): what the relays do with every outbox row,
// whatever the table's columns and the row's values. Built by scripts/fuzz with clang,
// ASan and UBSan; seeds in tests/fuzz/corpus/outbox_event/.
//
// The input is read as a small structure (FuzzInput below): a column list drawn from
// the mapped names and others, a row whose size may disagree with it, each value with
// a kind (NULL, unchanged TOAST, text, binary) and bytes, the last one running to the
// end of the input (the payload, usually). Checks: SetRelation fails only for a missing
// column, as FailedPrecondition; Map fails only as InvalidArgument; each field of an
// event is the row's own value (a view into the input), and so is each field
// MapPresent keeps of a row Map refused; the payload check answers OK
// only for a JSON object or array, InvalidArgument otherwise, and a reused checker
// (the relay's hot path) agrees with a fresh one; IsoTimestamp keeps the length or
// grows it by the ":00" of the offset.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "outbox/event.h"
#include "outbox/payload_check.h"
#include "pgoutput/messages.h"

namespace {

using namespace outboxd;

void Check(bool condition) {
  if (!condition) std::abort();
}

// Bytes taken from the front of the input; past its end every read is 0 or empty.
class FuzzInput {
 public:
  explicit FuzzInput(std::string_view bytes) : bytes_(bytes) {}
  uint8_t Byte() {
    if (bytes_.empty()) return 0;
    const auto b = static_cast<uint8_t>(bytes_[0]);
    bytes_.remove_prefix(1);
    return b;
  }
  // A length byte then that many bytes; 255 means "the rest".
  std::string_view Bytes() {
    const uint8_t n = Byte();
    const size_t take = n == 255 ? bytes_.size() : std::min<size_t>(n, bytes_.size());
    std::string_view out = bytes_.substr(0, take);
    bytes_.remove_prefix(take);
    return out;
  }

 private:
  std::string_view bytes_;
};

constexpr const char* kNames[] = {"id",        "aggregate_id", "tipo", "payload",
                                  "criado_em", "other",        ""};
constexpr pgoutput::ValueKind kKinds[] = {pgoutput::ValueKind::kText, pgoutput::ValueKind::kNull,
                                          pgoutput::ValueKind::kUnchangedToast,
                                          pgoutput::ValueKind::kBinary};

bool Inside(std::string_view view, std::string_view input) {
  return view.empty() ||
         (view.data() >= input.data() && view.data() + view.size() <= input.data() + input.size());
}

void CheckPayload(std::string_view payload, outbox::PayloadChecker& reused) {
  outbox::PayloadChecker fresh;
  const absl::Status status = fresh.Check(payload);
  Check(status.ok() || status.code() == absl::StatusCode::kInvalidArgument);
  const absl::Status again = reused.Check(payload);
  Check(again.ok() == status.ok());
  if (status.ok()) {
    const simdjson::dom::element_type type = fresh.root().type();
    Check(type == simdjson::dom::element_type::OBJECT ||
          type == simdjson::dom::element_type::ARRAY);
    Check(reused.root().type() == type);
    Check(std::string_view(reused.padded().data(), reused.padded().length()) == payload);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  static auto* reused = new outbox::PayloadChecker();
  FuzzInput in(input);

  pgoutput::Relation relation{.id = 1, .nspname = "public", .relname = "outbox"};
  const size_t columns = in.Byte() % 9;
  for (size_t i = 0; i < columns; ++i) {
    relation.columns.push_back({.name = kNames[in.Byte() % std::size(kNames)]});
  }
  const uint8_t shape = in.Byte();
  // Mostly as many values as columns; sometimes one fewer or one more.
  size_t values = columns;
  if (shape & 0x80) values = columns + shape % 3 == 0 ? 0 : columns + shape % 3 - 1;
  pgoutput::Tuple tuple;
  for (size_t i = 0; i < values; ++i) {
    const pgoutput::ValueKind kind = kKinds[in.Byte() % std::size(kKinds)];
    const std::string_view bytes = in.Bytes();
    const bool has_data =
        kind == pgoutput::ValueKind::kText || kind == pgoutput::ValueKind::kBinary;
    tuple.push_back({.kind = kind, .data = has_data ? bytes : std::string_view()});
  }

  outbox::EventMapper mapper(outbox::ColumnMapping{});
  const absl::Status related = mapper.SetRelation(relation);
  Check(related.ok() == mapper.ready());
  if (!related.ok()) {
    Check(related.code() == absl::StatusCode::kFailedPrecondition);
    return 0;
  }
  absl::StatusOr<outbox::OutboxEvent> event = mapper.Map(tuple);
  if (!event.ok()) {
    Check(event.status().code() == absl::StatusCode::kInvalidArgument);
    // A NULL in a mapped column: the relay dead-letters what the row holds.
    if (tuple.size() == mapper.column_count()) {
      const outbox::OutboxEvent present = mapper.MapPresent(tuple);
      for (std::string_view field :
           {present.id, present.aggregate_id, present.type, present.payload, present.created_at}) {
        Check(Inside(field, input));
      }
    }
    // The payload check still sees whatever a text value holds.
    for (const pgoutput::TupleValue& v : tuple) CheckPayload(v.data, *reused);
    return 0;
  }
  Check(tuple.size() == relation.columns.size());
  for (std::string_view field :
       {event->id, event->aggregate_id, event->type, event->payload, event->created_at}) {
    Check(Inside(field, input));
  }
  CheckPayload(event->payload, *reused);
  std::string buffer;
  const std::string_view iso = outbox::IsoTimestamp(event->created_at, buffer);
  Check(iso.size() == event->created_at.size() || iso.size() == event->created_at.size() + 3);
  return 0;
}
