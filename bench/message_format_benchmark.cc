// The per-event cost of the message format (outbox/message_format.h): one event
// encoded per iteration, by value format and payload size, with and without the
// payload headers and key of --header / --key-pointer. The payload check (one
// simdjson parse) is part of every figure: the relay pays it in every format.
//
//   build/bench/message_format_benchmark --benchmark_filter=BM_Encode
#include <string>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "outbox/message_format.h"
#include "payloads.h"

namespace outboxd::outbox {
namespace {

void Encode(benchmark::State& state, MessageFormat format, std::string_view headers = "") {
  const std::string payload = bench::OrderPayload(state.range(1));
  const OutboxEvent event{.id = "0b6f3c1e-2b1a-4c55-9d2e-7f00d1c0ffee",
                          .aggregate_id = "pedido-77",
                          .type = "pedido.confirmado",
                          .payload = payload,
                          .created_at = "2026-12-02 12:22:45.123+00",
                          .headers = headers};
  format.format = static_cast<ValueFormat>(state.range(0));
  MessageEncoder encoder(format);
  bool all_ok = true;
  for (auto _ : state) {
    all_ok &= encoder.Encode(event, "0/16B3748").ok();
    benchmark::DoNotOptimize(encoder.message().value.data());
  }
  // The result must decode back to the payload, or the figure measured nothing useful.
  absl::StatusOr<std::string_view> back =
      encoder.PayloadOf(encoder.message().value, encoder.message().headers);
  if (!all_ok || !back.ok() || *back != payload ||
      (!format.key_pointer.empty() && encoder.message().key != "c-1")) {
    state.SkipWithError("encoding failed or does not decode back to the payload");
  }
  state.SetLabel(absl::StrCat(std::string(ValueFormatName(format.format)), " ", payload.size(), " B"));
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(payload.size()));
}

// Formats: 0 json, 1 envelope, 2 protobuf, 3 cloudevents, 4 cloudevents-json; payloads
// of 100 B, 1 KiB, 10 KiB.
void FormatsAndSizes(benchmark::internal::Benchmark* b) {
  b->ArgsProduct({{0, 1, 2, 3, 4}, {100, 1 << 10, 10 << 10}})->ArgNames({"format", "bytes"});
}

void BM_Encode(benchmark::State& state) { Encode(state, {}); }
BENCHMARK(BM_Encode)->Apply(FormatsAndSizes);

// Two --header pointers (a string and a decimal, which takes a second look) and the
// key from a payload field.
void BM_EncodeWithPointers(benchmark::State& state) {
  Encode(state, {.headers = {{"traceparent", "/trace/traceparent"}, {"total", "/total"}},
                 .key_pointer = "/customer/id"});
}
BENCHMARK(BM_EncodeWithPointers)->Apply(FormatsAndSizes);

// A W3C trace context from the row's headers column (--headers-column, issue 32): the
// column's JSON parsed, both values checked, and in the CloudEvents formats copied as
// the distributed-tracing extension.
void BM_EncodeWithTraceContext(benchmark::State& state) {
  Encode(state, {.ce_source = "/outboxd/app/outbox", .ce_prefix = "ce_"},
         R"({"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", )"
         R"("tracestate": "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"})");
}
BENCHMARK(BM_EncodeWithTraceContext)->Apply(FormatsAndSizes);

}  // namespace
}  // namespace outboxd::outbox
