// CatchUpPlan: how a session reads the backlog it starts behind, streamed by the
// walsender or read through SQL in bulk (relay/bulk_stream.h), and why. The whole
// rule in Choose(): bulk when the server's position is known, --bulk-catch-up is on
// and the backlog is at least that large, no bulk catch-up failed before in a way a
// retry will not fix, and the role may read the slot through SQL; each fallback says
// why, in the words the relay logs. The bulk stream marks an error a retry will not fix
// (GiveUpBulk); the relay hands each failed session's status to SessionEnded, and
// every later session streams.
//
//   CatchUpPlan plan(options.bulk_catch_up_threshold);
//   OUTBOXD_ASSIGN_OR_RETURN(CatchUpPlan::Decision d,
//                            plan.Choose(start, server, [&] { return session.BulkRefusal(); }));
//   if (d.warn) spdlog::warn("{}", d.reason);
//   ... d.mode == CatchUpPlan::Mode::kBulk ? session.StartBulkStream(...) :
//   session.StartStream(...)
//   ... the session fails with `status`: status = plan.SessionEnded(std::move(status));
#ifndef OUTBOXD_RELAY_CATCH_UP_PLAN_H_
#define OUTBOXD_RELAY_CATCH_UP_PLAN_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pg/lsn.h"

namespace outboxd::relay {

// `error`, marked as a bulk catch-up failure a retry will not fix (a privilege revoked
// meanwhile, the server's temp_file_limit): the relay streams from then on.
absl::Status GiveUpBulk(absl::Status error);
bool GivesUpBulk(const absl::Status& status);

class CatchUpPlan {
 public:
  enum class Mode { kStream, kBulk };
  struct Decision {
    Mode mode = Mode::kStream;
    std::string reason;  // why, in a sentence
    bool warn = false;   // a fallback the operator should hear of
  };
  // Why the session's role may not read the slot through SQL ("" when it may); asked
  // only when the backlog would be read in bulk (it costs a query).
  using Refusal = std::function<absl::StatusOr<std::string>()>;

  // `threshold`: --bulk-catch-up in bytes of WAL (0: never in bulk).
  explicit CatchUpPlan(uint64_t threshold) : threshold_(threshold) {}

  // For a session that resumes at `start` with the server's WAL at `server` (an
  // error: unknown, then streamed).
  [[nodiscard]] absl::StatusOr<Decision> Choose(pg::Lsn start,
                                                const absl::StatusOr<pg::Lsn>& server,
                                                const Refusal& refusal) const;
  // A session failed with `status`: a GiveUpBulk error makes every later session
  // stream. Returns `status` without the mark.
  [[nodiscard]] absl::Status SessionEnded(absl::Status status);

  bool gave_up() const { return gave_up_; }

 private:
  uint64_t threshold_;
  bool gave_up_ = false;
};

}  // namespace outboxd::relay

#endif  // OUTBOXD_RELAY_CATCH_UP_PLAN_H_
