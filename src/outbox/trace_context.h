// The W3C Trace Context header formats (www.w3.org/TR/trace-context, sections 3.2 and
// 3.3), checked before outboxd publishes a `traceparent` or `tracestate` header: a
// consumer's tracer trusts what it parses, so a malformed one is dropped rather than
// passed on as if valid (MessageEncoder, outbox/message_format.h). Each check returns
// the reason a value is malformed, a metric label, or nullopt when it is valid.
//
//   TraceparentDefect("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")  // nullopt
//   TraceparentDefect("00-00000000000000000000000000000000-00f067aa0ba902b7-01")  //
//   "zero_trace_id" TracestateDefect("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7") // nullopt
#ifndef OUTBOXD_OUTBOX_TRACE_CONTEXT_H_
#define OUTBOXD_OUTBOX_TRACE_CONTEXT_H_

#include <optional>
#include <string_view>

namespace outboxd::outbox {

inline constexpr std::string_view kTraceparent = "traceparent";
inline constexpr std::string_view kTracestate = "tracestate";

// version "-" trace-id "-" parent-id "-" trace-flags: lowercase hex of 2, 32, 16 and 2
// digits. Reasons: "malformed" (lengths, separators, not lowercase hex, or version 00
// with more after the flags), "bad_version" (ff), "zero_trace_id", "zero_parent_id".
// A version above 00 may carry more fields after the flags, behind a "-" (3.2.4).
std::optional<std::string_view> TraceparentDefect(std::string_view value);

// list-member *( OWS "," OWS list-member ), empty members allowed, at most 32
// members; key: a simple key (lcalpha then up to 255 of lcalpha, digit, _ - * /) or
// tenant@system (1-241 and 1-14 of those, the tenant may start with a digit, the
// system with lcalpha); value: 1-256 printable ASCII but "," and "=", no trailing
// space. Reasons: "malformed" (a member breaking that grammar), "too_many_members",
// "duplicate_key".
std::optional<std::string_view> TracestateDefect(std::string_view value);

}  // namespace outboxd::outbox

#endif  // OUTBOXD_OUTBOX_TRACE_CONTEXT_H_
