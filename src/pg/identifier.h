// Checks on the names outboxd builds into SQL (tables, schemas, columns, the
// publication, the NOTIFY channel, the slot), run before anything is created, so a
// name PostgreSQL would truncate, reject or mangle is refused up front with one line
// naming the flag and the fix, instead of failing half-way through `setup` or, for a
// trigger argument, in every later application INSERT.
//
//   OUTBOXD_RETURN_IF_ERROR(CheckIdentifier(options.channel, "--notify-channel"));
//   OUTBOXD_RETURN_IF_ERROR(CheckSlotName(options.slot, "--slot"));
#ifndef OUTBOXD_PG_IDENTIFIER_H_
#define OUTBOXD_PG_IDENTIFIER_H_

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace outboxd::pg {

// NAMEDATALEN - 1: PostgreSQL truncates a longer identifier (with only a NOTICE) and
// pg_notify refuses a longer channel ("channel name too long").
constexpr size_t kMaxIdentifierBytes = 63;

// InvalidArgument unless `name` is 1 to 63 bytes of valid UTF-8 without NUL. `what`
// names its flag in the message: "--notify-channel \"...\" is 70 bytes long; ...".
absl::Status CheckIdentifier(std::string_view name, std::string_view what);

// CheckIdentifier, plus PostgreSQL's rule for replication slot names: lower-case
// letters, digits and underscores only.
absl::Status CheckSlotName(std::string_view name, std::string_view what);

// `name` double-quoted as an SQL identifier, each " doubled: what PostgreSQL's
// quote_ident and libpq's PQescapeIdentifier produce for a name CheckIdentifier
// accepts (valid UTF-8, no NUL), so it cannot fail for one.
std::string QuoteCheckedIdentifier(std::string_view name);

// `text` for a message: printable ASCII and valid UTF-8 as is, other bytes as \xNN,
// cut to about 80 bytes, in double quotes.
std::string PrintableName(std::string_view text);

}  // namespace outboxd::pg

#endif  // OUTBOXD_PG_IDENTIFIER_H_
