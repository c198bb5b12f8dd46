// The trigger behind `outboxd poll --notify`: after every INSERT statement on the
// outbox table, pg_notify(channel), so a sleeping relay wakes at once instead of at its
// next --interval. `outboxd setup` does not create it (polling is optional); `poll
// --install-notify-trigger` or InstallNotifyTrigger() does, idempotently:
//
//   CREATE OR REPLACE FUNCTION outboxd_notify() RETURNS trigger LANGUAGE plpgsql
//     AS $$ BEGIN IF octet_length(TG_ARGV[0]) BETWEEN 1 AND 63 THEN
//       PERFORM pg_notify(TG_ARGV[0], ''); END IF; RETURN NULL; END $$;
//   CREATE OR REPLACE TRIGGER outboxd_notify AFTER INSERT ON outbox
//     FOR EACH STATEMENT EXECUTE FUNCTION outboxd_notify('outboxd_outbox');
//
// FOR EACH STATEMENT: one notification per INSERT however many rows it writes (a COPY
// of a million rows sends one), and PostgreSQL folds identical notifications of one
// transaction anyway. The notification is delivered at COMMIT, so a woken relay finds
// the rows visible. The channel is checked before anything is installed, and the
// function skips a channel pg_notify would refuse (empty, over 63 bytes) rather than
// raise: the trigger runs inside the application's INSERT, which it must never fail.
//
//   OUTBOXD_RETURN_IF_ERROR(InstallNotifyTrigger(conn, "outbox", "outboxd_outbox"));
#ifndef OUTBOXD_POLL_NOTIFY_TRIGGER_H_
#define OUTBOXD_POLL_NOTIFY_TRIGGER_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pg/connection.h"

namespace outboxd::poll {

// The trigger's (and its function's) name.
inline constexpr char kNotifyTriggerName[] = "outboxd_notify";

// The SQL above for `table` ([schema.]name) and `channel`; the function lives in the
// table's schema. InvalidArgument for a table name or channel that is not a valid
// PostgreSQL identifier (pg/identifier.h).
absl::StatusOr<std::string> NotifyTriggerSql(pg::Connection& conn, const std::string& table,
                                             const std::string& channel);

// Creates or replaces the function and the trigger in one transaction; installs
// nothing when NotifyTriggerSql refuses the names.
absl::Status InstallNotifyTrigger(pg::Connection& conn, const std::string& table,
                                  const std::string& channel);

// Whether `table` has a trigger named kNotifyTriggerName (a missing one makes --notify
// fall back to plain --interval polling, which deserves a warning).
absl::StatusOr<bool> HasNotifyTrigger(pg::Connection& conn, const std::string& table);

}  // namespace outboxd::poll

#endif  // OUTBOXD_POLL_NOTIFY_TRIGGER_H_
