// Log sequence numbers: PostgreSQL's 64-bit WAL positions, written "X/Y" (hex).
//
//   Lsn lsn = ParseLsn("16/B374D848").value();   // 0x16B374D848
//   FormatLsn(lsn) == "16/B374D848"
#ifndef OUTBOXD_PG_LSN_H_
#define OUTBOXD_PG_LSN_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace outboxd::pg {

using Lsn = uint64_t;
inline constexpr Lsn kInvalidLsn = 0;

std::string FormatLsn(Lsn lsn);
absl::StatusOr<Lsn> ParseLsn(std::string_view text);

}  // namespace outboxd::pg

#endif  // OUTBOXD_PG_LSN_H_
