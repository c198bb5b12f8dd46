#include "ops/endpoints.h"

#include "absl/time/clock.h"

namespace outboxd::ops {

void AddMetricsEndpoints(HttpServer& http, const Metrics& metrics, const HealthState& health,
                         HealthOptions options) {
  http.Handle("/metrics", [&metrics] {
    return HttpResponse{200, kMetricsContentType, metrics.Render()};
  });
  http.Handle("/healthz", [&health, options = std::move(options)] {
    HealthVerdict verdict = CheckHealth(health.Snapshot(), options.stall_threshold, absl::Now(),
                                        options.disconnected_reason);
    return HttpResponse{verdict.healthy ? 200 : 503, "text/plain; charset=utf-8",
                        verdict.reason + "\n"};
  });
}

}  // namespace outboxd::ops
