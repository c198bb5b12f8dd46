#include "pg/table_name.h"

#include <algorithm>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "pg/identifier.h"

namespace outboxd::pg {
namespace {

std::string Qualified(const std::string& schema, const std::string& name) {
  const std::string quoted = QuoteCheckedIdentifier(name);
  return schema.empty() ? quoted : absl::StrCat(QuoteCheckedIdentifier(schema), ".", quoted);
}

absl::Status Unparsable(std::string_view text, std::string_view what, std::string_view why) {
  const std::string flag(what);
  return absl::InvalidArgumentError(absl::StrCat(
      flag, " ", PrintableName(text), " ", std::string(why),
      "; write [schema.]table, double-quoting a part that holds a dot or a quote, e.g. ", flag,
      " '\"my.sch\".outbox'"));
}

// The next part of `text` from `pos`: a double-quoted identifier ("" is a quote) or
// a bare run up to the next dot. Leaves `pos` on the dot or the end.
absl::StatusOr<std::string> NextPart(std::string_view text, size_t& pos, std::string_view what) {
  std::string part;
  if (pos < text.size() && text[pos] == '"') {
    for (++pos;; ++pos) {
      if (pos == text.size()) return Unparsable(text, what, "has an unclosed quote");
      if (text[pos] != '"') {
        part += text[pos];
      } else if (pos + 1 < text.size() && text[pos + 1] == '"') {
        part += '"';
        ++pos;
      } else {
        ++pos;
        break;
      }
    }
    if (pos < text.size() && text[pos] != '.') {
      return Unparsable(text, what, "has text after a closing quote");
    }
    return part;
  }
  const size_t end = std::min(text.find('.', pos), text.size());
  part = std::string(text.substr(pos, end - pos));
  pos = end;
  if (part.find('"') != std::string::npos) {
    return Unparsable(text, what, "has a quote inside a bare name");
  }
  return part;
}

}  // namespace

absl::StatusOr<TableName> TableName::Parse(std::string_view text, std::string_view what) {
  std::vector<std::string> parts;
  size_t pos = 0;
  while (true) {
    OUTBOXD_ASSIGN_OR_RETURN(std::string part, NextPart(text, pos, what));
    parts.push_back(std::move(part));
    if (pos == text.size()) break;
    ++pos;  // the dot
  }
  if (parts.size() > 2) {
    return Unparsable(text, what, absl::StrCat("has ", parts.size(), " dot-separated parts"));
  }
  for (const std::string& part : parts) {
    if (part.empty() && !text.empty()) return Unparsable(text, what, "has an empty part");
    OUTBOXD_RETURN_IF_ERROR(CheckIdentifier(part, what));
  }
  TableName table;
  table.name = parts.back();
  if (parts.size() == 2) table.schema = parts.front();
  table.quoted = Qualified(table.schema, table.name);
  return table;
}

TableName TableName::Sibling(const std::string& sibling) const {
  TableName table{schema, sibling, Qualified(schema, sibling)};
  return table;
}

absl::StatusOr<bool> TableName::Exists(Connection& conn) const {
  OUTBOXD_ASSIGN_OR_RETURN(Result r,
                           conn.ExecParams("SELECT to_regclass($1) IS NOT NULL", {quoted}));
  return r.Get(0, 0) == "t";
}

absl::StatusOr<bool> TableName::HasColumn(Connection& conn, const std::string& column) const {
  OUTBOXD_ASSIGN_OR_RETURN(
      Result r, conn.ExecParams("SELECT 1 FROM pg_attribute WHERE attrelid = $1::regclass "
                                "AND attname = $2 AND attnum > 0 AND NOT attisdropped",
                                {quoted, column}));
  return r.rows() > 0;
}

absl::StatusOr<int64_t> TableName::CountRows(Connection& conn) const {
  OUTBOXD_ASSIGN_OR_RETURN(Result r, conn.Exec(absl::StrCat("SELECT count(*) FROM ", quoted)));
  int64_t rows = 0;
  if (!absl::SimpleAtoi(std::string(r.Get(0, 0)), &rows)) {
    return absl::InternalError(absl::StrCat("count(*) of ", Display(), " unreadable"));
  }
  return rows;
}

std::string TableName::Display() const {
  std::string display = SqlIdentifier(name);
  return schema.empty() ? display : absl::StrCat(SqlIdentifier(schema), ".", display);
}

TableName TableName::SiblingOf(std::string_view outbox_table, std::string_view suffix) {
  absl::StatusOr<TableName> table = Parse(outbox_table);
  const std::string schema = table.ok() ? table->schema : "";
  const std::string name = table.ok() ? table->name : std::string(outbox_table);
  return TableName{schema, name, ""}.Sibling(absl::StrCat(name, std::string(suffix)));
}

}  // namespace outboxd::pg
