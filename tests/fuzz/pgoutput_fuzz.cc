// libFuzzer target for the pgoutput decoder. Built by scripts/fuzz with clang,
// AddressSanitizer and UndefinedBehaviorSanitizer; seeds are the messages captured
// from a real server (tests/fuzz/corpus/pgoutput/, see
// tests/pgoutput/captured_messages.h).
//
// Beyond "does not crash", it checks what the decoder promises: errors are
// InvalidArgument, every string_view of a decoded message lies inside the input (each
// byte is read so ASan sees any view past the end), DecodeInto into a reused Message
// agrees with Decode, and a decoded Relation can be cached and replaced.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <variant>

#include "pgoutput/decoder.h"

namespace {

using namespace outboxd::pgoutput;

// Aborts (a finding) if the condition does not hold.
void Check(bool condition) {
  if (!condition) std::abort();
}

// Reads every byte of `view` and checks it lies within the input.
uint64_t Touch(std::string_view view, std::string_view input) {
  if (!view.empty()) {
    Check(view.data() >= input.data() && view.data() + view.size() <= input.data() + input.size());
  }
  uint64_t sum = 0;
  for (char c : view) sum += static_cast<unsigned char>(c);
  return sum;
}

uint64_t Touch(const Tuple& tuple, std::string_view input) {
  uint64_t sum = 0;
  for (const TupleValue& value : tuple) {
    if (value.kind == ValueKind::kNull || value.kind == ValueKind::kUnchangedToast) {
      Check(value.data.empty());
    }
    sum += Touch(value.data, input);
  }
  return sum;
}

uint64_t TouchMessage(const Message& message, std::string_view input) {
  if (const auto* insert = std::get_if<Insert>(&message)) return Touch(insert->tuple, input);
  if (const auto* update = std::get_if<Update>(&message)) {
    Check(update->old_kind == 0 || update->old_kind == 'K' || update->old_kind == 'O');
    if (update->old_kind == 0) Check(update->old_tuple.empty());
    return Touch(update->old_tuple, input) + Touch(update->new_tuple, input);
  }
  if (const auto* del = std::get_if<Delete>(&message)) return Touch(del->old_tuple, input);
  if (const auto* origin = std::get_if<Origin>(&message)) return Touch(origin->name, input);
  if (const auto* type = std::get_if<Type>(&message)) {
    return Touch(type->nspname, input) + Touch(type->name, input);
  }
  if (const auto* logical = std::get_if<LogicalMessage>(&message)) {
    return Touch(logical->prefix, input) + Touch(logical->content, input);
  }
  return 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  // Reused across inputs, like the relay's hot path: a stale alternative from the
  // previous input must never leak into this one.
  static Message* reused = new Message();

  absl::StatusOr<Message> decoded = Decode(input);
  const absl::Status reused_status = DecodeInto(input, *reused);
  Check(decoded.ok() == reused_status.ok());
  if (!decoded.ok()) {
    Check(decoded.status().code() == absl::StatusCode::kInvalidArgument);
    return 0;
  }
  Check(decoded->index() == reused->index());
  Check(TouchMessage(*decoded, input) == TouchMessage(*reused, input));

  if (auto* relation = std::get_if<Relation>(&*decoded)) {
    RelationCache cache;
    const uint32_t id = relation->id;
    const size_t columns = relation->columns.size();
    cache.Put(*relation);
    relation->columns.emplace_back();
    cache.Put(std::move(*relation));  // the second Relation for an id replaces the first
    const Relation* cached = cache.Find(id);
    Check(cached != nullptr && cached->columns.size() == columns + 1);
  }
  return 0;
}
