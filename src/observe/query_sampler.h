// QuerySampler: runs one small query every few seconds on its own connection and
// thread, and hands the number it returns to a callback (a gauge's setter). For
// figures only the database knows, such as the WAL a slot retains, without ever
// blocking the relay's loop: a slow or unreachable server delays only this thread.
//
//   QuerySampler lag(conninfo,
//                    "SELECT (pg_current_wal_lsn() - confirmed_flush_lsn)::float8 "
//                    "FROM pg_replication_slots WHERE slot_name = $1", {slot},
//                    absl::Seconds(5),
//                    [&](std::optional<double> v) { if (v) metrics.SetSlotLagBytes(*v); });
//   lag.Start();   // ~QuerySampler stops and joins
#ifndef OUTBOXD_OBSERVE_QUERY_SAMPLER_H_
#define OUTBOXD_OBSERVE_QUERY_SAMPLER_H_

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "base/periodic_thread.h"

namespace outboxd::observe {

class QuerySampler {
 public:
  // `on_value` gets the first column of the first row (nullopt: no row or NULL).
  // Called on the sampler's thread.
  using Callback = std::function<void(std::optional<double>)>;

  QuerySampler(std::string conninfo, std::string sql, std::vector<std::string> params,
               absl::Duration interval, Callback on_value);
  ~QuerySampler();
  QuerySampler(const QuerySampler&) = delete;
  QuerySampler& operator=(const QuerySampler&) = delete;

  void Start();
  void Stop();

 private:
  struct Session;  // the connection, kept from one sample to the next
  void Sample(Session& session);

  std::string conninfo_;
  std::string sql_;
  std::vector<std::string> params_;
  absl::Duration interval_;
  Callback on_value_;
  PeriodicThread thread_;  // last: destroyed, so stopped, before the members Sample reads
};

}  // namespace outboxd::observe

#endif  // OUTBOXD_OBSERVE_QUERY_SAMPLER_H_
