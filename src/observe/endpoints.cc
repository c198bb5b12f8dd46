#include "observe/endpoints.h"

#include <memory>

#include "absl/time/clock.h"
#include "observe/status_history.h"
#include "observe/status_page.h"

namespace outboxd::observe {
namespace {

HttpResponse VerdictResponse(const HealthVerdict& verdict) {
  return HttpResponse{verdict.healthy ? 200 : 503, "text/plain; charset=utf-8",
                      verdict.reason + "\n"};
}

}  // namespace

void AddMetricsEndpoints(HttpServer& http, const Metrics& metrics, const HealthState& health,
                         HealthOptions options) {
  http.Handle("/", [page = StatusPageHtml(metrics.mode())] {
    return HttpResponse{200, kStatusPageContentType, page};
  });
  // Owned by the handler, so the sampling thread stops when the server goes (before
  // `metrics`, which the caller keeps longer).
  auto history = std::make_shared<StatusHistory>(metrics);
  history->Start();
  http.Handle("/status.json", [history] {
    return HttpResponse{200, "application/json", history->Json()};
  });
  http.Handle("/metrics", [&metrics] {
    return HttpResponse{200, kMetricsContentType, metrics.Render()};
  });
  http.Handle("/healthz", [&health, options] {
    return VerdictResponse(CheckHealth(health.Snapshot(), options.stall_threshold, absl::Now(),
                                       options.disconnected_reason));
  });
  http.Handle("/readyz", [&health, options = std::move(options)] {
    return VerdictResponse(CheckReadiness(health.Snapshot(), options.stall_threshold, absl::Now(),
                                          options.disconnected_reason));
  });
}

}  // namespace outboxd::observe
