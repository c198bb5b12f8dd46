// The stream a NATS sink publishes to: checked, or created when missing, before the
// first publish (src/nats/sink.h, StreamOptions).
//
//   OUTBOXD_RETURN_IF_ERROR(PrepareStream(js, {.name = "OUTBOXD", .subjects = {"order.>"}},
//                                         "nats://127.0.0.1:4222"));
#ifndef OUTBOXD_NATS_INTERNAL_STREAM_H_
#define OUTBOXD_NATS_INTERNAL_STREAM_H_

#include <nats/nats.h>

#include <string>

#include "absl/status/status.h"
#include "nats/sink.h"

namespace outboxd::nats {

// OK when the stream exists (left as it is) or was created (file storage, the given
// subjects and duplicate window). NotFound when it is missing and `options.declare` is
// kPassive; InvalidArgument when it must be created with no subjects or the server
// refuses its configuration; Unavailable when the server did not answer. `where` is
// the redacted URL, for the messages.
[[nodiscard]] absl::Status PrepareStream(jsCtx* js, const StreamOptions& options,
                                         const std::string& where);

}  // namespace outboxd::nats

#endif  // OUTBOXD_NATS_INTERNAL_STREAM_H_
