// `outboxd status`: the pattern's dashboard query, for CDC and for polling. The
// figure that matters is the age of the oldest event not yet acknowledged, more than
// any count: 500 pending events in a burst that drains in seconds are normal, one
// event ten minutes old is a stopped relay.
//
// CDC (the slot exists): slot active or not, wal_status, slot lag in bytes, and the
// outbox rows not yet known to be acknowledged (outbox/relay_state.h: known within
// about two position intervals, 1 s each by default). Polling (no slot): rows with
// published_at NULL, the oldest one's age and those that failed 5 times or more.
//
//   OUTBOXD_ASSIGN_OR_RETURN(OutboxStatus s, QueryStatus(conn, StatusOptions{}));
//   std::cout << FormatStatusTable(s);   // or FormatStatusJson(s)
#ifndef OUTBOXD_OPS_STATUS_H_
#define OUTBOXD_OPS_STATUS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "outbox/relay_state.h"
#include "pg/connection.h"

namespace outboxd::ops {

// Which relay the database is read for: kAuto decides by the slot (see QueryStatus).
enum class StatusMode { kAuto, kCdc, kPoll };

struct StatusOptions {
  std::string table = "outbox";
  std::string slot = "outboxd";
  // The user named the slot (--slot, OUTBOXD_SLOT or the config file): then a slot
  // that is missing or another database's is always an error, never polling mode.
  bool slot_given = false;
  StatusMode mode = StatusMode::kAuto;
  // The relay runs --source messages (the WAL-only outbox): its events are in no
  // table, so the slot's backlog is reported instead of row counts.
  bool wal_only = false;
  std::string created_at_column = "criado_em";
  std::string published_at_column = "publicado_em";
  std::string attempts_column = "tentativas";
};

struct OutboxStatus {
  std::string mode;  // "cdc" or "poll"
  // The server status read ("host:port") and whether it is the primary (a standby
  // holds no slot before PostgreSQL 17: after a failover, point --pg at every host
  // with target_session_attrs=read-write, as the relay's).
  std::string server;
  bool server_is_primary = true;
  // CDC.
  bool slot_active = false;
  std::string wal_status;
  int64_t slot_lag_bytes = 0;
  int64_t unacked = 0;
  double oldest_unacked_age_s = 0;
  std::vector<outbox::SlotPosition> positions;  // what each relay last recorded
  // The slot does not exist yet because setup asked the relay's first run to create
  // it and publish these outbox rows first (a migration from polling, or
  // setup --recreate-slot); nullopt otherwise.
  std::optional<int64_t> backfill_before_slot;
  // The primary's failovers and standbys (read on a primary only): its timeline (1:
  // it never failed over), how long ago it was promoted to it (nullopt: timeline 1,
  // or pg_wal not readable, which takes pg_monitor), and each physical slot's standby.
  int64_t timeline = 0;
  std::optional<double> last_failover_age_s;
  struct Standby {
    std::string slot;
    bool active = false;                     // its standby streams now
    std::optional<int64_t> flush_lag_bytes;  // WAL it has not flushed (nullopt: never had)
  };
  std::vector<Standby> standbys;
  // --source messages: unacked and its age are not counted; the backlog is the WAL
  // the slot holds past its confirmed position (slot_lag_bytes).
  bool wal_only = false;
  // Polling.
  int64_t pending = 0;
  double oldest_pending_age_s = 0;
  int64_t repeated_failures = 0;
  // Both. The letters this slot's relay filed (and those from before the dead-letter
  // table had a `slot` column, which count for every slot); another relay's are not
  // this one's to replay (outbox/dead_letter.h).
  int64_t dead_letter = 0;
  // A partitioned outbox with a DEFAULT partition: the rows in it. Above 0 means
  // partition upkeep fell behind (cleanup creates partitions ahead; see
  // ops/partition_upkeep.h). nullopt otherwise, and then not shown.
  std::optional<int64_t> default_partition_rows;
  // The table has no created-at column (a Debezium outbox table): the ages above are
  // unknown (0), shown as "unknown" / null, and --max-age cannot be judged.
  std::string age_unknown;  // why, one line; empty when the ages are known

  // The age an alert compares: unacknowledged (CDC) or pending (polling).
  double oldest_age_s() const { return mode == "cdc" ? oldest_unacked_age_s : oldest_pending_age_s; }
};

// kCdc reads the slot, kPoll the polling columns. kAuto reads the slot when it
// exists in this database. A slot that does not exist, or belongs to another
// database (or is not a pgoutput slot), is FailedPrecondition naming the slot and
// the database, except when the database has never seen a CDC relay (no row in the
// relay-state table, no publication of the outbox table) and the slot was not
// named: that is a polling deployment, shown in polling mode.
absl::StatusOr<OutboxStatus> QueryStatus(pg::Connection& conn, const StatusOptions& options);

// A short aligned table, one "name  value" line per figure.
std::string FormatStatusTable(const OutboxStatus& status);
// One JSON object: {"mode":"cdc","slot_active":true,...}.
std::string FormatStatusJson(const OutboxStatus& status);

}  // namespace outboxd::ops

#endif  // OUTBOXD_OPS_STATUS_H_
