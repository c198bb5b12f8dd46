// Durations as users write them: "500ms", "10s", "5m", "2h", "7d" ("0s" allowed).
//
//   absl::Duration d = ParseDuration("7d").value();   // absl::Hours(168)
#ifndef OUTBOXD_BASE_DURATION_H_
#define OUTBOXD_BASE_DURATION_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace outboxd {

inline absl::StatusOr<absl::Duration> ParseDuration(absl::string_view text) {
  struct Unit {
    absl::string_view suffix;
    absl::Duration size;
  };
  // "ms" before "s": the longest suffix wins.
  static const Unit kUnits[] = {{"ms", absl::Milliseconds(1)},
                                {"s", absl::Seconds(1)},
                                {"m", absl::Minutes(1)},
                                {"h", absl::Hours(1)},
                                {"d", absl::Hours(24)}};
  for (const Unit& unit : kUnits) {
    if (text.size() <= unit.suffix.size() || !absl::EndsWith(text, unit.suffix)) continue;
    int64_t count = 0;
    if (absl::SimpleAtoi(text.substr(0, text.size() - unit.suffix.size()), &count) && count >= 0) {
      return count * unit.size;
    }
    break;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "bad duration \"", text, "\": write a whole number and a unit, e.g. 500ms, 10s, 5m, 2h, 7d"));
}

}  // namespace outboxd

#endif  // OUTBOXD_BASE_DURATION_H_
