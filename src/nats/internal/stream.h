// The stream a NATS sink publishes to: checked, or created when missing, before the
// first publish (src/nats/sink.h, StreamOptions); and, when a publish met no
// responders, whether that stream takes the subject after all.
//
//   OUTBOXD_RETURN_IF_ERROR(PrepareStream(js, {.name = "OUTBOXD", .subjects = {"order.>"}},
//                                         "nats://127.0.0.1:4222"));
#ifndef OUTBOXD_NATS_INTERNAL_STREAM_H_
#define OUTBOXD_NATS_INTERNAL_STREAM_H_

#include <nats/nats.h>

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nats/sink.h"

namespace outboxd::nats {

// OK when the stream exists (left as it is) or was created (file storage, the given
// subjects and duplicate window). NotFound when it is missing and `options.declare` is
// kPassive (naming options.fix_if_missing); InvalidArgument when it must be created
// with no subjects or the server refuses its configuration; Unavailable when the
// server did not answer. `where` is the redacted URL, for the messages.
[[nodiscard]] absl::Status PrepareStream(jsCtx* js, const StreamOptions& options,
                                         const std::string& where);

// A publish to `subject` met no responders: true when `stream` exists and one of its
// subjects matches, so the silence was the stream's own (a clustered stream between
// two leaders, its leader's server gone) and publishing again will reach it; false
// when no stream of that name takes the subject. Unavailable when JetStream could
// not say within a second (its own leaders being elected, or no server reached).
//
//   if (!StreamTakesSubject(js, "OUTBOXD", "order.confirmed").value_or(true)) dead-letter
absl::StatusOr<bool> StreamTakesSubject(jsCtx* js, const std::string& stream,
                                        std::string_view subject);

}  // namespace outboxd::nats

#endif  // OUTBOXD_NATS_INTERNAL_STREAM_H_
