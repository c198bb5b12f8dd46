// `outboxd dead-letter replay`: republishes dead letters in their order and removes
// each once the broker acknowledged it. One event per aggregate per round, so an
// aggregate's order holds even when one of its events fails again (that aggregate
// stops; the others go on). Each letter passes the relay's checks again (payload,
// --key-pointer field, topic): one that still fails stays, with its error. The role
// must be able to delete the letters (checked before anything is published).
//
//   OUTBOXD_ASSIGN_OR_RETURN(ReplayReport report,
//                            ReplayDeadLetters(conn, store, {.make_sink = factory}));
#ifndef OUTBOXD_OPS_DEAD_LETTER_REPLAY_H_
#define OUTBOXD_OPS_DEAD_LETTER_REPLAY_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "outbox/dead_letter.h"
#include "outbox/message_format.h"
#include "pg/connection.h"
#include "sink/sink.h"

namespace outboxd::ops {

struct ReplayOptions {
  sink::SinkFactory make_sink;  // the broker (kafka::Publisher::Factory)
  std::optional<std::string> aggregate;  // only this aggregate's letters
  std::string topic_template;            // empty: the topic each letter was meant for
  std::string table_name = "outbox";     // for {table}
  outbox::MessageFormat format;          // as the relay's --format, --header, --key-pointer
  absl::Duration ack_timeout = absl::Seconds(30);
};

struct ReplayReport {
  int replayed = 0;
  // How many went to each topic: the summary a person reads (one info line per topic),
  // where thousands of per-letter lines would bury the progress line.
  std::map<std::string, int> replayed_to;
  std::vector<std::string> failures;  // "aggregate: error", one per stopped aggregate
};

absl::StatusOr<ReplayReport> ReplayDeadLetters(pg::Connection& conn,
                                               const outbox::DeadLetterStore& store,
                                               const ReplayOptions& options);

}  // namespace outboxd::ops

#endif  // OUTBOXD_OPS_DEAD_LETTER_REPLAY_H_
