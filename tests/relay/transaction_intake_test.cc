// TransactionIntake (relay/transaction_intake.h): pgoutput bytes in, events with their
// transaction out to the delivery side, in process: each outbox row is handed over
// with its transaction's commit LSN and time, a row of another table is not, a row
// with a NULL aggregate goes to the dead letters under a stand-in unique to the row,
// and events without a created-at column carry their commit time.
#include "relay/transaction_intake.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "outbox/dead_letter.h"
#include "support/scripted_stream.h"

namespace outboxd::relay {
namespace {

namespace bytes = test::pgoutput_bytes;

constexpr uint32_t kOutbox = 16385;
constexpr pg::Lsn kCommit = 0x16B3748;
constexpr pg::Lsn kEnd = 0x16B3778;
constexpr int64_t kCommitPgUs = 849700800000000;  // 2026-12-04 12:00:00 UTC

// Records what the intake hands over.
class RecordingTarget final : public IntakeTarget {
 public:
  struct Handed {
    std::string id, aggregate_id, created_at, lsn_text, error;
    AckTracker::TxId tx = 0;
  };
  AckTracker::TxId BeginTransaction(pg::Lsn commit_lsn, int64_t commit_us) override {
    begun.emplace_back(commit_lsn, commit_us);
    return 40 + begun.size();
  }
  void CommitTransaction(pg::Lsn end_lsn) override { committed.push_back(end_lsn); }
  absl::Status Publish(const outbox::OutboxEvent& event, Transaction& tx) override {
    published.push_back(Record(event, tx, absl::OkStatus()));
    return absl::OkStatus();
  }
  absl::Status DeadLetterRow(const outbox::OutboxEvent& event, const Transaction& tx,
                             const absl::Status& error) override {
    dead_letters.push_back(Record(event, tx, error));
    return absl::OkStatus();
  }

  std::vector<std::pair<pg::Lsn, int64_t>> begun;
  std::vector<pg::Lsn> committed;
  std::vector<Handed> published;
  std::vector<Handed> dead_letters;

 private:
  static Handed Record(const outbox::OutboxEvent& e, const Transaction& tx,
                       const absl::Status& error) {
    return {.id = std::string(e.id),
            .aggregate_id = std::string(e.aggregate_id),
            .created_at = std::string(e.created_at),
            .lsn_text = tx.lsn_text,
            .error = std::string(error.message()),
            .tx = tx.id};
  }
};

class RelayTransactionIntakeTest : public ::testing::Test {
 protected:
  void Make() {
    intake_ = std::make_unique<TransactionIntake>(
        options_, &stats_, [] { return absl::FromUnixSeconds(1796299200); }, &target_);
  }
  void Handle(const std::string& message, int64_t sent_us = 0) {
    absl::Status status = intake_->Handle(message, sent_us);
    ASSERT_TRUE(status.ok()) << status;
  }
  void Row(const std::vector<std::string>& values) {
    Handle(bytes::Begin(kCommit, kCommitPgUs, 700), /*sent_us=*/kCommitPgUs + kPgEpochOffsetUs);
    Handle(bytes::OutboxRelation(kOutbox));
    Handle(bytes::Insert(kOutbox, values));
    Handle(bytes::Commit(kCommit, kEnd, kCommitPgUs));
  }

  RelayOptions options_;
  RelayStats stats_;
  RecordingTarget target_;
  std::unique_ptr<TransactionIntake> intake_;
};

TEST_F(RelayTransactionIntakeTest, EachOutboxRowIsHandedOverWithItsTransaction) {
  Make();
  Row({"e1", "A", "t", "{}", "2026-12-04 00:00:00+00"});
  ASSERT_EQ(target_.begun.size(), 1u);
  EXPECT_EQ(target_.begun[0].first, kCommit);
  EXPECT_EQ(target_.begun[0].second, kCommitPgUs + kPgEpochOffsetUs) << "Unix microseconds";
  ASSERT_EQ(target_.published.size(), 1u);
  EXPECT_EQ(target_.published[0].id, "e1");
  EXPECT_EQ(target_.published[0].tx, 41u) << "the tracker's id";
  EXPECT_EQ(target_.published[0].lsn_text, "0/16B3748");
  EXPECT_EQ(target_.committed, std::vector<pg::Lsn>{kEnd});
  EXPECT_EQ(intake_->transaction().sent_us, kCommitPgUs + kPgEpochOffsetUs);
}

TEST_F(RelayTransactionIntakeTest, ARowOfAnotherTableIsNotHandedOver) {
  Make();
  Handle(bytes::Begin(kCommit, kCommitPgUs, 700));
  Handle(bytes::OutboxRelation(kOutbox));
  Handle(bytes::Insert(kOutbox + 1, {"e1", "A", "t", "{}", "2026-12-04 00:00:00+00"}));
  Handle(bytes::Commit(kCommit, kEnd, kCommitPgUs));
  EXPECT_TRUE(target_.published.empty());
  EXPECT_TRUE(target_.dead_letters.empty());
}

TEST_F(RelayTransactionIntakeTest, ARowWithANullAggregateIsADeadLetterUnderAStandIn) {
  Make();
  Row({"e1", test::kNullValue, "t", "{}", "2026-12-04 00:00:00+00"});
  EXPECT_TRUE(target_.published.empty());
  ASSERT_EQ(target_.dead_letters.size(), 1u);
  EXPECT_EQ(target_.dead_letters[0].id, "e1");
  EXPECT_EQ(target_.dead_letters[0].aggregate_id,
            std::string(outbox::kNullKeyPrefix) + "0/16B3748#1");
  EXPECT_NE(target_.dead_letters[0].error.find(outbox::kNullKeyError), std::string::npos)
      << target_.dead_letters[0].error;
}

TEST_F(RelayTransactionIntakeTest, WithoutACreatedAtColumnAnEventCarriesItsCommitTime) {
  options_.columns.created_at = "";
  Make();
  Row({"e1", "A", "t", "{}", "ignored"});
  ASSERT_EQ(target_.published.size(), 1u);
  EXPECT_EQ(target_.published[0].created_at, "2026-12-04 12:00:00+00");
}

}  // namespace
}  // namespace outboxd::relay
