// QuerySlot: one row of pg_replication_slots. Uses a literal instead of a bound
// parameter because walsender connections do not speak the extended protocol.
#include "pg/slot.h"

#include <charconv>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace outboxd::pg {
namespace {

template <typename T>
bool ParseInt(std::string_view text, T& out) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size();
}

absl::StatusOr<Lsn> LsnField(const Result& result, int col) {
  if (result.IsNull(0, col)) return kInvalidLsn;
  return ParseLsn(result.Get(0, col));
}

}  // namespace

std::string SlotQuery(std::string_view slot_literal) {
  return absl::StrCat(
      "SELECT active, coalesce(active_pid, 0), coalesce(database, ''), "
      "coalesce(plugin, ''), slot_type, confirmed_flush_lsn, restart_lsn, "
      "coalesce(wal_status, ''), "
      "coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn), 0)::bigint, "
      "safe_wal_size FROM pg_replication_slots WHERE slot_name = ",
      std::string(slot_literal));
}

absl::StatusOr<SlotInfo> QuerySlot(Connection& conn, std::string_view slot) {
  OUTBOXD_ASSIGN_OR_RETURN(std::string slot_literal, conn.QuoteLiteral(slot));
  OUTBOXD_ASSIGN_OR_RETURN(Result result, conn.Exec(SlotQuery(slot_literal)));
  return ParseSlotRow(result);
}

absl::StatusOr<SlotInfo> ParseSlotRow(const Result& result) {
  SlotInfo info;
  if (result.rows() == 0) return info;
  info.exists = true;
  info.active = result.Get(0, 0) == "t";
  if (!ParseInt(result.Get(0, 1), info.active_pid) || !ParseInt(result.Get(0, 8), info.lag_bytes)) {
    return absl::InternalError("unexpected pg_replication_slots row");
  }
  info.database = result.Get(0, 2);
  info.plugin = result.Get(0, 3);
  info.slot_type = result.Get(0, 4);
  OUTBOXD_ASSIGN_OR_RETURN(info.confirmed_flush_lsn, LsnField(result, 5));
  OUTBOXD_ASSIGN_OR_RETURN(info.restart_lsn, LsnField(result, 6));
  info.wal_status = result.Get(0, 7);
  if (!result.IsNull(0, 9)) {
    int64_t safe = 0;
    if (!ParseInt(result.Get(0, 9), safe)) {
      return absl::InternalError("unexpected pg_replication_slots row");
    }
    info.safe_wal_size = safe;
  }
  return info;
}

absl::StatusOr<std::string> SlotMismatch(Connection& conn, const SlotInfo& slot) {
  if (slot.slot_type != "logical") return std::string("is a physical slot");
  if (slot.plugin != "pgoutput") return absl::StrCat("uses plugin ", slot.plugin, ", not pgoutput");
  OUTBOXD_ASSIGN_OR_RETURN(Result db, conn.Exec("SELECT current_database()"));
  if (slot.database != db.Get(0, 0)) return absl::StrCat("belongs to database ", slot.database);
  return std::string();
}

absl::StatusOr<CreatedSlot> CreateSlotWithSnapshot(Connection& conn, std::string_view slot) {
  // The pre-15 spelling (EXPORT_SNAPSHOT), which every supported server accepts.
  OUTBOXD_ASSIGN_OR_RETURN(std::string slot_name, conn.QuoteIdentifier(slot));
  // The slot is consistent once every transaction running now has ended: as long as
  // the server's longest one, which --pg-receive-timeout must not take for a dead path.
  NoReplyTimeout patient(conn);
  OUTBOXD_ASSIGN_OR_RETURN(Result result,
                           conn.Exec(absl::StrCat("CREATE_REPLICATION_SLOT ", slot_name,
                                                  " LOGICAL pgoutput EXPORT_SNAPSHOT")));
  // Columns: slot_name, consistent_point, snapshot_name, output_plugin.
  if (result.rows() != 1 || result.columns() < 3) {
    return absl::InternalError("unexpected CREATE_REPLICATION_SLOT result");
  }
  CreatedSlot created{.snapshot = std::string(result.Get(0, 2))};
  OUTBOXD_ASSIGN_OR_RETURN(created.consistent_point, ParseLsn(result.Get(0, 1)));
  return created;
}

absl::Status DropSlot(Connection& conn, std::string_view slot) {
  return conn.ExecParams("SELECT pg_drop_replication_slot($1)", {std::string(slot)}).status();
}

}  // namespace outboxd::pg
