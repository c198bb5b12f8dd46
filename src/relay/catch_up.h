// Catch-up after an outage: when a session starts with WAL waiting (the relay was
// stopped, or lost its stream, while the database went on writing), how far it has
// come through that backlog. Total: the WAL between where streaming starts and the
// server's position when it (re)connected. Done: the WAL read and handed to the
// broker, not the confirmed position: a transaction is confirmed only at its commit,
// so one large transaction (a batch job's, 150,000 rows, 84 MiB) kept the confirmed
// line at 0 % until its very end, with hours "left"; reading runs at most
// --max-in-flight events ahead of the acknowledgements, so its pace is the broker's.
// Caught up when the confirmed position passes the total. Shown as a progress line
// with events/s and time left (base/progress.h), and as outboxd_catchup_eta_seconds
// (0 when caught up). What is left in bytes is outboxd_slot_lag_bytes already, so it
// gets no second metric.
//
//   CatchUp catch_up(&stats.metrics);
//   catch_up.Begin(start, server_lsn);                              // each session
//   catch_up.Observe(pipeline.received(), pipeline.watermark());    // each loop turn
//   catch_up.End();                                                 // session ended
#ifndef OUTBOXD_RELAY_CATCH_UP_H_
#define OUTBOXD_RELAY_CATCH_UP_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/progress.h"
#include "observe/metrics.h"
#include "pg/connection.h"
#include "pg/lsn.h"

namespace outboxd::relay {

// The server's WAL position now (pg_current_wal_lsn()).
absl::StatusOr<pg::Lsn> CurrentWalLsn(pg::Connection& conn);

class CatchUp {
 public:
  using Clock = std::function<absl::Time()>;
  explicit CatchUp(
      observe::Metrics* metrics, Clock clock = [] { return absl::Now(); });

  void Begin(pg::Lsn start, pg::Lsn server);
  // Cheap: looks at most as often as the line is drawn.
  void Observe(pg::Lsn received, pg::Lsn watermark);
  // The backlog is left behind unfinished (logged as stopped); the next session
  // measures its own.
  void End();
  bool active() const { return progress_ != nullptr; }

  // Less WAL than this waiting at connect is no backlog: at the ~4 MB/s of WAL a
  // relay confirms at 15,000 events/s (docs/architecture.md, linger.ms) it is gone
  // in a fraction of a second, too soon for a line anyone could read.
  static constexpr int64_t kMinBacklog = 1 << 20;

 private:
  observe::Metrics* metrics_;
  Clock clock_;
  std::unique_ptr<Progress> progress_;
  pg::Lsn start_ = 0;
  pg::Lsn target_ = 0;
  double events_at_start_ = 0;  // outboxd_events_published_total at Begin
  absl::Time next_look_ = absl::InfinitePast();
};

}  // namespace outboxd::relay

#endif  // OUTBOXD_RELAY_CATCH_UP_H_
