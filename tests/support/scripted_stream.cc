#include "support/scripted_stream.h"

#include <utility>

namespace outboxd::test {
namespace {

constexpr int64_t kPgEpochUnixUs = 946684800LL * 1000000;  // 2000-01-01

void PutU8(std::string& out, uint8_t v) { out.push_back(static_cast<char>(v)); }
void PutU16(std::string& out, uint16_t v) {
  for (int shift = 8; shift >= 0; shift -= 8) PutU8(out, static_cast<uint8_t>(v >> shift));
}
void PutU32(std::string& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) PutU8(out, static_cast<uint8_t>(v >> shift));
}
void PutU64(std::string& out, uint64_t v) {
  for (int shift = 56; shift >= 0; shift -= 8) PutU8(out, static_cast<uint8_t>(v >> shift));
}
void PutCString(std::string& out, std::string_view s) {
  out.append(s);
  out.push_back('\0');
}

}  // namespace

namespace pgoutput_bytes {

// Layout: https://www.postgresql.org/docs/current/protocol-logicalrep-message-formats.html
std::string Begin(pg::Lsn final_lsn, int64_t commit_time_pg_us, uint32_t xid) {
  std::string out = "B";
  PutU64(out, final_lsn);
  PutU64(out, static_cast<uint64_t>(commit_time_pg_us));
  PutU32(out, xid);
  return out;
}

std::string Commit(pg::Lsn commit_lsn, pg::Lsn end_lsn, int64_t commit_time_pg_us) {
  std::string out = "C";
  PutU8(out, 0);  // flags
  PutU64(out, commit_lsn);
  PutU64(out, end_lsn);
  PutU64(out, static_cast<uint64_t>(commit_time_pg_us));
  return out;
}

std::string OutboxRelation(uint32_t relation_id) {
  struct Column {
    const char* name;
    uint32_t type_oid;
  };
  // uuid, text, text, jsonb, timestamptz: the default table (src/ops/setup.cc).
  const Column columns[] = {
      {"id", 2950}, {"aggregate_id", 25}, {"tipo", 25}, {"payload", 3802}, {"criado_em", 1184}};
  std::string out = "R";
  PutU32(out, relation_id);
  PutCString(out, "public");
  PutCString(out, "outbox");
  PutU8(out, 'd');  // replica identity default
  PutU16(out, static_cast<uint16_t>(std::size(columns)));
  for (const Column& c : columns) {
    PutU8(out, c.type_oid == 2950 ? 1 : 0);  // the key
    PutCString(out, c.name);
    PutU32(out, c.type_oid);
    PutU32(out, 0xffffffff);  // type modifier -1
  }
  return out;
}

std::string Insert(uint32_t relation_id, const std::vector<std::string>& text_values) {
  std::string out = "I";
  PutU32(out, relation_id);
  PutU8(out, 'N');
  PutU16(out, static_cast<uint16_t>(text_values.size()));
  for (const std::string& v : text_values) {
    if (v == kNullValue) {
      PutU8(out, 'n');
      continue;
    }
    PutU8(out, 't');
    PutU32(out, static_cast<uint32_t>(v.size()));
    out.append(v);
  }
  return out;
}

std::string LogicalMessage(pg::Lsn lsn, bool transactional, const std::string& prefix,
                           const std::string& content) {
  std::string out = "M";
  PutU8(out, transactional ? 1 : 0);
  PutU64(out, lsn);
  out.append(prefix);
  out.push_back('\0');
  PutU32(out, static_cast<uint32_t>(content.size()));
  out.append(content);
  return out;
}

}  // namespace pgoutput_bytes

ScriptedStream::ScriptedStream(std::function<absl::Time()> clock) : clock_(std::move(clock)) {}

ScriptedStream::~ScriptedStream() = default;

void ScriptedStream::PushData(pg::Lsn wal_start, std::string pgoutput_message) {
  queue_.push_back({.kind = Kind::kData, .lsn = wal_start, .data = std::move(pgoutput_message)});
  wake_.Signal();
}

void ScriptedStream::PushKeepalive(pg::Lsn wal_end, bool reply_requested) {
  queue_.push_back({.kind = Kind::kKeepalive, .lsn = wal_end, .reply_requested = reply_requested});
  wake_.Signal();
}

void ScriptedStream::PushEnd() {
  queue_.push_back({.kind = Kind::kEnd});
  wake_.Signal();
}

absl::StatusOr<pg::StreamMessage> ScriptedStream::Next() {
  if (queue_.empty()) return pg::NoMessage{};
  Queued next = std::move(queue_.front());
  queue_.pop_front();
  wake_.TakeOne();
  switch (next.kind) {
    case Kind::kData:
      current_ = std::move(next.data);
      return pg::XLogData{.wal_start = next.lsn, .wal_end = next.lsn, .data = current_};
    case Kind::kKeepalive:
      return pg::Keepalive{.wal_end = next.lsn, .reply_requested = next.reply_requested};
    case Kind::kEnd:
      return pg::StreamEnd{};
  }
  return pg::NoMessage{};
}

absl::Status ScriptedStream::SendFeedback(pg::Lsn received, pg::Lsn confirmed, relay::Reply reply) {
  feedback_.push_back({.received = received,
                       .confirmed = confirmed,
                       .reply_requested = reply == relay::Reply::kRequested,
                       .at = clock_()});
  return absl::OkStatus();
}

absl::Status ScriptedStream::End() {
  ended_ = true;
  feedback_before_end_ = feedback_.size();
  return absl::OkStatus();
}

pg::Lsn OutboxWal::Commit(std::vector<OutboxRow> rows, absl::Time commit_time) {
  Tx tx;
  tx.commit_time_pg_us = absl::ToUnixMicros(commit_time) - kPgEpochUnixUs;
  tx.begin_lsn = next_lsn_;
  tx.commit_lsn = tx.begin_lsn + 0x100 * (rows.size() + 1);
  tx.end_lsn = tx.commit_lsn + 0x30;
  tx.rows = std::move(rows);
  next_lsn_ = tx.end_lsn + 0x100;
  txs_.push_back(std::move(tx));
  return txs_.back().end_lsn;
}

void OutboxWal::Attach(ScriptedStream* stream, pg::Lsn start) {
  stream_ = stream;
  relation_sent_ = false;
  next_to_send_ = 0;
  while (next_to_send_ < txs_.size() && txs_[next_to_send_].end_lsn <= start) ++next_to_send_;
}

void OutboxWal::Send() {
  for (; next_to_send_ < txs_.size(); ++next_to_send_) {
    const Tx& tx = txs_[next_to_send_];
    const uint32_t xid = static_cast<uint32_t>(700 + next_to_send_);
    stream_->PushData(tx.begin_lsn,
                      pgoutput_bytes::Begin(tx.commit_lsn, tx.commit_time_pg_us, xid));
    pg::Lsn lsn = tx.begin_lsn;
    for (const OutboxRow& row : tx.rows) {
      lsn += 0x100;
      if (!relation_sent_) {
        stream_->PushData(lsn, pgoutput_bytes::OutboxRelation(kRelationId));
        relation_sent_ = true;
      }
      stream_->PushData(
          lsn, pgoutput_bytes::Insert(kRelationId, {row.id, row.aggregate_id, row.type, row.payload,
                                                    "2026-12-03 12:00:00+00"}));
    }
    stream_->PushData(tx.commit_lsn,
                      pgoutput_bytes::Commit(tx.commit_lsn, tx.end_lsn, tx.commit_time_pg_us));
  }
}

}  // namespace outboxd::test
