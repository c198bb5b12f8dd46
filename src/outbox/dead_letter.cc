#include "outbox/dead_letter.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "base/status_macros.h"
#include "pg/identifier.h"

namespace outboxd::outbox {

bool IsUnreadableMessage(const DeadLetter& letter) {
  return absl::StartsWith(letter.id, kUnreadableMessagePrefix);
}

DeadLetterStore::DeadLetterStore(const std::string& outbox_table)
    : name_(pg::TableName::SiblingOf(outbox_table, "_dead_letter")) {}

std::string DeadLetterStore::CreateSql(pg::Connection& conn) const {
  // Text columns: a poison event may be exactly what does not fit the outbox's types.
  return absl::StrCat("CREATE TABLE IF NOT EXISTS ", Quoted(conn), R"sql( (
  seq          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  id           text        NOT NULL UNIQUE,
  aggregate_id text        NOT NULL,
  type         text        NOT NULL,
  payload      text        NOT NULL,
  created_at   text        NOT NULL,
  lsn          text        NOT NULL,
  topic        text        NOT NULL,
  error        text        NOT NULL,
  dead_at      timestamptz NOT NULL DEFAULT now()
); CREATE INDEX IF NOT EXISTS )sql",
                      pg::QuoteCheckedIdentifier(name_.name + "_aggregate"), " ON ", Quoted(conn),
                      " (aggregate_id, seq)");
}

absl::Status DeadLetterStore::Insert(pg::Connection& conn, const DeadLetter& l) const {
  return conn
      .ExecParams(absl::StrCat("INSERT INTO ", Quoted(conn),
                               " (id, aggregate_id, type, payload, created_at, lsn, topic, error)"
                               " VALUES ($1, $2, $3, $4, $5, $6, $7, left($8, 2000))"
                               " ON CONFLICT (id) DO NOTHING"),
                  {l.id, l.aggregate_id, l.type, l.payload, l.created_at, l.lsn, l.topic, l.error})
      .status();
}

absl::StatusOr<absl::flat_hash_map<std::string, FirstDeadLetter>> DeadLetterStore::Aggregates(
    pg::Connection& conn) const {
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::Result r, conn.Exec(absl::StrCat("SELECT DISTINCT ON (aggregate_id) aggregate_id, lsn, id "
                                           "FROM ",
                                           Quoted(conn), " ORDER BY aggregate_id, seq")));
  absl::flat_hash_map<std::string, FirstDeadLetter> aggregates;
  for (int i = 0; i < r.rows(); ++i) {
    aggregates[std::string(r.Get(i, 0))] = {std::string(r.Get(i, 1)), std::string(r.Get(i, 2))};
  }
  return aggregates;
}

absl::StatusOr<std::vector<DeadLetter>> DeadLetterStore::List(
    pg::Connection& conn, const std::optional<std::string>& aggregate) const {
  std::string sql = absl::StrCat(
      "SELECT seq, id, aggregate_id, type, payload, created_at, lsn, topic, error, "
      "to_char(dead_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"') FROM ",
      Quoted(conn), aggregate ? " WHERE aggregate_id = $1" : "", " ORDER BY seq");
  std::vector<std::optional<std::string>> params;
  if (aggregate) params.push_back(*aggregate);
  OUTBOXD_ASSIGN_OR_RETURN(pg::Result r, conn.ExecParams(sql, params));
  std::vector<DeadLetter> letters(r.rows());
  for (int i = 0; i < r.rows(); ++i) {
    DeadLetter& l = letters[i];
    if (!absl::SimpleAtoi(std::string(r.Get(i, 0)), &l.seq)) {
      return absl::InternalError("dead letter with a non-numeric seq");
    }
    std::string* fields[] = {&l.id,  &l.aggregate_id, &l.type,  &l.payload, &l.created_at,
                             &l.lsn, &l.topic,        &l.error, &l.dead_at};
    for (int f = 0; f < 9; ++f) *fields[f] = r.Get(i, f + 1);
  }
  return letters;
}

absl::StatusOr<int64_t> DeadLetterStore::Count(pg::Connection& conn) const {
  OUTBOXD_ASSIGN_OR_RETURN(pg::Result r,
                           conn.Exec(absl::StrCat("SELECT count(*) FROM ", Quoted(conn))));
  int64_t n = 0;
  if (!absl::SimpleAtoi(std::string(r.Get(0, 0)), &n)) return absl::InternalError("bad count");
  return n;
}

absl::Status DeadLetterStore::Remove(pg::Connection& conn, int64_t seq) const {
  return conn
      .ExecParams(absl::StrCat("DELETE FROM ", Quoted(conn), " WHERE seq = $1"),
                  {absl::StrCat(seq)})
      .status();
}

std::string DeadLetterStore::DeleteSql(const std::string& id) const {
  return absl::StrCat("DELETE FROM ", name_.quoted, " WHERE id = '",
                      absl::StrReplaceAll(id, {{"'", "''"}}), "'");
}

absl::Status DeadLetterStore::CheckReplayPrivileges(pg::Connection& conn) const {
  const std::string table = Quoted(conn);
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::Result r, conn.ExecParams("SELECT current_user, has_table_privilege($1, 'SELECT'), "
                                    "has_table_privilege($1, 'DELETE')",
                                    {table}));
  const bool can_select = r.Get(0, 1) == "t";
  const bool can_delete = r.Get(0, 2) == "t";
  if (can_select && can_delete) return absl::OkStatus();
  const std::string role(r.Get(0, 0));
  const char* missing = !can_select && !can_delete ? "SELECT and DELETE"
                        : can_select               ? "DELETE"
                                                   : "SELECT";
  return absl::PermissionDeniedError(absl::StrCat(
      "role ", role, " lacks ", missing, " on ", table,
      ", which dead-letter replay needs to remove what it republished (nothing was published): "
      "GRANT SELECT, DELETE ON ",
      table, " TO ", pg::SqlIdentifier(role), ", or run it as the table's owner"));
}

}  // namespace outboxd::outbox
