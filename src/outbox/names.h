// The outbox's names as the commands take them (--table and the column flags),
// checked before any SQL is built from them or anything is created: each part a
// PostgreSQL identifier (pg/identifier.h), and the outbox table's name short enough
// that the tables outboxd keeps beside it ("<name>_dead_letter",
// "<name>_relay_state") fit PostgreSQL's 63 bytes instead of being truncated, or
// colliding, silently.
//
//   OUTBOXD_ASSIGN_OR_RETURN(pg::TableName outbox, ParseOutboxTable(options.table));
//   OUTBOXD_RETURN_IF_ERROR(CheckColumnNames(options.columns));
#ifndef OUTBOXD_OUTBOX_NAMES_H_
#define OUTBOXD_OUTBOX_NAMES_H_

#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "outbox/event.h"
#include "pg/table_name.h"

namespace outboxd::outbox {

// The longest suffix of a table outboxd keeps beside the outbox.
constexpr size_t kLongestSiblingSuffix = 12;  // "_dead_letter", "_relay_state"

// pg::TableName::Parse, and the outbox name leaves room for the longest suffix.
absl::StatusOr<pg::TableName> ParseOutboxTable(std::string_view table);
// Every column of the mapping is an identifier (its flag named in the error).
absl::Status CheckColumnNames(const ColumnMapping& columns);
// Both.
absl::Status CheckNames(std::string_view table, const ColumnMapping& columns);

}  // namespace outboxd::outbox

#endif  // OUTBOXD_OUTBOX_NAMES_H_
