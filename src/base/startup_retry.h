// Start-up against a PostgreSQL that is not there yet, for both relays (`outboxd run`
// and `outboxd poll`). A host that boots the relay before its database, or a database
// restarting as the relay starts, is the same transient trouble as a server lost while
// streaming: retried with capped backoff and logged, not an exit 2 that a supervisor
// would (rightly) not restart. What only a person can fix (a bad password, a missing
// database, table or privilege, wal_level) still ends the start at once.
//
//   StopSignal stop;
//   absl::Status s = RetryWhileTransient(stop, [&] { return relay.Start(); });
//   if (stop.requested()) ...;          // SIGTERM while waiting
//   else if (!s.ok()) return Fail(s);   // a configuration error
#ifndef OUTBOXD_BASE_STARTUP_RETRY_H_
#define OUTBOXD_BASE_STARTUP_RETRY_H_

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "base/stop_signal.h"

namespace outboxd {

// A PostgreSQL that cannot serve yet but may soon: connection refused or timed out,
// host unreachable, "the database system is starting up" or "is shutting down", too
// many connections (pg::Connection reports all of them as Unavailable; 53xxx as
// ResourceExhausted). A wrong host or port looks the same, and is retried too.
bool IsTransientDatabaseError(const absl::Status& status);

// Runs `attempt` until it returns OK or an error that is not transient (returned), or
// until `stop` is notified (then the last error is returned). Waits between attempts
// with capped exponential backoff and jitter, logging each failure and the wait.
absl::Status RetryWhileTransient(StopSignal& stop, absl::FunctionRef<absl::Status()> attempt,
                                 absl::Duration base = absl::Milliseconds(200),
                                 absl::Duration cap = absl::Seconds(30));

// Sleeps for `duration` or until `stop` is notified.
void SleepUnlessStopped(StopSignal& stop, absl::Duration duration);

}  // namespace outboxd

#endif  // OUTBOXD_BASE_STARTUP_RETRY_H_
