// The per-event cost between the decoder and the encoder, by payload size: a pgoutput
// Insert of the outbox table decoded and mapped to an OutboxEvent (views into the
// message, so the size should not matter), and the simdjson payload check every
// format pays (PayloadChecker: one parse into a reused parser).
//
//   build/bench/event_mapping_benchmark --benchmark_filter=BM_PayloadCheck
#include <cstdint>
#include <string>
#include <variant>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "outbox/event.h"
#include "outbox/payload_check.h"
#include "payloads.h"
#include "pgoutput/decoder.h"

namespace outboxd::outbox {
namespace {

constexpr uint32_t kRelationId = 16385;
constexpr uint32_t kTextOid = 25, kUuidOid = 2950, kJsonbOid = 3802, kTimestamptzOid = 1184;

// The mission's outbox table as its Relation message describes it.
pgoutput::Relation OutboxRelation() {
  return {.id = kRelationId,
          .nspname = "public",
          .relname = "outbox",
          .columns = {{.flags = 1, .name = "id", .type_oid = kUuidOid},
                      {.name = "aggregate_id", .type_oid = kTextOid},
                      {.name = "tipo", .type_oid = kTextOid},
                      {.name = "payload", .type_oid = kJsonbOid},
                      {.name = "criado_em", .type_oid = kTimestamptzOid},
                      {.name = "publicado_em", .type_oid = kTimestamptzOid}}};
}

void AppendBigEndian(std::string& out, uint32_t value, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) out.push_back(static_cast<char>(value >> (8 * i)));
}

// The Insert message the walsender sends for one row of that table.
std::string InsertBytes(const std::string& payload) {
  std::string bytes = "I";
  AppendBigEndian(bytes, kRelationId, 4);
  bytes += "N";
  AppendBigEndian(bytes, 6, 2);
  for (const std::string& value :
       {std::string("0b6f3c1e-2b1a-4c55-9d2e-7f00d1c0ffee"), std::string("pedido-77"),
        std::string("pedido.confirmado"), payload, std::string("2026-12-02 12:22:45.123+00")}) {
    bytes += "t";
    AppendBigEndian(bytes, static_cast<uint32_t>(value.size()), 4);
    bytes += value;
  }
  bytes += "n";  // publicado_em IS NULL
  return bytes;
}

// Decode + map, the relay's steps from the XLogData bytes to an event.
void BM_DecodeAndMap(benchmark::State& state) {
  const std::string payload = bench::OrderPayload(state.range(0));
  const std::string bytes = InsertBytes(payload);
  EventMapper mapper(ColumnMapping{});
  if (!mapper.SetRelation(OutboxRelation()).ok()) return state.SkipWithError("SetRelation failed");
  pgoutput::Message message;
  bool all_ok = true;
  size_t payload_size = 0;
  for (auto _ : state) {
    all_ok &= pgoutput::DecodeInto(bytes, message).ok();
    absl::StatusOr<OutboxEvent> event = mapper.Map(std::get<pgoutput::Insert>(message).tuple);
    all_ok &= event.ok();
    payload_size = event.ok() ? event->payload.size() : 0;
    benchmark::DoNotOptimize(payload_size);
  }
  if (!all_ok || payload_size != payload.size()) state.SkipWithError("decode or map failed");
  state.SetLabel(absl::StrCat(payload.size(), " B payload"));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_DecodeAndMap)->Arg(100)->Arg(1 << 10)->Arg(10 << 10)->Arg(64 << 10);

// The payload check alone: a JSON object or array, parsed once with simdjson.
void BM_PayloadCheck(benchmark::State& state) {
  const std::string payload = bench::OrderPayload(state.range(0));
  PayloadChecker checker;
  bool all_ok = true;
  for (auto _ : state) {
    all_ok &= checker.Check(payload).ok();
    benchmark::DoNotOptimize(checker.root());
  }
  if (!all_ok || !checker.root().is_object()) state.SkipWithError("the payload did not check");
  state.SetLabel(absl::StrCat(payload.size(), " B payload"));
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(payload.size()));
}
BENCHMARK(BM_PayloadCheck)->Arg(100)->Arg(1 << 10)->Arg(10 << 10)->Arg(64 << 10);

}  // namespace
}  // namespace outboxd::outbox
