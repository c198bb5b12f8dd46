#include "observe/metrics.h"

#include <limits>
#include <utility>
#include <vector>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace outboxd::observe {
namespace {

// From the live target (p50 <= 2 ms, hence 0.5, 1, 1.5 and 2 ms) to a broker outage of
// minutes.
const prometheus::Histogram::BucketBoundaries kLatencyBuckets = {
    0.0005, 0.001, 0.0015, 0.002, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300};
// Topics with a series of their own in outboxd_events_published_total; every later one
// counts in the one series topic="(other)". Each series is a /metrics line and a time
// series in Prometheus, kept until the process ends: 3,000 event types under --topic
// "{type}" grew /metrics from 6.9 kB to 694 kB (issue 27; 237 kB with 35-byte types in
// tests/observe/metrics_test.cc, 14.5 kB with this cap). 100 covers the few dozen types
// of a real outbox with room to spare. "(other)" cannot be a Kafka topic (no
// parentheses there), so it never hides a real one.
constexpr size_t kMaxTopicSeries = 100;
constexpr char kOtherTopic[] = "(other)";

// Pickup stages are sub-millisecond when all is well: finer at the bottom.
const prometheus::Histogram::BucketBoundaries kPickupBuckets = {
    0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.1, 1, 10};

prometheus::Counter& NewCounter(prometheus::Registry& registry, const std::string& name,
                                const std::string& help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(registry).Add({});
}

prometheus::Gauge& NewGauge(prometheus::Registry& registry, const std::string& name,
                            const std::string& help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(registry).Add({});
}

}  // namespace

// Every family is registered in the constructor: a scrape shows each metric (at 0)
// from the start, so alerts see a value rather than an absent series. Families of the
// other mode are left out (a poll relay has no slot, no LSN and no dead letters).
struct Metrics::Families {
  prometheus::Family<prometheus::Counter>* published = nullptr;
  prometheus::Counter* publish_errors = nullptr;
  prometheus::Histogram* latency = nullptr;
  prometheus::Gauge* in_flight = nullptr;
  prometheus::Gauge* oldest_age = nullptr;
  prometheus::Counter* reconnects = nullptr;
  prometheus::Gauge* connected = nullptr;
  prometheus::Gauge* unsafe_kafka = nullptr;
  // run
  prometheus::Counter* dead_lettered = nullptr;
  prometheus::Family<prometheus::Counter>* rejected = nullptr;
  prometheus::Family<prometheus::Counter>* dedupe_fallbacks = nullptr;
  prometheus::Family<prometheus::Counter>* headers_dropped = nullptr;
  prometheus::Counter* dedupe_skipped = nullptr;
  prometheus::Gauge* confirmed_lsn = nullptr;
  prometheus::Gauge* received_lsn = nullptr;
  prometheus::Gauge* slot_lag = nullptr;
  prometheus::Gauge* default_partition_rows = nullptr;
  prometheus::Counter* cleanup_rounds = nullptr;
  std::vector<std::pair<std::string, prometheus::Gauge*>> wal_status;
  prometheus::Gauge* safe_wal_size = nullptr;
  prometheus::Family<prometheus::Gauge>* primary_info = nullptr;
  prometheus::Gauge* primary = nullptr;  // the current series of primary_info
  prometheus::Counter* primary_changes = nullptr;
  prometheus::Gauge* primary_changed_at = nullptr;
  prometheus::Family<prometheus::Gauge>* standby_lag = nullptr;
  prometheus::Family<prometheus::Gauge>* standby_waiting = nullptr;
  prometheus::Gauge* catchup_eta = nullptr;
  prometheus::Counter* bulk_changes = nullptr;
  prometheus::Histogram* pickup_postgresql = nullptr;
  prometheus::Histogram* pickup_relay = nullptr;
  // poll
  prometheus::Counter* batches = nullptr;
};

Metrics::Metrics(RelayMode mode)
    : mode_(mode),
      registry_(std::make_shared<prometheus::Registry>()),
      families_(std::make_unique<Families>()) {
  prometheus::Registry& r = *registry_;
  Families& f = *families_;
  f.published = &prometheus::BuildCounter()
                     .Name("outboxd_events_published_total")
                     .Help(absl::StrCat("Events acknowledged by the broker, by topic: the first ",
                                        kMaxTopicSeries,
                                        " topics since start each have a series, any later "
                                        "one counts in topic=\"",
                                        kOtherTopic, "\"."))
                     .Register(r);
  f.publish_errors = &NewCounter(
      r, "outboxd_publish_errors_total",
      mode == RelayMode::kCdc
          ? "Events the producer or the broker refused for good (topic name, size, "
            "authorisation), each then dead-lettered; poison payloads and the events that "
            "follow a dead letter count only in outboxd_events_dead_lettered_total."
          : "Failed publish attempts (each pushes the event's next attempt out).");
  f.latency = &prometheus::BuildHistogram()
                   .Name("outboxd_commit_to_ack_seconds")
                   .Help(mode == RelayMode::kCdc
                             ? "Time from the transaction's commit to the broker's acknowledgement."
                             : "Time from the row's created_at to the broker's acknowledgement.")
                   .Register(r)
                   .Add({}, kLatencyBuckets);
  f.in_flight = &NewGauge(r, "outboxd_events_in_flight",
                          "Events handed to the producer and not yet acknowledged.");
  f.oldest_age = &NewGauge(
      r, "outboxd_oldest_unacked_age_seconds",
      mode == RelayMode::kCdc
          ? "Age of the oldest committed event read from the slot and not yet acknowledged."
          : "Age of the oldest outbox row not yet published.");
  f.reconnects = &NewCounter(r, "outboxd_reconnects_total",
                             mode == RelayMode::kCdc ? "Replication stream reconnects."
                                                     : "Reconnects after a failed batch.");
  f.connected = &NewGauge(r, "outboxd_connected",
                          mode == RelayMode::kCdc ? "1 while the replication stream is open."
                                                  : "1 while the last batch reached COMMIT.");
  f.unsafe_kafka = &NewGauge(r, "outboxd_unsafe_kafka_config",
                             "1 when --allow-unsafe-kafka let a --kafka setting weaken delivery "
                             "(events may be lost or reordered).");
  f.headers_dropped =
      &prometheus::BuildCounter()
           .Name("outboxd_headers_dropped_total")
           .Help(
               "Headers left out of a published event, by header and reason: a "
               "traceparent or tracestate that breaks the W3C Trace Context format, or "
               "(--format cloudevents) a row's header under the binding's prefix "
               "(cloudevents_attribute); docs/tracing.md. The event itself is published.")
           .Register(r);
  f.dedupe_fallbacks =
      &prometheus::BuildCounter()
           .Name("outboxd_dedupe_fallbacks_total")
           .Help(mode == RelayMode::kCdc
                     ? "Topics (or partitions) that --dedupe could not read back whole after a "
                       "(re)connect, by reason: no_read_permission, retention, "
                       "window_too_large, timeout, unavailable, in_flight. Their events may "
                       "be sent again (at least once)."
                     : "Topics (or partitions) that --dedupe could not read back whole for "
                       "rows an interrupted batch held, by reason (as for run). Those rows "
                       "may be sent again (at least once).")
           .Register(r);
  f.dedupe_skipped = &NewCounter(
      r, "outboxd_dedupe_skipped_total",
      mode == RelayMode::kCdc
          ? "Events of a resumed window not sent again because the broker already held them "
            "(--dedupe)."
          : "Rows an interrupted batch held that were not sent again because the broker "
            "already held them (--dedupe).");
  if (mode == RelayMode::kCdc) {
    f.dead_lettered = &NewCounter(r, "outboxd_events_dead_lettered_total",
                                  "Events written to the dead-letter table instead of Kafka.");
    f.rejected = &prometheus::BuildCounter()
                      .Name("outboxd_messages_rejected_total")
                      .Help(
                          "Messages with outboxd's prefix that are no event, by reason: "
                          "unsigned or bad_signature (not written by outboxd_emit), "
                          "invalid_field, too_large, non_transactional. Never published, "
                          "never dead-lettered (docs/security.md).")
                      .Register(r);
    f.confirmed_lsn =
        &NewGauge(r, "outboxd_confirmed_lsn",
                  "WAL position confirmed to the slot (every event before it is acknowledged).");
    f.received_lsn =
        &NewGauge(r, "outboxd_received_lsn", "Newest WAL position received from PostgreSQL.");
    f.slot_lag = &NewGauge(r, "outboxd_slot_lag_bytes",
                           "WAL the slot retains: pg_current_wal_lsn() - confirmed_flush_lsn.");
    f.default_partition_rows =
        &NewGauge(r, "outboxd_outbox_default_partition_rows",
                  "Rows the last cleanup round found in the partitioned outbox's DEFAULT "
                  "partition (above 0: partition upkeep fell behind).");
    f.cleanup_rounds = &NewCounter(r, "outboxd_cleanup_rounds_total",
                                   "Rounds the cleanup job (--cleanup-interval) completed.");
    auto& wal_status = prometheus::BuildGauge()
                           .Name("outboxd_slot_wal_status")
                           .Help("1 for the slot's wal_status as last checked (every 5 s).")
                           .Register(r);
    for (const char* status : {"reserved", "extended", "unreserved", "lost"}) {
      f.wal_status.emplace_back(status, &wal_status.Add({{"status", status}}));
    }
    f.safe_wal_size = &NewGauge(
        r, "outboxd_slot_safe_wal_size_bytes",
        "WAL that can still be written before the slot loses WAL it needs (<= 0: "
        "unreserved; NaN: max_slot_wal_keep_size unlimited).");
    f.safe_wal_size->Set(std::numeric_limits<double>::quiet_NaN());
    f.primary_info = &prometheus::BuildGauge()
                          .Name("outboxd_primary_info")
                          .Help("1 for the PostgreSQL primary the relay streams from.")
                          .Register(r);
    f.primary_changes =
        &NewCounter(r, "outboxd_primary_changes_total",
                    "Failovers the relay followed: a new session found the server's timeline "
                    "(or system) changed.");
    f.primary_changed_at =
        &NewGauge(r, "outboxd_primary_changed_timestamp_seconds",
                  "Unix time of the last failover the relay followed (0: none since it started).");
    f.standby_lag = &prometheus::BuildGauge()
                         .Name("outboxd_standby_flush_lag_bytes")
                         .Help(
                             "--standby-slot: WAL the standby has not flushed yet (NaN: its "
                             "slot is missing); publishing waits for every one.")
                         .Register(r);
    f.standby_waiting = &prometheus::BuildGauge()
                             .Name("outboxd_standby_waiting")
                             .Help(
                                 "--standby-slot: 1 while publishing waits for this standby to "
                                 "flush a committed transaction (down, paused or behind).")
                             .Register(r);
    f.catchup_eta = &NewGauge(
        r, "outboxd_catchup_eta_seconds",
        "Time left to reach the server's WAL position of the last (re)connect with a backlog, "
        "at the pace of the last 10 s; 0 when caught up (NaN: no pace yet, or disconnected). "
        "The bytes left are outboxd_slot_lag_bytes.");
    f.bulk_changes = &NewCounter(
        r, "outboxd_catchup_bulk_changes_total",
        "pgoutput messages read through SQL (pg_logical_slot_peek_binary_changes) by bulk "
        "catch-ups, instead of from the replication stream.");
    auto& pickup = prometheus::BuildHistogram()
                       .Name("outboxd_pickup_seconds")
                       .Help(
                           "A streamed transaction's way to the producer, by stage: "
                           "postgresql = commit -> the walsender sent its first message; "
                           "relay = that send -> its first event handed to the producer.")
                       .Register(r);
    f.pickup_postgresql = &pickup.Add({{"stage", "postgresql"}}, kPickupBuckets);
    f.pickup_relay = &pickup.Add({{"stage", "relay"}}, kPickupBuckets);
  } else {
    f.batches =
        &NewCounter(r, "outboxd_poll_batches_total", "Batches committed, empty ones included.");
  }
}

Metrics::~Metrics() = default;

void Metrics::Acknowledged(std::string_view topic_view, std::optional<double> latency_seconds) {
  const absl::string_view topic(topic_view.data(), topic_view.size());
  auto it = published_by_topic_.find(topic);
  if (it != published_by_topic_.end()) {
    it->second->Increment();
  } else if (published_by_topic_.size() < kMaxTopicSeries) {
    prometheus::Counter* counter = &families_->published->Add({{"topic", std::string(topic)}});
    published_by_topic_.emplace(std::string(topic), counter);
    counter->Increment();
  } else {
    // Past the cap neither the family nor the cache grows: a miss costs one hash.
    if (other_topics_ == nullptr) {
      other_topics_ = &families_->published->Add({{"topic", kOtherTopic}});
    }
    other_topics_->Increment();
  }
  if (latency_seconds) families_->latency->Observe(*latency_seconds);
}

void Metrics::PublishFailed() { families_->publish_errors->Increment(); }

void Metrics::DeadLettered() {
  if (families_->dead_lettered != nullptr) families_->dead_lettered->Increment();
}

void Metrics::MessagesRejected(std::string_view reason_view, uint64_t count) {
  if (families_->rejected == nullptr) return;
  const absl::string_view reason(reason_view.data(), reason_view.size());
  auto it = rejected_by_reason_.find(reason);
  if (it == rejected_by_reason_.end()) {
    prometheus::Counter* counter = &families_->rejected->Add({{"reason", std::string(reason)}});
    it = rejected_by_reason_.emplace(std::string(reason), counter).first;
  }
  it->second->Increment(static_cast<double>(count));
}

void Metrics::DedupeFellBack(std::string_view reason) {
  if (families_->dedupe_fallbacks == nullptr) return;
  families_->dedupe_fallbacks->Add({{"reason", std::string(reason)}}).Increment();
}

void Metrics::HeaderDropped(std::string_view header, std::string_view reason) {
  if (families_->headers_dropped == nullptr) return;
  families_->headers_dropped
      ->Add({{"header", std::string(header)}, {"reason", std::string(reason)}})
      .Increment();
}

void Metrics::DedupeSkipped() {
  if (families_->dedupe_skipped != nullptr) families_->dedupe_skipped->Increment();
}

void Metrics::Reconnected() { families_->reconnects->Increment(); }

void Metrics::BatchDone() {
  if (families_->batches != nullptr) families_->batches->Increment();
}

void Metrics::SetInFlight(uint64_t events) {
  families_->in_flight->Set(static_cast<double>(events));
}

void Metrics::SetConnected(bool connected) { families_->connected->Set(connected ? 1 : 0); }

void Metrics::SetUnsafeKafkaConfig(bool unsafe) { families_->unsafe_kafka->Set(unsafe ? 1 : 0); }

void Metrics::SetConfirmedLsn(uint64_t lsn) {
  if (families_->confirmed_lsn != nullptr) families_->confirmed_lsn->Set(static_cast<double>(lsn));
}

void Metrics::SetReceivedLsn(uint64_t lsn) {
  if (families_->received_lsn != nullptr) families_->received_lsn->Set(static_cast<double>(lsn));
}

void Metrics::SetCatchUpEta(std::optional<absl::Duration> eta) {
  if (families_->catchup_eta == nullptr) return;
  families_->catchup_eta->Set(eta ? absl::ToDoubleSeconds(*eta)
                                  : std::numeric_limits<double>::quiet_NaN());
}

void Metrics::BulkChangesRead(uint64_t changes) {
  if (families_->bulk_changes != nullptr) {
    families_->bulk_changes->Increment(static_cast<double>(changes));
  }
}

void Metrics::PickedUp(absl::Duration postgresql, absl::Duration relay) {
  if (families_->pickup_postgresql == nullptr) return;
  families_->pickup_postgresql->Observe(absl::ToDoubleSeconds(postgresql));
  families_->pickup_relay->Observe(absl::ToDoubleSeconds(relay));
}

void Metrics::SetSlotLagBytes(int64_t bytes) {
  if (families_->slot_lag != nullptr) families_->slot_lag->Set(static_cast<double>(bytes));
}

void Metrics::CleanupRoundDone(int64_t default_partition_rows) {
  if (families_->cleanup_rounds != nullptr) families_->cleanup_rounds->Increment();
  if (families_->default_partition_rows != nullptr) {
    families_->default_partition_rows->Set(static_cast<double>(default_partition_rows));
  }
}

void Metrics::SetSlotWalStatus(std::string_view status, std::optional<int64_t> safe_wal_size) {
  if (families_->safe_wal_size == nullptr) return;
  for (auto& [name, gauge] : families_->wal_status) gauge->Set(name == status ? 1 : 0);
  families_->safe_wal_size->Set(safe_wal_size ? static_cast<double>(*safe_wal_size)
                                              : std::numeric_limits<double>::quiet_NaN());
}

void Metrics::SetPrimary(const std::string& host, const std::string& port, bool failover) {
  Families& f = *families_;
  if (f.primary_info == nullptr) return;
  prometheus::Gauge* now = &f.primary_info->Add({{"host", host}, {"port", port}});
  if (f.primary != nullptr && f.primary != now) f.primary_info->Remove(f.primary);
  f.primary = now;
  now->Set(1);
  if (failover) {
    f.primary_changes->Increment();
    f.primary_changed_at->Set(absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()));
  }
}

void Metrics::SetStandbyLag(const std::string& slot, std::optional<int64_t> bytes) {
  if (families_->standby_lag == nullptr) return;
  families_->standby_lag->Add({{"slot", slot}})
      .Set(bytes ? static_cast<double>(*bytes) : std::numeric_limits<double>::quiet_NaN());
}

void Metrics::SetStandbyWaiting(const std::string& slot, bool waiting) {
  if (families_->standby_waiting == nullptr) return;
  families_->standby_waiting->Add({{"slot", slot}}).Set(waiting ? 1 : 0);
}

void Metrics::SetOldestUnacked(std::optional<absl::Time> commit_time) {
  oldest_unacked_us_.store(commit_time ? absl::ToUnixMicros(*commit_time) : 0,
                           std::memory_order_relaxed);
}

void Metrics::SetOldestUnackedAge(absl::Duration age) {
  SetOldestUnacked(age > absl::ZeroDuration() ? std::optional(absl::Now() - age) : std::nullopt);
}

Metrics::Totals Metrics::ReadTotals() const {
  // Collect() locks inside prometheus-cpp: safe against the relay thread's updates,
  // unlike published_by_topic_, which only that thread may touch.
  Totals totals;
  // No family at all before the first acknowledgement.
  for (const prometheus::MetricFamily& family : families_->published->Collect()) {
    for (const prometheus::ClientMetric& m : family.metric) totals.published += m.counter.value;
  }
  const prometheus::ClientMetric latency = families_->latency->Collect();
  totals.latency_sum = latency.histogram.sample_sum;
  totals.latency_count = latency.histogram.sample_count;
  return totals;
}

std::string Metrics::Render() const {
  int64_t oldest = oldest_unacked_us_.load(std::memory_order_relaxed);
  double age = oldest == 0 ? 0 : (absl::ToUnixMicros(absl::Now()) - oldest) / 1e6;
  families_->oldest_age->Set(std::max(age, 0.0));
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace outboxd::observe
