// Prometheus text exposition of the relay's live figures (minimal for now: the
// operations issue replaces it with prometheus-cpp's registry).
#ifndef OUTBOXD_OPS_METRICS_H_
#define OUTBOXD_OPS_METRICS_H_

#include <string>

#include "relay/relay.h"

namespace outboxd::ops {

std::string RenderMetrics(const relay::RelayStats& stats);

}  // namespace outboxd::ops

#endif  // OUTBOXD_OPS_METRICS_H_
