#include "ops/status.h"

#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "outbox/dead_letter.h"
#include "outbox/event.h"
#include "outbox/names.h"
#include "pg/identifier.h"
#include "pg/partitions.h"
#include "pg/slot.h"
#include "pg/table_name.h"

namespace outboxd::ops {
namespace {

int64_t ToInt(std::string_view text) {
  int64_t value = 0;
  (void)absl::SimpleAtoi(absl::string_view(text.data(), text.size()), &value);
  return value;
}

double ToDouble(std::string_view text) {
  double value = 0;
  (void)absl::SimpleAtod(absl::string_view(text.data(), text.size()), &value);
  return value;
}

// Counts and the oldest age of the rows matching `where` (alias o); the age is 0 when
// the table has no created-at column (options.created_at_column is then "").
absl::StatusOr<pg::Result> CountRows(pg::Connection& conn, const pg::TableName& outbox,
                                     const StatusOptions& options, const std::string& extra,
                                     const std::string& where) {
  std::string age = "0::float8";
  if (!options.created_at_column.empty()) {
    OUTBOXD_ASSIGN_OR_RETURN(std::string created_at,
                             conn.QuoteIdentifier(options.created_at_column));
    age = absl::StrCat("coalesce(extract(epoch FROM now() - min(o.", created_at, ")), 0)::float8");
  }
  return conn.Exec(
      absl::StrCat("SELECT count(*), ", age, extra, " FROM ", outbox.quoted, " o WHERE ", where));
}

std::string JsonAge(const OutboxStatus& s, double age) {
  return s.age_unknown.empty() ? absl::StrFormat("%.3f", age) : "null";
}

std::string TableAge(const OutboxStatus& s, double age) {
  return s.age_unknown.empty() ? absl::StrFormat("%.1f", age) : "unknown";
}

absl::Status QueryCdc(pg::Connection& conn, const pg::TableName& outbox,
                      const StatusOptions& options, const pg::SlotInfo& slot, OutboxStatus& out) {
  out.slot_active = slot.active;
  out.wal_status = slot.wal_status;
  out.slot_lag_bytes = slot.lag_bytes;
  out.wal_only = options.wal_only;
  const outbox::RelayStateStore state(options.table);
  OUTBOXD_ASSIGN_OR_RETURN(bool state_exists, outbox.Sibling(state.table()).Exists(conn));
  OUTBOXD_ASSIGN_OR_RETURN(bool polled, outbox.HasColumn(conn, options.published_at_column));
  std::string unacked = "true";  // without the state table nothing is known acknowledged
  if (state_exists) {
    OUTBOXD_ASSIGN_OR_RETURN(
        std::string acked,
        state.AckedCondition(conn, "o", polled ? options.published_at_column : ""));
    unacked = absl::StrCat(acked, " IS NOT TRUE");
    OUTBOXD_ASSIGN_OR_RETURN(out.positions, state.Positions(conn));
  }
  if (options.wal_only) return absl::OkStatus();  // the table holds none of the events
  OUTBOXD_ASSIGN_OR_RETURN(pg::Result r, CountRows(conn, outbox, options, "", unacked));
  out.unacked = ToInt(r.Get(0, 0));
  out.oldest_unacked_age_s = ToDouble(r.Get(0, 1));
  return absl::OkStatus();
}

// The backfill setup asked for, while the slot waits for the relay's first run.
absl::Status QueryBackfill(pg::Connection& conn, const StatusOptions& options, OutboxStatus& out) {
  const outbox::RelayStateStore state(options.table);
  OUTBOXD_ASSIGN_OR_RETURN(std::optional<outbox::BackfillRequest> request,
                           state.PendingBackfill(conn, options.slot));
  if (!request) return absl::OkStatus();
  OUTBOXD_ASSIGN_OR_RETURN(
      out.backfill_before_slot,
      state.CountBackfill(conn, options.table, options.published_at_column, *request));
  return absl::OkStatus();
}

// A relay with --standby-slot publishes only what the named standbys flushed, and a
// promotion starts a new timeline: both are read here so that `status` answers "which
// primary, since when, and how far behind is each standby" without the relay.
absl::Status QueryReplication(pg::Connection& conn, OutboxStatus& out) {
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::Result tli,
      conn.Exec(
          "SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int"));
  out.timeline = ToInt(tli.Get(0, 0));
  if (out.timeline > 1) {
    // The promotion wrote the timeline's history file. Listing pg_wal takes pg_monitor:
    // without it the age stays unknown rather than failing the whole status.
    absl::StatusOr<pg::Result> r = conn.ExecParams(
        "SELECT extract(epoch FROM now() - modification)::float8 FROM pg_ls_waldir() "
        "WHERE name = $1",
        {absl::StrFormat("%08X.history", out.timeline)});
    if (r.ok() && r->rows() == 1) out.last_failover_age_s = ToDouble(r->Get(0, 0));
  }
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::Result slots,
      conn.Exec("SELECT slot_name, active, (pg_current_wal_lsn() - restart_lsn)::bigint "
                "FROM pg_replication_slots WHERE slot_type = 'physical' ORDER BY 1"));
  for (int i = 0; i < slots.rows(); ++i) {
    OutboxStatus::Standby standby{.slot = std::string(slots.Get(i, 0)),
                                  .active = slots.Get(i, 1) == "t"};
    if (!slots.IsNull(i, 2)) standby.flush_lag_bytes = ToInt(slots.Get(i, 2));
    out.standbys.push_back(std::move(standby));
  }
  return absl::OkStatus();
}

std::string FailoverText(const OutboxStatus& s) {
  if (s.timeline <= 1) return absl::StrCat(s.timeline, " (no failover)");
  if (!s.last_failover_age_s)
    return absl::StrCat(s.timeline, ", last failover: unknown (pg_monitor reads it)");
  return absl::StrFormat("%d, last failover %.1fs ago", s.timeline, *s.last_failover_age_s);
}

absl::Status QueryPoll(pg::Connection& conn, const pg::TableName& outbox,
                       const StatusOptions& options, OutboxStatus& out) {
  OUTBOXD_ASSIGN_OR_RETURN(bool polled, outbox.HasColumn(conn, options.published_at_column));
  if (!polled) {
    return absl::FailedPreconditionError(absl::StrCat(
        "replication slot ", options.slot, " does not exist and table ", outbox.Display(),
        " has no column ", pg::SqlIdentifier(options.published_at_column),
        " for polling mode: name the relay's slot with --slot"));
  }
  // The seed's dashboard query.
  OUTBOXD_ASSIGN_OR_RETURN(std::string attempts, conn.QuoteIdentifier(options.attempts_column));
  OUTBOXD_ASSIGN_OR_RETURN(std::string published_at,
                           conn.QuoteIdentifier(options.published_at_column));
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::Result r, CountRows(conn, outbox, options,
                              absl::StrCat(", count(*) FILTER (WHERE o.", attempts, " >= 5)"),
                              absl::StrCat("o.", published_at, " IS NULL")));
  out.pending = ToInt(r.Get(0, 0));
  out.oldest_pending_age_s = ToDouble(r.Get(0, 1));
  out.repeated_failures = ToInt(r.Get(0, 2));
  return absl::OkStatus();
}

std::string JsonString(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// Signs that a CDC relay serves this outbox: a slot's row in the relay-state table
// (written by run's position recorder and by setup's backfill requests) or a
// publication of the table. "" when there are none: a polling deployment.
absl::StatusOr<std::string> CdcSigns(pg::Connection& conn, const pg::TableName& outbox,
                                     const StatusOptions& options) {
  const outbox::RelayStateStore state(options.table);
  OUTBOXD_ASSIGN_OR_RETURN(bool state_exists, outbox.Sibling(state.table()).Exists(conn));
  if (state_exists) {
    OUTBOXD_ASSIGN_OR_RETURN(std::vector<outbox::SlotPosition> positions, state.Positions(conn));
    if (!positions.empty()) {
      std::string slots;
      for (const outbox::SlotPosition& p : positions)
        absl::StrAppend(&slots, slots.empty() ? "" : ", ", p.slot);
      return absl::StrCat(state.table(), " records slot ", slots);
    }
  }
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::Result published,
      conn.ExecParams(
          "SELECT p.pubname FROM pg_publication_tables p JOIN pg_namespace n "
          "ON n.nspname = p.schemaname JOIN pg_class c ON c.relnamespace = n.oid "
          "AND c.relname = p.tablename WHERE c.oid = to_regclass($1) ORDER BY 1 LIMIT 1",
          {outbox.quoted}));
  if (published.rows() > 0) {
    return absl::StrCat("publication ", std::string(published.Get(0, 0)), " publishes it");
  }
  return std::string();
}

// The mode to report, or FailedPrecondition naming the slot and the database when
// the slot cannot be this database's CDC relay's.
absl::StatusOr<std::string> ChooseMode(pg::Connection& conn, const pg::TableName& outbox,
                                       const StatusOptions& options, const pg::SlotInfo& slot) {
  if (options.mode == StatusMode::kPoll) return std::string("poll");
  OUTBOXD_ASSIGN_OR_RETURN(std::string mismatch,
                           slot.exists ? pg::SlotMismatch(conn, slot) : std::string());
  if (slot.exists && mismatch.empty()) return std::string("cdc");
  // Just set up: the relay's first run creates the slot (and backfills first).
  if (!slot.exists) {
    const outbox::RelayStateStore state(options.table);
    OUTBOXD_ASSIGN_OR_RETURN(bool state_exists, outbox.Sibling(state.table()).Exists(conn));
    if (state_exists) {
      OUTBOXD_ASSIGN_OR_RETURN(std::optional<outbox::BackfillRequest> request,
                               state.PendingBackfill(conn, options.slot));
      if (request) return std::string("cdc");
    }
  }
  std::string signs;
  if (options.mode == StatusMode::kAuto && !options.slot_given) {
    OUTBOXD_ASSIGN_OR_RETURN(signs, CdcSigns(conn, outbox, options));
    if (signs.empty()) return std::string("poll");
  }
  OUTBOXD_ASSIGN_OR_RETURN(pg::Result db, conn.Exec("SELECT current_database()"));
  const std::string problem = slot.exists ? mismatch : "does not exist";
  return absl::FailedPreconditionError(absl::StrCat(
      "replication slot ", options.slot, " ", problem, " (status reads database ",
      std::string(db.Get(0, 0)), signs.empty() ? "" : ", where " + signs,
      "): pass --slot with this database's slot (SELECT slot_name FROM pg_replication_slots "
      "WHERE database = current_database()), run outboxd setup to create it, or pass "
      "--mode poll for a polling relay"));
}

// The rows of a partitioned outbox's DEFAULT partition (nullopt: none to count).
absl::StatusOr<std::optional<int64_t>> DefaultPartitionRows(pg::Connection& conn,
                                                            const pg::TableName& outbox) {
  OUTBOXD_ASSIGN_OR_RETURN(std::vector<pg::Partition> leaves, pg::Leaves(conn, outbox));
  for (const pg::Partition& leaf : leaves) {
    if (!leaf.is_default) continue;
    OUTBOXD_ASSIGN_OR_RETURN(const int64_t rows, leaf.name.CountRows(conn));
    return std::optional<int64_t>(rows);
  }
  return std::optional<int64_t>();
}

}  // namespace

absl::StatusOr<OutboxStatus> QueryStatus(pg::Connection& conn, const StatusOptions& options) {
  OUTBOXD_ASSIGN_OR_RETURN(const pg::TableName outbox, outbox::ParseOutboxTable(options.table));
  OUTBOXD_RETURN_IF_ERROR(pg::CheckSlotName(options.slot, "--slot"));
  for (const std::string* column :
       {&options.created_at_column, &options.published_at_column, &options.attempts_column}) {
    OUTBOXD_RETURN_IF_ERROR(pg::CheckIdentifier(*column, "a column name"));
  }
  OUTBOXD_ASSIGN_OR_RETURN(bool exists, outbox.Exists(conn));
  if (!exists) {
    return absl::NotFoundError(absl::StrCat("table ", outbox.Display(),
                                            " does not exist: run outboxd setup or pass --table"));
  }
  OutboxStatus out;
  out.server = conn.endpoint();
  OUTBOXD_ASSIGN_OR_RETURN(pg::Result recovery, conn.Exec("SELECT pg_is_in_recovery()"));
  out.server_is_primary = recovery.Get(0, 0) != "t";
  StatusOptions dated = options;
  OUTBOXD_ASSIGN_OR_RETURN(bool has_created_at, outbox.HasColumn(conn, options.created_at_column));
  if (!has_created_at) {
    out.age_unknown = outbox::MissingCreatedAtNote(outbox.Display(), options.created_at_column);
    dated.created_at_column.clear();
  }
  pg::SlotInfo slot;
  if (options.mode != StatusMode::kPoll) {
    OUTBOXD_ASSIGN_OR_RETURN(slot, pg::QuerySlot(conn, options.slot));
  }
  OUTBOXD_ASSIGN_OR_RETURN(out.mode, ChooseMode(conn, outbox, options, slot));
  if (out.mode == "cdc") {
    if (!slot.exists) OUTBOXD_RETURN_IF_ERROR(QueryBackfill(conn, options, out));
    OUTBOXD_RETURN_IF_ERROR(QueryCdc(conn, outbox, dated, slot, out));
    if (out.server_is_primary) OUTBOXD_RETURN_IF_ERROR(QueryReplication(conn, out));
  } else {
    OUTBOXD_RETURN_IF_ERROR(QueryPoll(conn, outbox, dated, out));
  }
  const outbox::DeadLetterStore dead_letters(options.table, options.slot);
  OUTBOXD_ASSIGN_OR_RETURN(bool dead_exists, outbox.Sibling(dead_letters.table()).Exists(conn));
  if (dead_exists) {
    OUTBOXD_ASSIGN_OR_RETURN(out.dead_letter, dead_letters.Count(conn));
  }
  OUTBOXD_ASSIGN_OR_RETURN(out.default_partition_rows, DefaultPartitionRows(conn, outbox));
  return out;
}

std::string FormatStatusTable(const OutboxStatus& s) {
  std::vector<std::pair<std::string, std::string>> rows = {{"mode", s.mode}};
  if (s.mode == "cdc" && s.wal_only) {
    rows.insert(rows.end(), {{"source", "messages (WAL-only: no table counts)"},
                             {"slot_active", s.slot_active ? "yes" : "no"},
                             {"wal_status", s.wal_status},
                             {"backlog_bytes", absl::StrCat(s.slot_lag_bytes)}});
  } else if (s.mode == "cdc") {
    if (s.backfill_before_slot) {
      rows.push_back({"slot", absl::StrCat("not created yet: outboxd run creates it, after "
                                           "publishing the ",
                                           *s.backfill_before_slot,
                                           " outbox rows setup asked for (backfill)")});
    }
    rows.insert(rows.end(), {{"slot_active", s.slot_active ? "yes" : "no"},
                             {"wal_status", s.wal_status},
                             {"slot_lag_bytes", absl::StrCat(s.slot_lag_bytes)},
                             {"unacked", absl::StrCat(s.unacked)},
                             {"oldest_unacked_age_s", TableAge(s, s.oldest_unacked_age_s)}});
    for (const outbox::SlotPosition& p : s.positions) {
      rows.push_back({absl::StrCat("position[", p.slot, "]"),
                      p.acked_lsn.empty() ? std::string("none")
                                          : absl::StrFormat("%s, recorded %.1fs ago",
                                                            p.acked_lsn, p.acked_age_s)});
    }
    if (s.timeline > 0) rows.push_back({"timeline", FailoverText(s)});
    for (const OutboxStatus::Standby& b : s.standbys) {
      rows.push_back(
          {absl::StrCat("standby[", b.slot, "]"),
           absl::StrCat(b.flush_lag_bytes ? absl::StrCat("flush lag ", *b.flush_lag_bytes, " bytes")
                                          : std::string("no position"),
                        b.active ? ", streaming" : ", not connected")});
    }
  } else {
    rows.insert(rows.end(), {{"pending", absl::StrCat(s.pending)},
                             {"oldest_pending_age_s", TableAge(s, s.oldest_pending_age_s)},
                             {"repeated_failures", absl::StrCat(s.repeated_failures)}});
  }
  rows.push_back({"dead_letter", absl::StrCat(s.dead_letter)});
  if (s.default_partition_rows) {
    rows.push_back({"default_partition_rows",
                    *s.default_partition_rows == 0
                        ? std::string("0")
                        : absl::StrCat(*s.default_partition_rows,
                                       " (partition upkeep fell behind: outboxd cleanup creates "
                                       "the partitions ahead)")});
  }
  rows.push_back(
      {"server", absl::StrCat(s.server, s.server_is_primary ? " (primary)" : " (standby)")});
  size_t width = 0;
  for (const auto& [name, value] : rows) width = std::max(width, name.size());
  std::string out;
  for (const auto& [name, value] : rows) {
    absl::StrAppend(&out, name, std::string(width + 2 - name.size(), ' '), value, "\n");
  }
  return out;
}

std::string FormatStatusJson(const OutboxStatus& s) {
  std::string out = absl::StrCat("{\"mode\":", JsonString(s.mode));
  if (s.mode == "cdc") {
    if (s.backfill_before_slot) {
      absl::StrAppend(&out, ",\"slot_exists\":false,\"backfill_rows\":", *s.backfill_before_slot);
    }
    absl::StrAppend(&out, ",\"slot_active\":", s.slot_active ? "true" : "false",
                    ",\"wal_status\":", JsonString(s.wal_status),
                    ",\"slot_lag_bytes\":", s.slot_lag_bytes);
    if (s.wal_only) {
      absl::StrAppend(&out, ",\"source\":\"messages\",\"backlog_bytes\":", s.slot_lag_bytes);
    } else {
      absl::StrAppend(&out, ",\"unacked\":", s.unacked,
                      ",\"oldest_unacked_age_s\":", JsonAge(s, s.oldest_unacked_age_s));
    }
    out += ",\"positions\":[";
    for (size_t i = 0; i < s.positions.size(); ++i) {
      const outbox::SlotPosition& p = s.positions[i];
      absl::StrAppend(&out, i ? "," : "", "{\"slot\":", JsonString(p.slot),
                      ",\"acked_lsn\":", p.acked_lsn.empty() ? "null" : JsonString(p.acked_lsn),
                      absl::StrFormat(",\"acked_age_s\":%.3f}", p.acked_age_s));
    }
    out += "]";
    if (s.timeline > 0) {
      absl::StrAppend(&out, ",\"timeline\":", s.timeline, ",\"last_failover_age_s\":",
                      s.last_failover_age_s ? absl::StrFormat("%.3f", *s.last_failover_age_s)
                                            : std::string("null"));
    }
    out += ",\"standbys\":[";
    for (size_t i = 0; i < s.standbys.size(); ++i) {
      const OutboxStatus::Standby& b = s.standbys[i];
      absl::StrAppend(&out, i ? "," : "", "{\"slot\":", JsonString(b.slot),
                      ",\"active\":", b.active ? "true" : "false", ",\"flush_lag_bytes\":",
                      b.flush_lag_bytes ? absl::StrCat(*b.flush_lag_bytes) : "null", "}");
    }
    out += "]";
  } else {
    absl::StrAppend(&out, ",\"pending\":", s.pending,
                    ",\"oldest_pending_age_s\":", JsonAge(s, s.oldest_pending_age_s),
                    ",\"repeated_failures\":", s.repeated_failures);
  }
  absl::StrAppend(&out, ",\"dead_letter\":", s.dead_letter, ",\"server\":", JsonString(s.server),
                  ",\"server_is_primary\":", s.server_is_primary ? "true" : "false");
  if (s.default_partition_rows) {
    absl::StrAppend(&out, ",\"default_partition_rows\":", *s.default_partition_rows);
  }
  out += "}\n";
  return out;
}

}  // namespace outboxd::ops
