#include "pg/table_name.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace outboxd::pg {

TableName TableName::Split(Connection& conn, const std::string& qualified) {
  TableName table;
  const size_t dot = qualified.rfind('.');
  table.name = dot == std::string::npos ? qualified : qualified.substr(dot + 1);
  table.schema = dot == std::string::npos ? "" : qualified.substr(0, dot);
  table.quoted = conn.QuoteIdentifier(table.name);
  if (!table.schema.empty()) {
    table.quoted = absl::StrCat(conn.QuoteIdentifier(table.schema), ".", table.quoted);
  }
  return table;
}

TableName TableName::Sibling(Connection& conn, const std::string& sibling) const {
  return Split(conn, schema.empty() ? sibling : absl::StrCat(schema, ".", sibling));
}

absl::StatusOr<bool> TableName::Exists(Connection& conn) const {
  OUTBOXD_ASSIGN_OR_RETURN(Result r, conn.ExecParams("SELECT to_regclass($1) IS NOT NULL", {quoted}));
  return r.Get(0, 0) == "t";
}

absl::StatusOr<bool> TableName::HasColumn(Connection& conn, const std::string& column) const {
  OUTBOXD_ASSIGN_OR_RETURN(
      Result r, conn.ExecParams("SELECT 1 FROM pg_attribute WHERE attrelid = $1::regclass "
                                "AND attname = $2 AND attnum > 0 AND NOT attisdropped",
                                {quoted, column}));
  return r.rows() > 0;
}

std::string TableName::Display() const {
  std::string display = SqlIdentifier(name);
  return schema.empty() ? display : absl::StrCat(SqlIdentifier(schema), ".", display);
}

SiblingName::SiblingName(const std::string& qualified_table, const std::string& suffix) {
  const size_t dot = qualified_table.rfind('.');
  if (dot != std::string::npos) schema = qualified_table.substr(0, dot);
  name = absl::StrCat(dot == std::string::npos ? qualified_table : qualified_table.substr(dot + 1),
                      suffix);
}

std::string SiblingName::Quoted(Connection& conn) const {
  std::string quoted = conn.QuoteIdentifier(name);
  return schema.empty() ? quoted : absl::StrCat(conn.QuoteIdentifier(schema), ".", quoted);
}

}  // namespace outboxd::pg
