#include "outbox/names.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "pg/identifier.h"

namespace outboxd::outbox {

absl::StatusOr<pg::TableName> ParseOutboxTable(std::string_view table) {
  OUTBOXD_ASSIGN_OR_RETURN(pg::TableName outbox, pg::TableName::Parse(table, "--table"));
  constexpr size_t kMaxName = pg::kMaxIdentifierBytes - kLongestSiblingSuffix;
  if (outbox.name.size() > kMaxName) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--table name ", pg::PrintableName(outbox.name), " is ", outbox.name.size(),
        " bytes long; outboxd keeps ", outbox.name, "_dead_letter and ", outbox.name,
        "_relay_state beside it and PostgreSQL names are at most ", pg::kMaxIdentifierBytes,
        " bytes: use an outbox table name of at most ", kMaxName, " bytes"));
  }
  return outbox;
}

absl::Status CheckColumnNames(const ColumnMapping& columns) {
  OUTBOXD_RETURN_IF_ERROR(pg::CheckIdentifier(columns.id, "--id-column"));
  OUTBOXD_RETURN_IF_ERROR(pg::CheckIdentifier(columns.aggregate_id, "--aggregate-column"));
  OUTBOXD_RETURN_IF_ERROR(pg::CheckIdentifier(columns.type, "--type-column"));
  OUTBOXD_RETURN_IF_ERROR(pg::CheckIdentifier(columns.payload, "--payload-column"));
  return pg::CheckIdentifier(columns.created_at, "--created-at-column");
}

absl::Status CheckNames(std::string_view table, const ColumnMapping& columns) {
  OUTBOXD_RETURN_IF_ERROR(ParseOutboxTable(table).status());
  return CheckColumnNames(columns);
}

}  // namespace outboxd::outbox
