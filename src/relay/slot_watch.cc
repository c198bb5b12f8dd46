// SlotWatch over libpq's asynchronous query API: PQsendQuery, then PQconsumeInput /
// PQisBusy on later turns, PQgetResult once the whole answer is there.
#include "relay/slot_watch.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "pg/slot.h"

namespace outboxd::relay {
namespace {

absl::Status LibpqError(pg::Connection& conn, absl::string_view what) {
  std::string message = PQerrorMessage(conn.get());
  while (!message.empty() && message.back() == '\n') message.pop_back();
  return absl::UnavailableError(
      absl::StrCat("checking the replication slot: ", what, ": ", message));
}

}  // namespace

void SlotWatch::Restart() {
  pending_ = false;
  settled_.reset();
  next_ = absl::Now() + interval_;
}

absl::StatusOr<std::optional<pg::SlotInfo>> SlotWatch::Poll(pg::Connection& conn) {
  if (settled_) return std::exchange(settled_, std::nullopt);
  if (!pending_) {
    if (absl::Now() >= next_) OUTBOXD_RETURN_IF_ERROR(Send(conn));
    return std::nullopt;
  }
  if (PQconsumeInput(conn.get()) == 0) return LibpqError(conn, "reading the answer");
  if (PQisBusy(conn.get())) return std::nullopt;
  OUTBOXD_ASSIGN_OR_RETURN(pg::SlotInfo slot, Collect(conn));
  return slot;
}

absl::Status SlotWatch::Settle(pg::Connection& conn) {
  if (!pending_) return absl::OkStatus();
  // PQgetResult blocks until the answer is complete: waited for only as long as the
  // connection's reply timeout (a half-open connection answers nothing).
  OUTBOXD_RETURN_IF_ERROR(conn.AwaitReply("the replication slot's check"));
  OUTBOXD_ASSIGN_OR_RETURN(settled_, Collect(conn));
  return absl::OkStatus();
}

absl::Status SlotWatch::Send(pg::Connection& conn) {
  OUTBOXD_ASSIGN_OR_RETURN(std::string slot, conn.QuoteLiteral(slot_));
  const std::string sql = pg::SlotQuery(slot);
  if (PQsendQuery(conn.get(), sql.c_str()) == 0) return LibpqError(conn, "sending the query");
  pending_ = true;
  return absl::OkStatus();
}

absl::StatusOr<pg::SlotInfo> SlotWatch::Collect(pg::Connection& conn) {
  pending_ = false;
  next_ = absl::Now() + interval_;
  // One statement, one result, then the nullptr that ends it: all must be read
  // before the connection takes another query.
  std::optional<pg::Result> answer;
  while (PGresult* raw = PQgetResult(conn.get())) {
    pg::Result result(raw);
    if (!answer) answer.emplace(std::move(result));
  }
  if (!answer) return LibpqError(conn, "no answer from the server");
  if (PQresultStatus(answer->get()) != PGRES_TUPLES_OK) {
    std::string message = PQresultErrorMessage(answer->get());
    while (!message.empty() && message.back() == '\n') message.pop_back();
    return absl::UnavailableError(absl::StrCat("checking the replication slot: ", message));
  }
  return pg::ParseSlotRow(*answer);
}

}  // namespace outboxd::relay
