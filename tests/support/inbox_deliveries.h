// The inbox consumer's tests, whichever the broker (Kafka, RabbitMQ or NATS): polling until
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
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/status_macros.h"
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

// WriteEffect that fails its first call after writing ("invoicing API down"), so the
// inbox must roll the effect back with the mark; every later call succeeds.
inline inbox::Handler WriteEffectFailingOnce() {
  return [calls = 0](pg::Connection& conn, const inbox::Message& m) mutable -> absl::Status {
    OUTBOXD_RETURN_IF_ERROR(WriteEffect(conn, m));
    if (++calls == 1) return absl::UnavailableError("invoicing API down");
    return absl::OkStatus();
  };
}

// The four deliveries of three messages (`ids`, in publishing order) handled by
// WriteEffectFailingOnce: the first failed, then processed on its second attempt
// before the two behind it, one effect and one mark each.
inline void ExpectFirstRetriedBeforeTheRest(const std::vector<inbox::Delivery>& got,
                                            const std::vector<std::string>& ids, TestDatabase& db) {
  using Result = inbox::Delivery::Result;
  ASSERT_EQ(got.size(), 4u);
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(got[0].result, Result::kFailed);
  EXPECT_EQ(got[0].error.message(), "handler failed: invoicing API down");
  EXPECT_EQ(got[0].message.id, ids[0]);
  EXPECT_EQ(got[1].result, Result::kProcessed);
  EXPECT_EQ(got[1].message.id, ids[0]);
  EXPECT_EQ(got[1].attempt, 2);
  EXPECT_EQ(got[2].message.id, ids[1]);
  EXPECT_EQ(got[3].message.id, ids[2]);
  EXPECT_EQ(Effects(db), 3);
  EXPECT_EQ(Marks(db), 3);
}

// How many of `got` were processed and how many skipped as duplicates, each checked
// on the way: acked (offset_commit), from `topic`, keyed pedido-<id's number % 3>.
struct ResultCounts {
  int processed = 0;
  int duplicates = 0;
};
inline ResultCounts CountResults(const std::vector<inbox::Delivery>& got,
                                 const std::string& topic) {
  ResultCounts counts;
  for (const inbox::Delivery& d : got) {
    EXPECT_TRUE(d.offset_commit.ok()) << d.offset_commit;
    EXPECT_EQ(d.message.topic, topic);
    EXPECT_EQ(d.message.key, absl::StrCat("pedido-", std::stoi(d.message.id.substr(0, 8)) % 3));
    counts.processed += d.result == inbox::Delivery::Result::kProcessed;
    counts.duplicates += d.result == inbox::Delivery::Result::kDuplicate;
  }
  return counts;
}

}  // namespace outboxd::test

#endif  // OUTBOXD_TESTS_SUPPORT_INBOX_DELIVERIES_H_
