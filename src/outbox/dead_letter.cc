#include "outbox/dead_letter.h"

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "base/log_escape.h"
#include "base/status_macros.h"
#include "outbox/stored_letter.h"
#include "pg/identifier.h"

namespace outboxd::outbox {
namespace {

// A bytea column in text form ("\\x0a1b..."); "" for anything else, which FromStored
// then finds unreadable.
std::string BytesFromHex(std::string_view text) {
  if (text.substr(0, 2) != "\\x" || text.size() % 2 != 0) return "";
  for (char c : text.substr(2)) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) return "";
  }
  return absl::HexStringToBytes(absl::string_view(text.data() + 2, text.size() - 2));
}

}  // namespace

bool IsUnreadableMessage(const DeadLetter& letter) {
  return absl::StartsWith(letter.id, kUnreadableMessagePrefix);
}

bool HasNullKey(const DeadLetter& letter) {
  return absl::StartsWith(letter.error, kNullKeyError) &&
         (absl::StartsWith(letter.id, kNullKeyPrefix) ||
          absl::StartsWith(letter.aggregate_id, kNullKeyPrefix));
}

DeadLetterStore::DeadLetterStore(const std::string& outbox_table, std::optional<std::string> slot)
    : name_(pg::TableName::SiblingOf(outbox_table, "_dead_letter")), slot_(std::move(slot)) {}

std::string DeadLetterStore::CreateSql(pg::Connection& conn) const {
  // Text columns: a poison event may be exactly what does not fit the outbox's types.
  // What does not fit text either is stored as a stand-in, its bytes in `original`
  // (outbox/stored_letter.h).
  return absl::StrCat("CREATE TABLE IF NOT EXISTS ", Quoted(conn), R"sql( (
  seq          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  id           text        NOT NULL,
  aggregate_id text        NOT NULL,
  type         text        NOT NULL,
  payload      text        NOT NULL,
  created_at   text        NOT NULL,
  lsn          text        NOT NULL,
  topic        text        NOT NULL,
  error        text        NOT NULL,
  dead_at      timestamptz NOT NULL DEFAULT now(),
  original     bytea,
  slot         text,
  headers      text
); CREATE INDEX IF NOT EXISTS )sql",
                      pg::QuoteCheckedIdentifier(name_.name + "_aggregate"), " ON ", Quoted(conn),
                      " (aggregate_id, seq); CREATE UNIQUE INDEX IF NOT EXISTS ",
                      pg::QuoteCheckedIdentifier(name_.name + "_event"), " ON ", Quoted(conn),
                      " (id, aggregate_id, slot)");
}

absl::StatusOr<std::string> DeadLetterStore::Migrate(pg::Connection& conn) const {
  // The unique constraint an older setup made: on id alone.
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::Result old,
      conn.ExecParams("SELECT c.conname FROM pg_constraint c JOIN pg_attribute a ON "
                      "a.attrelid = c.conrelid AND a.attname = 'id' WHERE c.conrelid = "
                      "$1::regclass AND c.contype = 'u' AND c.conkey = ARRAY[a.attnum]",
                      {name_.quoted}));
  // The unique index a later one made: on (id, aggregate_id), the slot not in it.
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::Result old_index,
      conn.ExecParams("SELECT i.indexrelid::regclass::text FROM pg_index i JOIN pg_class c ON "
                      "c.oid = i.indexrelid WHERE i.indrelid = $1::regclass AND c.relname = $2 "
                      "AND NOT EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = "
                      "i.indrelid AND a.attname = 'slot' AND a.attnum = ANY(i.indkey))",
                      {name_.quoted, name_.name + "_event"}));
  shape_.reset();
  OUTBOXD_ASSIGN_OR_RETURN(const Shape shape, ReadShape(conn));
  shape_.reset();
  if (shape.original && shape.slot && shape.headers && old.rows() == 0 && old_index.rows() == 0) {
    return std::string();
  }
  std::string sql = absl::StrCat("ALTER TABLE ", name_.quoted,
                                 " ADD COLUMN IF NOT EXISTS original bytea, "
                                 "ADD COLUMN IF NOT EXISTS slot text, "
                                 "ADD COLUMN IF NOT EXISTS headers text");
  for (int i = 0; i < old_index.rows(); ++i) {
    // As regclass prints it: quoted, and schema-qualified where the path needs it.
    absl::StrAppend(&sql, "; DROP INDEX ", std::string(old_index.Get(i, 0)));
  }
  absl::StrAppend(&sql, "; CREATE UNIQUE INDEX IF NOT EXISTS ",
                  pg::QuoteCheckedIdentifier(name_.name + "_event"), " ON ", name_.quoted,
                  " (id, aggregate_id, slot)");
  for (int i = 0; i < old.rows(); ++i) {
    absl::StrAppend(&sql, "; ALTER TABLE ", name_.quoted, " DROP CONSTRAINT ",
                    pg::SqlIdentifier(std::string(old.Get(i, 0))));
  }
  // One query string, so one transaction: no moment without a unique index.
  OUTBOXD_RETURN_IF_ERROR(conn.Exec(sql).status());
  return absl::StrCat("table ", name_.name,
                      " migrated: columns original (the bytes of a letter's fields that text "
                      "cannot hold), slot (the relay that filed it) and headers (the "
                      "event's headers), ids unique per aggregate and slot");
}

absl::StatusOr<DeadLetterStore::Shape> DeadLetterStore::ReadShape(pg::Connection& conn) const {
  if (shape_) return *shape_;
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::Result r, conn.ExecParams("SELECT attname FROM pg_attribute WHERE attrelid = "
                                    "$1::regclass AND attname IN ('original', 'slot', 'headers') "
                                    "AND NOT attisdropped",
                                    {name_.quoted}));
  Shape shape;
  for (int i = 0; i < r.rows(); ++i) {
    const std::string_view column = r.Get(i, 0);
    (column == "original" ? shape.original : column == "slot" ? shape.slot : shape.headers) = true;
  }
  shape_ = shape;
  return shape;
}

std::string DeadLetterStore::SlotFilter(const Shape& shape,
                                        std::vector<std::optional<std::string>>& params) const {
  if (!slot_ || !shape.slot) return "";
  params.push_back(*slot_);
  return absl::StrCat(" AND (slot = $", params.size(), " OR slot IS NULL)");
}

absl::Status DeadLetterStore::Insert(pg::Connection& conn, const DeadLetter& letter) const {
  OUTBOXD_ASSIGN_OR_RETURN(const Shape shape, ReadShape(conn));
  if (!letter.headers.empty() && !shape.headers)
    return NotMigrated(letter, "has no headers column");
  const StoredLetter row = ToStored(letter);
  const DeadLetter& l = row.text;
  std::vector<std::optional<std::string>> params = {
      l.id, l.aggregate_id, l.type, l.payload, l.created_at, l.lsn, l.topic, l.error};
  std::string columns, values;
  // The later columns a table may lack, each with its value (NULL: none).
  const auto add = [&](bool present, const char* column, const char* type,
                       std::optional<std::string> value) {
    if (!present) return;
    params.push_back(std::move(value));
    absl::StrAppend(&columns, ", ", column);
    absl::StrAppend(&values, ", $", params.size(), "::", type);
  };
  add(shape.original, "original", "bytea",
      row.original ? std::optional(absl::StrCat("\\x", absl::BytesToHexString(*row.original)))
                   : std::nullopt);
  add(shape.headers, "headers", "text",
      l.headers.empty() ? std::nullopt : std::optional(l.headers));
  // Stored before under this slot (or before slots were recorded): the same letter.
  const std::string mine = SlotFilter(shape, params);
  if (!mine.empty()) {
    columns += ", slot";
    absl::StrAppend(&values, ", $", params.size(), "::text");
  }
  // No conflict target: the table may still have an older setup's unique id, and the
  // check below tells such a refusal from a letter stored before.
  const std::string table = Quoted(conn);
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::Result r,
      conn.ExecParams(
          absl::StrCat("WITH stored AS (INSERT INTO ", table,
                       " (id, aggregate_id, type, payload, created_at, lsn, topic, error", columns,
                       ") SELECT $1::text, $2::text, $3::text, $4::text, $5::text, $6::text, "
                       "$7::text, left($8::text, 2000)",
                       values, " WHERE NOT EXISTS (SELECT 1 FROM ", table,
                       " WHERE id = $1 AND aggregate_id = $2", mine,
                       ") ON CONFLICT DO NOTHING RETURNING 1) "
                       "SELECT (SELECT count(*) FROM stored), EXISTS (SELECT 1 FROM ",
                       table, " WHERE id = $1 AND aggregate_id = $2", mine, ")"),
          params));
  if (r.Get(0, 0) != "0" || r.Get(0, 1) == "t") return absl::OkStatus();
  return NotMigrated(letter, "keeps event ids unique across aggregates or slots");
}

absl::Status DeadLetterStore::NotMigrated(const DeadLetter& letter, const char* why) const {
  return absl::UnavailableError(
      absl::StrCat("dead letter for event ", ExcerptForLog(letter.id), " of aggregate ",
                   ExcerptForLog(letter.aggregate_id), " not stored: table ", name_.name, " ", why,
                   " (made by an older outboxd setup); run outboxd setup to migrate it"));
}

absl::StatusOr<absl::flat_hash_map<std::string, FirstDeadLetter>> DeadLetterStore::Aggregates(
    pg::Connection& conn) const {
  OUTBOXD_ASSIGN_OR_RETURN(const Shape shape, ReadShape(conn));
  std::vector<std::optional<std::string>> params;
  const std::string mine = SlotFilter(shape, params);
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::Result r,
      conn.ExecParams(
          absl::StrCat("SELECT DISTINCT ON (aggregate_id) aggregate_id, lsn, id FROM ",
                       Quoted(conn), " WHERE true", mine, " ORDER BY aggregate_id, seq"),
          params));
  absl::flat_hash_map<std::string, FirstDeadLetter> aggregates;
  for (int i = 0; i < r.rows(); ++i) {
    aggregates[std::string(r.Get(i, 0))] = {std::string(r.Get(i, 1)), std::string(r.Get(i, 2))};
  }
  return aggregates;
}

absl::StatusOr<std::vector<DeadLetter>> DeadLetterStore::List(
    pg::Connection& conn, const std::optional<std::string>& aggregate) const {
  OUTBOXD_ASSIGN_OR_RETURN(const Shape shape, ReadShape(conn));
  std::vector<std::optional<std::string>> params;
  if (aggregate) params.push_back(StoredKey(*aggregate));
  const std::string mine = SlotFilter(shape, params);
  std::string sql = absl::StrCat(
      "SELECT seq, id, aggregate_id, type, payload, created_at, lsn, topic, error, "
      "to_char(dead_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), ",
      shape.original ? "original" : "NULL::bytea", ", ", shape.slot ? "slot" : "NULL::text", ", ",
      shape.headers ? "headers" : "NULL::text", " FROM ", Quoted(conn), " WHERE ",
      aggregate ? "aggregate_id = $1" : "true", mine, " ORDER BY seq");
  OUTBOXD_ASSIGN_OR_RETURN(pg::Result r, conn.ExecParams(sql, params));
  std::vector<DeadLetter> letters(r.rows());
  for (int i = 0; i < r.rows(); ++i) {
    StoredLetter row;
    DeadLetter& l = row.text;
    if (!absl::SimpleAtoi(std::string(r.Get(i, 0)), &l.seq)) {
      return absl::InternalError("dead letter with a non-numeric seq");
    }
    std::string* fields[] = {&l.id,  &l.aggregate_id, &l.type,  &l.payload, &l.created_at,
                             &l.lsn, &l.topic,        &l.error, &l.dead_at};
    for (int f = 0; f < 9; ++f) *fields[f] = r.Get(i, f + 1);
    if (!r.IsNull(i, 10)) row.original = BytesFromHex(r.Get(i, 10));
    if (!r.IsNull(i, 11)) l.slot = std::string(r.Get(i, 11));
    if (!r.IsNull(i, 12)) l.headers = r.Get(i, 12);
    letters[i] = FromStored(row);
  }
  return letters;
}

absl::StatusOr<int64_t> DeadLetterStore::Count(pg::Connection& conn) const {
  OUTBOXD_ASSIGN_OR_RETURN(const Shape shape, ReadShape(conn));
  std::vector<std::optional<std::string>> params;
  const std::string mine = SlotFilter(shape, params);
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::Result r,
      conn.ExecParams(absl::StrCat("SELECT count(*) FROM ", Quoted(conn), " WHERE true", mine),
                      params));
  int64_t n = 0;
  if (!absl::SimpleAtoi(std::string(r.Get(0, 0)), &n)) return absl::InternalError("bad count");
  return n;
}

absl::StatusOr<std::map<std::string, int64_t>> DeadLetterStore::OtherSlots(
    pg::Connection& conn) const {
  OUTBOXD_ASSIGN_OR_RETURN(const Shape shape, ReadShape(conn));
  std::map<std::string, int64_t> others;
  if (!slot_ || !shape.slot) return others;
  OUTBOXD_ASSIGN_OR_RETURN(pg::Result r,
                           conn.ExecParams(absl::StrCat("SELECT slot, count(*) FROM ", Quoted(conn),
                                                        " WHERE slot <> $1 GROUP BY slot"),
                                           {*slot_}));
  for (int i = 0; i < r.rows(); ++i) {
    if (!absl::SimpleAtoi(std::string(r.Get(i, 1)), &others[std::string(r.Get(i, 0))])) {
      return absl::InternalError("bad count");
    }
  }
  return others;
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
