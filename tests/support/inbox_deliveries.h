// The inbox consumer's tests, whichever the broker (Kafka or RabbitMQ): polling until
// it has handled `n` messages, whatever each result (processed, duplicate, failed),
// and the handler they give it, with its counts.
//
//   std::vector<inbox::Delivery> got = PollDeliveries(*consumer, 3);
//   EXPECT_EQ(got[0].result, inbox::Delivery::Result::kProcessed);
#ifndef OUTBOXD_TESTS_SUPPORT_INBOX_DELIVERIES_H_
#define OUTBOXD_TESTS_SUPPORT_INBOX_DELIVERIES_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "inbox/consumer.h"
#include "support/pg_fixture.h"
#include "support/wait_until.h"

namespace outboxd::test {

// The deliveries until `n` of them, an error or `timeout`. An error (a message without
// a usable id) ends the polling: stored in `error` when given, a test failure if not.
inline std::vector<inbox::Delivery> PollDeliveries(inbox::Consumer& consumer, size_t n,
                                                   absl::Status* error = nullptr,
                                                   absl::Duration timeout = absl::Seconds(60)) {
  std::vector<inbox::Delivery> got;
  absl::Status failed;
  WaitUntil(
      timeout, [&] { return !failed.ok() || got.size() >= n; },
      [&] {
        absl::StatusOr<std::optional<inbox::Delivery>> d =
            consumer.PollOnce(absl::Milliseconds(100));
        if (!d.ok()) {
          failed = d.status();
        } else if (*d) {
          got.push_back(std::move(**d));
        }
      });
  if (error != nullptr) {
    *error = failed;
  } else {
    EXPECT_TRUE(failed.ok()) << failed;
  }
  return got;
}

// The tests' handler: one row in `efeitos (message_id uuid, pedido text)` per message,
// its pedidoId taken from the JSON value.
inline absl::Status WriteEffect(pg::Connection& conn, const inbox::Message& m) {
  return conn.ExecParams("INSERT INTO efeitos VALUES ($1, $2::jsonb->>'pedidoId')", {m.id, m.value})
      .status();
}

// Rows in efeitos (what the handler did) and in inbox (the messages marked handled).
inline int64_t Effects(TestDatabase& db) {
  return std::stoll(db.Scalar("SELECT count(*) FROM efeitos"));
}
inline int64_t Marks(TestDatabase& db) {
  return std::stoll(db.Scalar("SELECT count(*) FROM inbox"));
}

}  // namespace outboxd::test

#endif  // OUTBOXD_TESTS_SUPPORT_INBOX_DELIVERIES_H_
