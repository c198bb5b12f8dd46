// Payloads for the micro-benchmarks: an order event of about N bytes, shaped like
// the mission's examples (a few fields, a nested customer, a trace context, and a
// list of items filling the rest).
//
//   const std::string payload = outboxd::bench::OrderPayload(1024);
#ifndef OUTBOXD_BENCH_PAYLOADS_H_
#define OUTBOXD_BENCH_PAYLOADS_H_

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"

namespace outboxd::bench {

inline std::string OrderPayload(int64_t bytes) {
  std::string payload =
      R"({"pedidoId": "77", "customer": {"id": "c-1", "nome": "Ana Conceição"}, "total": 10.50, )"
      R"("trace": {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}, "itens": [)";
  for (int i = 0; static_cast<int64_t>(payload.size()) < bytes - 40; ++i) {
    absl::StrAppend(&payload, i ? ", " : "", R"({"sku": "SKU-)", i, R"(", "qty": )", i % 5 + 1, "}");
  }
  payload.append("]}");
  return payload;
}

}  // namespace outboxd::bench

#endif  // OUTBOXD_BENCH_PAYLOADS_H_
