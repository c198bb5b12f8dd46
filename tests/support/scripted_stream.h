// A scripted replication stream for in-process tests of the CDC relay's rules.
//
// ScriptedStream is a relay::ChangeStream: the test queues what the server sends
// (XLogData, keepalives, the end of the stream) and reads back the feedback the relay
// sent, with the time it was sent by the test's clock. OutboxWal plays the slot: it
// holds committed outbox transactions as pgoutput bytes (Begin, Relation, Insert,
// Commit, as PostgreSQL 15 lays them out) and sends a stream the transactions that
// end after the position it started from, as a walsender does.
//
//   test::OutboxWal wal;
//   pg::Lsn end = wal.Commit({{.id = "e1", .aggregate_id = "A"}});
//   auto stream = std::make_unique<test::ScriptedStream>(clock);
//   wal.Attach(stream.get(), /*start=*/0);
//   wal.Send();                             // Begin, Relation, Insert, Commit queued
//   stream->PushKeepalive(end, /*reply_requested=*/true);
//   ... run the relay's pipeline ...
//   EXPECT_EQ(stream->last_confirmed(), end);
#ifndef OUTBOXD_TESTS_SUPPORT_SCRIPTED_STREAM_H_
#define OUTBOXD_TESTS_SUPPORT_SCRIPTED_STREAM_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "pg/copy_data.h"
#include "pg/lsn.h"
#include "relay/change_stream.h"
#include "support/wake_pipe.h"

namespace outboxd::test {

class ScriptedStream final : public relay::ChangeStream {
 public:
  struct SentFeedback {
    pg::Lsn received = 0;
    pg::Lsn confirmed = 0;
    bool reply_requested = false;
    absl::Time at;  // by the clock given to the constructor
  };

  explicit ScriptedStream(std::function<absl::Time()> clock = absl::Now);
  ~ScriptedStream() override;

  // What the server sends next, in order.
  void PushData(pg::Lsn wal_start, std::string pgoutput_message);
  void PushKeepalive(pg::Lsn wal_end, bool reply_requested);
  void PushEnd();

  // Messages queued and not read yet.
  size_t unread() const { return queue_.size(); }
  const std::vector<SentFeedback>& feedback() const { return feedback_; }
  // The last confirmed position sent, or 0.
  pg::Lsn last_confirmed() const { return feedback_.empty() ? 0 : feedback_.back().confirmed; }
  bool ended() const { return ended_; }
  // How many feedback messages had been sent when End() was called.
  size_t feedback_before_end() const { return feedback_before_end_; }

  absl::StatusOr<pg::StreamMessage> Next() override;
  absl::Status SendFeedback(pg::Lsn received, pg::Lsn confirmed, relay::Reply reply) override;
  bool wants_write() const override { return false; }
  bool batched() const override { return batched_; }
  void set_batched(bool batched) { batched_ = batched; }
  absl::Status Flush() override { return absl::OkStatus(); }
  absl::Status End() override;
  int socket() const override { return wake_.fd(); }

 private:
  enum class Kind { kData, kKeepalive, kEnd };
  struct Queued {
    Kind kind;
    pg::Lsn lsn = 0;
    std::string data;
    bool reply_requested = false;
  };

  std::function<absl::Time()> clock_;
  std::deque<Queued> queue_;
  std::string current_;  // the data of the last XLogData returned, kept valid
  std::vector<SentFeedback> feedback_;
  bool ended_ = false;
  bool batched_ = false;
  size_t feedback_before_end_ = 0;
  WakePipe wake_;  // readable while messages are queued
};

// One outbox row as the test writes it; the other columns get plausible values.
// A field of an OutboxRow sent as NULL (an adopted table may allow one).
inline const std::string kNullValue("\0NULL", 5);

struct OutboxRow {
  std::string id;
  std::string aggregate_id;
  std::string type = "pedido.confirmado";
  std::string payload = "{\"n\": 1}";
};

class OutboxWal {
 public:
  // The outbox table's relation (public.outbox with the default columns).
  static constexpr uint32_t kRelationId = 16385;

  // When transactions commit unless a test says otherwise: the relay tests' start time.
  static constexpr absl::Time kCommitTime() {
    return absl::FromUnixSeconds(1796299200);
  }  // 2026-12-03 12:00 UTC
  // Appends a committed transaction; returns its end LSN (what a relay confirms).
  pg::Lsn Commit(std::vector<OutboxRow> rows, absl::Time commit_time = kCommitTime());
  // From now on Send() queues on `stream` the transactions that end after `start`,
  // with the outbox Relation before the first Insert, as a walsender started at
  // `start` does.
  void Attach(ScriptedStream* stream, pg::Lsn start);
  // Queues on the attached stream the transactions committed and not sent yet.
  void Send();

 private:
  struct Tx {
    pg::Lsn begin_lsn = 0;
    pg::Lsn commit_lsn = 0;
    pg::Lsn end_lsn = 0;
    int64_t commit_time_pg_us = 0;
    std::vector<OutboxRow> rows;
  };

  std::vector<Tx> txs_;
  pg::Lsn next_lsn_ = 0x1000000;
  ScriptedStream* stream_ = nullptr;
  size_t next_to_send_ = 0;
  bool relation_sent_ = false;
};

// pgoutput message bytes (protocol 1), for tests that script other shapes.
namespace pgoutput_bytes {
std::string Begin(pg::Lsn final_lsn, int64_t commit_time_pg_us, uint32_t xid);
std::string Commit(pg::Lsn commit_lsn, pg::Lsn end_lsn, int64_t commit_time_pg_us);
// public.outbox with the columns id, aggregate_id, tipo, payload, criado_em.
std::string OutboxRelation(uint32_t relation_id);
std::string Insert(uint32_t relation_id, const std::vector<std::string>& text_values);
// pg_logical_emit_message(transactional, prefix, content) as sent with messages 'true'.
std::string LogicalMessage(pg::Lsn lsn, bool transactional, const std::string& prefix,
                           const std::string& content);
}  // namespace pgoutput_bytes

}  // namespace outboxd::test

#endif  // OUTBOXD_TESTS_SUPPORT_SCRIPTED_STREAM_H_
