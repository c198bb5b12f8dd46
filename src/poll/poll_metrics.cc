#include "poll/poll_metrics.h"

#include "absl/strings/str_cat.h"

namespace outboxd::poll {
namespace {

void Add(std::string& out, absl::string_view name, absl::string_view type, absl::string_view help,
         uint64_t value) {
  absl::StrAppend(&out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n", name, " ",
                  value, "\n");
}

}  // namespace

std::string RenderPollMetrics(const PollStats& stats) {
  std::string out;
  Add(out, "outboxd_events_published_total", "counter",
      "Events acknowledged by the broker and marked published.", stats.events_published.load());
  Add(out, "outboxd_events_failed_total", "counter",
      "Failed publish attempts (each pushes the event's next attempt out).",
      stats.events_failed.load());
  Add(out, "outboxd_poll_batches_total", "counter", "Batches committed, empty ones included.",
      stats.batches.load());
  Add(out, "outboxd_poll_healthy", "gauge", "1 while the last batch reached COMMIT.",
      stats.healthy.load() ? 1 : 0);
  return out;
}

}  // namespace outboxd::poll
