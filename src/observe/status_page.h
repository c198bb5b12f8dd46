// GET / on the metrics port: one small HTML page a person can open in a browser to see
// how the relay is doing, with nothing to install (issue 18, point 4). No external
// asset and no framework: a few lines of inline JS fetch /metrics, /healthz, /readyz
// and /status.json (the server's last 5 minutes of counters, observe/status_history.h,
// so the charts have history as soon as the page opens) every 2 s, and draw inline
// SVG. Every figure on it comes from what Prometheus scrapes too.
//
//   http.Handle("/", [page = StatusPageHtml(RelayMode::kCdc)] {
//     return HttpResponse{200, "text/html; charset=utf-8", page};
//   });
//
// The elements a test or a script can read after the JS ran, by id: mode, state,
// health-reason, wal-status, safe-wal, slot-lag, oldest-age, published, rate, latency,
// dead-letters, rate-chart, latency-chart.
#ifndef OUTBOXD_OBSERVE_STATUS_PAGE_H_
#define OUTBOXD_OBSERVE_STATUS_PAGE_H_

#include <string>

#include "observe/metrics.h"

namespace outboxd::observe {

inline constexpr char kStatusPageContentType[] = "text/html; charset=utf-8";

// The page for a relay in `mode` ("cdc" for `outboxd run`, "poll" for `outboxd poll`).
std::string StatusPageHtml(RelayMode mode);

}  // namespace outboxd::observe

#endif  // OUTBOXD_OBSERVE_STATUS_PAGE_H_
