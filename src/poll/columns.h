// The columns only the polling relay uses, beside outbox::ColumnMapping's five. Their
// names default to the default schema (src/ops/setup.cc); the library lets a caller rename them.
#ifndef OUTBOXD_POLL_COLUMNS_H_
#define OUTBOXD_POLL_COLUMNS_H_

#include <string>

namespace outboxd::poll {

struct PollColumns {
  std::string seq = "seq";  // bigint, increasing: the publishing order
  std::string published_at = "publicado_em";
  std::string attempts = "tentativas";
  std::string last_error = "ultimo_erro";
  std::string next_attempt_at = "proxima_tentativa_em";
};

}  // namespace outboxd::poll

#endif  // OUTBOXD_POLL_COLUMNS_H_
