// The metric families of outboxd, one definition for both relays (`outboxd run` and
// `outboxd poll`), held in one prometheus-cpp registry and rendered in Prometheus'
// text format by Render(). The relay thread updates them; the HTTP thread renders.
//
//   observe::Metrics metrics(observe::RelayMode::kCdc);
//   metrics.Acknowledged("pedido.confirmado", /*latency_seconds=*/0.004);  // per event
//   metrics.SetInFlight(12);
//   http.Handle("/metrics", [&] { return HttpResponse{200, kMetricsContentType,
//                                                     metrics.Render()}; });
//
// Names (docs/operations.md, "Metrics and alerts", lists them with their meaning):
//   outboxd_events_published_total{topic}   counter   both (100 topics, then "(other)")
//   outboxd_publish_errors_total            counter   both
//   outboxd_commit_to_ack_seconds           histogram both (poll: created_at -> ack)
//   outboxd_events_in_flight                gauge     both
//   outboxd_oldest_unacked_age_seconds      gauge     both (poll: oldest pending row)
//   outboxd_reconnects_total                counter   both
//   outboxd_connected                       gauge     both
//   outboxd_unsafe_kafka_config             gauge     both
//   outboxd_events_dead_lettered_total      counter   run
//   outboxd_messages_rejected_total{reason} counter   run (--source messages|both)
//   outboxd_dedupe_fallbacks_total{reason}  counter   both (--dedupe)
//   outboxd_dedupe_skipped_total            counter   both (--dedupe)
//   outboxd_headers_dropped_total{header,reason} counter both
//   outboxd_confirmed_lsn, outboxd_received_lsn, outboxd_slot_lag_bytes  gauges run
//   outboxd_slot_wal_status{status}, outboxd_slot_safe_wal_size_bytes    gauges run
//   outboxd_poll_batches_total              counter   poll
//   outboxd_primary_info{host,port}, outboxd_primary_changes_total,
//   outboxd_primary_changed_timestamp_seconds                            run
//   outboxd_standby_flush_lag_bytes{slot}, outboxd_standby_waiting{slot} run
//   outboxd_catchup_eta_seconds             gauge     run
//   outboxd_catchup_bulk_changes_total      counter   run
//   outboxd_pickup_seconds{stage}           histogram run (postgresql, relay)
//   outboxd_outbox_default_partition_rows   gauge     run (its cleanup job)
//   outboxd_cleanup_rounds_total            counter   run (its cleanup job)
#ifndef OUTBOXD_OBSERVE_METRICS_H_
#define OUTBOXD_OBSERVE_METRICS_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace prometheus {
class Counter;
class Gauge;
class Histogram;
class Registry;
template <typename T>
class Family;
}  // namespace prometheus

namespace outboxd::observe {

inline constexpr char kMetricsContentType[] = "text/plain; version=0.0.4; charset=utf-8";

enum class RelayMode { kCdc, kPoll };

class Metrics {
 public:
  explicit Metrics(RelayMode mode);
  ~Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // ---- updates: from the relay's thread only (the topic cache is not locked) ----

  // The broker acknowledged one event of `topic`, `latency_seconds` after its commit
  // (poll: after its created_at; nullopt: unknown, counted but not observed). The
  // counter of a topic is created once; later calls find it in a small cache, no
  // allocation. The first 100 topics get a series each, later ones share
  // topic="(other)": an outbox with thousands of types cannot grow /metrics without end.
  void Acknowledged(std::string_view topic, std::optional<double> latency_seconds);
  void PublishFailed();
  void DeadLettered();
  // `count` outboxd messages refused as no event (forged, unsigned, invalid, too large:
  // outbox/emitted_event.h names the reasons); 0 makes the reason's series. Run only.
  void MessagesRejected(std::string_view reason, uint64_t count = 1);
  // --dedupe: a topic or partition read back only in part (reason: relay/resume_dedupe.h),
  // and an event of a resumed window the broker already held, not sent again. Run only.
  void DedupeFellBack(std::string_view reason);
  // A traceparent or tracestate header left out of a published event (malformed).
  void HeaderDropped(std::string_view header, std::string_view reason);
  void DedupeSkipped();
  void Reconnected();
  void BatchDone();  // poll only
  void SetInFlight(uint64_t events);
  void SetConnected(bool connected);
  // --allow-unsafe-kafka let a durability-weakening --kafka setting through.
  void SetUnsafeKafkaConfig(bool unsafe);
  void SetConfirmedLsn(uint64_t lsn);   // run only (ignored by poll)
  void SetReceivedLsn(uint64_t lsn);    // run only
  void SetSlotLagBytes(int64_t bytes);  // run only
  // A round of the cleanup job ended, whatever it deleted (a round that deletes nothing
  // leaves no other trace), with the rows it found in a partitioned outbox's DEFAULT
  // partition (deleted plus left): above 0, partition upkeep fell behind. Run only.
  void CleanupRoundDone(int64_t default_partition_rows);
  // The slot's wal_status (reserved, extended, unreserved, lost: that one's series
  // 1, the others 0) and safe_wal_size (nullopt: unlimited, shown as NaN). Run only.
  void SetSlotWalStatus(std::string_view status, std::optional<int64_t> safe_wal_size);
  // The primary the relay streams from ("host", "port"); `failover`: its history
  // changed since the previous session (a promotion), counted with its time. Run only.
  void SetPrimary(const std::string& host, const std::string& port, bool failover);
  // --standby-slot: WAL the named standby has not flushed yet (nullopt: its slot is
  // missing, shown as NaN). Run only.
  void SetStandbyLag(const std::string& slot, std::optional<int64_t> bytes);
  // --standby-slot: whether a committed transaction waits for this standby now. Run only.
  void SetStandbyWaiting(const std::string& slot, bool waiting);
  // Time left to catch up with the backlog found at (re)connect, at the recent pace
  // (relay/catch_up.h): zero when caught up, nullopt (NaN) while unknown. Run only.
  void SetCatchUpEta(std::optional<absl::Duration> eta);
  // Changes read through SQL by a bulk catch-up (relay/bulk_stream.h).
  void BulkChangesRead(uint64_t changes);
  // Where a streamed transaction's pickup went, observed at its first event: from its
  // commit to the walsender's send time of its first message (PostgreSQL: the WAL
  // flush, decoding, the walsender's wake-up), and from there to that event handed to
  // the producer (the socket, the relay's loop and its decoding). Run only.
  void PickedUp(absl::Duration postgresql, absl::Duration relay);
  // Commit time of the oldest event not acknowledged yet (none: age 0). The age is
  // computed when scraped, so it keeps growing while the relay is stuck.
  void SetOldestUnacked(std::optional<absl::Time> commit_time);
  // Age measured elsewhere (poll: by a query), as of now.
  void SetOldestUnackedAge(absl::Duration age);

  // ---- any thread ----
  RelayMode mode() const { return mode_; }
  // The counters a rate is computed from, read together (the status page's history).
  struct Totals {
    double published = 0;        // outboxd_events_published_total, every topic
    double latency_sum = 0;      // outboxd_commit_to_ack_seconds_sum
    uint64_t latency_count = 0;  // outboxd_commit_to_ack_seconds_count
  };
  Totals ReadTotals() const;
  std::string Render() const;

 private:
  struct Families;

  RelayMode mode_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<Families> families_;
  // Topic -> its counter in the by-topic family, the first 100 topics only. Counters
  // live as long as the family.
  absl::flat_hash_map<std::string, prometheus::Counter*> published_by_topic_;
  prometheus::Counter* other_topics_ = nullptr;  // topic="(other)", once past the cap
  // Reason -> its counter in outboxd_messages_rejected_total (a handful, fixed in code).
  absl::flat_hash_map<std::string, prometheus::Counter*> rejected_by_reason_;
  std::atomic<int64_t> oldest_unacked_us_{0};  // Unix µs; 0: nothing unacknowledged
};

}  // namespace outboxd::observe

#endif  // OUTBOXD_OBSERVE_METRICS_H_
