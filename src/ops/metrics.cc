#include "ops/metrics.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace outboxd::ops {
namespace {

void Add(std::string& out, absl::string_view name, absl::string_view type, absl::string_view help,
         double value) {
  absl::StrAppend(&out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n", name, " ",
                  value, "\n");
}

}  // namespace

std::string RenderMetrics(const relay::RelayStats& stats) {
  std::string out;
  Add(out, "outboxd_events_published_total", "counter", "Events acknowledged by the broker.",
      static_cast<double>(stats.events_published.load()));
  Add(out, "outboxd_events_failed_total", "counter",
      "Events that could not be published (poison payload, refused by the broker).",
      static_cast<double>(stats.events_failed.load()));
  Add(out, "outboxd_events_dead_lettered_total", "counter",
      "Events written to the dead-letter table instead of Kafka.",
      static_cast<double>(stats.events_dead_lettered.load()));
  Add(out, "outboxd_reconnects_total", "counter", "Replication stream reconnects.",
      static_cast<double>(stats.reconnects.load()));
  Add(out, "outboxd_events_in_flight", "gauge", "Events produced and not yet acknowledged.",
      static_cast<double>(stats.events_in_flight.load()));
  Add(out, "outboxd_received_lsn", "gauge", "Newest WAL position received from PostgreSQL.",
      static_cast<double>(stats.received_lsn.load()));
  Add(out, "outboxd_confirmed_lsn", "gauge",
      "WAL position confirmed to the slot (every event before it is acknowledged).",
      static_cast<double>(stats.confirmed_lsn.load()));
  int64_t oldest = stats.oldest_unacked_commit_us.load();
  double age = oldest == 0 ? 0 : (absl::ToUnixMicros(absl::Now()) - oldest) / 1e6;
  Add(out, "outboxd_oldest_unacked_age_seconds", "gauge",
      "Age of the oldest committed event not yet acknowledged by the broker.", age);
  Add(out, "outboxd_streaming", "gauge", "1 while the replication stream is open.",
      stats.streaming.load() ? 1 : 0);
  return out;
}

}  // namespace outboxd::ops
