#include "base/annotate.h"

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

namespace outboxd {

absl::Status Annotate(const absl::Status& status, absl::string_view prefix,
                      absl::string_view suffix, std::optional<absl::StatusCode> code) {
  if (status.ok()) return status;
  absl::Status out(code.value_or(status.code()), absl::StrCat(prefix, status.message(), suffix));
  status.ForEachPayload(
      [&out](absl::string_view url, const absl::Cord& payload) { out.SetPayload(url, payload); });
  return out;
}

}  // namespace outboxd
