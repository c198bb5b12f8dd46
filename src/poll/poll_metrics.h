// Prometheus text exposition of the polling relay's figures, served on /metrics by
// `outboxd poll` (names shared with `outboxd run` where the meaning is the same).
//
//   http.Handle("/metrics", [&stats] {
//     return ops::HttpResponse{200, "text/plain; version=0.0.4", RenderPollMetrics(stats)};
//   });
#ifndef OUTBOXD_POLL_POLL_METRICS_H_
#define OUTBOXD_POLL_POLL_METRICS_H_

#include <string>

#include "poll/poll_relay.h"

namespace outboxd::poll {

std::string RenderPollMetrics(const PollStats& stats);

}  // namespace outboxd::poll

#endif  // OUTBOXD_POLL_POLL_METRICS_H_
