// Rewording an error on its way up without losing what callers classify it by: the
// status code and the payloads (pg/connection.h attaches the server's SQLSTATE as
// one). The one way to say "cannot add the event to outbox: <the server's message>".
//
//   return Annotate(status, "cannot add the event to app.outbox: ");
//   return Annotate(status, "", " (setup created and keeps the outbox table)");
//   return Annotate(status, "reconcile: ", "", absl::StatusCode::kInvalidArgument);
#ifndef OUTBOXD_BASE_ANNOTATE_H_
#define OUTBOXD_BASE_ANNOTATE_H_

#include <optional>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace outboxd {

// `status` with the message prefix + message + suffix, its payloads, and its code
// (or `code` when given). OK stays OK.
absl::Status Annotate(const absl::Status& status, absl::string_view prefix,
                      absl::string_view suffix = {},
                      std::optional<absl::StatusCode> code = std::nullopt);

}  // namespace outboxd

#endif  // OUTBOXD_BASE_ANNOTATE_H_
