#include "sink/sink.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace outboxd::sink {

std::string HeldIdentity(std::string_view id, std::string_view key) {
  std::string identity;
  HeldIdentity(id, key, &identity);
  return identity;
}

void HeldIdentity(std::string_view id, std::string_view key, std::string* out) {
  out->clear();
  for (std::string_view part : {id, key}) {
    absl::StrAppend(out, part.size(), ":");
    out->append(part);
  }
}

absl::Status PollUntilConfirmed(Sink& sink, absl::Duration timeout, std::string_view broker) {
  const absl::Time deadline = absl::Now() + timeout;
  while (sink.InFlight() > 0) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(
          absl::StrCat(sink.InFlight(), " messages still unacknowledged by ", std::string(broker),
                       " after ", absl::FormatDuration(timeout)));
    }
    // Rounded up: a Poll(0) would spin through the last millisecond.
    const absl::Duration wait =
        absl::Ceil(std::min(left, absl::Milliseconds(100)), absl::Milliseconds(1));
    sink.Poll(static_cast<int>(absl::ToInt64Milliseconds(wait)));
  }
  return absl::OkStatus();
}

}  // namespace outboxd::sink
