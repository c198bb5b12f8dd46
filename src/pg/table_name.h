// A possibly schema-qualified table name as given to --table ("outbox",
// "app.outbox", "\"my.sch\".outbox"), parsed once by the one parser every command
// uses, with the names of the tables outboxd keeps beside it (dead letters, relay
// state, inbox).
//
//   OUTBOXD_ASSIGN_OR_RETURN(pg::TableName outbox, pg::TableName::Parse("app.outbox"));
//   conn.Exec(absl::StrCat("SELECT count(*) FROM ", outbox.quoted));
//   pg::TableName state = outbox.Sibling(outbox.name + "_relay_state");
#ifndef OUTBOXD_PG_TABLE_NAME_H_
#define OUTBOXD_PG_TABLE_NAME_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "pg/connection.h"

namespace outboxd::pg {

struct TableName {
  std::string schema;  // "" for the search_path default
  std::string name;
  std::string quoted;  // "schema"."name" or "name"

  // [schema.]name, each part either bare, taken as written (no case folding, as
  // outboxd always did: --table Outbox is the table "Outbox"), or double-quoted as in
  // SQL, with "" for a quote inside: "my.sch".outbox, "We""ird". A bare part cannot
  // hold a dot or a quote; three parts are refused rather than guessed at. Each part
  // passes CheckIdentifier (pg/identifier.h). InvalidArgument names `what` (the flag).
  //   Parse("a.b")            -> {"a", "b"}
  //   Parse("\"my.sch\".t")  -> {"my.sch", "t"}
  //   Parse("my.sch.t")       -> InvalidArgument (quote the part with the dot)
  static absl::StatusOr<TableName> Parse(std::string_view text, std::string_view what = "--table");
  // `name` in the same schema as this table (a name already checked).
  TableName Sibling(const std::string& name) const;
  // "app.outbox" + "_dead_letter" -> app.outbox_dead_letter: a table outboxd keeps
  // beside the outbox (dead letters, relay state). The outbox name was checked where
  // it came in (Parse); one that does not parse is kept whole as the name, which
  // still quotes safely and makes the server report the table missing.
  static TableName SiblingOf(std::string_view outbox_table, std::string_view suffix);
  absl::StatusOr<bool> Exists(Connection& conn) const;
  absl::StatusOr<bool> HasColumn(Connection& conn, const std::string& column) const;
  // SELECT count(*) of the table (a partition's own rows when it is a leaf).
  absl::StatusOr<int64_t> CountRows(Connection& conn) const;
  // For messages: schema.name, each part quoted only where SQL needs it.
  std::string Display() const;
};

}  // namespace outboxd::pg

#endif  // OUTBOXD_PG_TABLE_NAME_H_
