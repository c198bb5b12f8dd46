// /metrics, /healthz, /readyz and the status page (/, observe/status_page.h) on an
// HttpServer, the same for `outboxd run` and `outboxd poll` (observe/health.h: what
// the probes answer).
//
//   observe::HttpServer http;
//   observe::AddMetricsEndpoints(http, stats.metrics, stats.health,
//                            {.stall_threshold = absl::Seconds(30)});
//   OUTBOXD_RETURN_IF_ERROR(http.Start("127.0.0.1:9187"));
#ifndef OUTBOXD_OBSERVE_ENDPOINTS_H_
#define OUTBOXD_OBSERVE_ENDPOINTS_H_

#include <string>

#include "absl/time/time.h"
#include "observe/health.h"
#include "observe/http_server.h"
#include "observe/metrics.h"

namespace outboxd::observe {

struct HealthOptions {
  // In-flight events with no acknowledgement for longer than this: 503.
  absl::Duration stall_threshold = absl::Seconds(30);
  // /healthz's body while not connected.
  std::string disconnected_reason = "not connected to PostgreSQL";
};

// `metrics` and `health` must outlive the server.
void AddMetricsEndpoints(HttpServer& http, const Metrics& metrics, const HealthState& health,
                         HealthOptions options);

}  // namespace outboxd::observe

#endif  // OUTBOXD_OBSERVE_ENDPOINTS_H_
