// A possibly schema-qualified table name as given to --table ("outbox",
// "app.outbox"), split once and quoted by the server's rules, with the names of the
// tables outboxd keeps beside it (dead letters, relay state, inbox).
//
//   pg::TableName outbox = pg::TableName::Split(conn, "app.outbox");
//   conn.Exec(absl::StrCat("SELECT count(*) FROM ", outbox.quoted));
//   pg::TableName state = outbox.Sibling(conn, outbox.name + "_relay_state");
#ifndef OUTBOXD_PG_TABLE_NAME_H_
#define OUTBOXD_PG_TABLE_NAME_H_

#include <string>

#include "absl/status/statusor.h"
#include "pg/connection.h"

namespace outboxd::pg {

struct TableName {
  std::string schema;  // "" for the search_path default
  std::string name;
  std::string quoted;  // "schema"."name" or "name"

  static TableName Split(Connection& conn, const std::string& qualified);
  // `name` in the same schema as this table.
  TableName Sibling(Connection& conn, const std::string& name) const;
  absl::StatusOr<bool> Exists(Connection& conn) const;
  absl::StatusOr<bool> HasColumn(Connection& conn, const std::string& column) const;
  // For messages: schema.name, each part quoted only where SQL needs it.
  std::string Display() const;
};

// "app.outbox" + "_dead_letter" -> {"app", "outbox_dead_letter"}: the name of a
// table outboxd keeps beside the outbox, before any connection can quote it.
struct SiblingName {
  SiblingName(const std::string& qualified_table, const std::string& suffix);
  std::string schema;  // "" for the search_path default
  std::string name;
  // "schema"."name" or "name".
  std::string Quoted(Connection& conn) const;
};

}  // namespace outboxd::pg

#endif  // OUTBOXD_PG_TABLE_NAME_H_
