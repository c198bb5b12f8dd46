// The relay loop. Reading order matters: pgoutput (protocol 1, no streaming) sends
// only committed transactions, Begin .. rows .. Commit, so rows are produced as they
// are decoded and the AckTracker closes the transaction at its Commit.
#include "relay/relay.h"

#include <sys/select.h>

#include <algorithm>
#include <array>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "pg/lsn.h"
#include "pg/slot.h"
#include "relay/backoff.h"

namespace outboxd::relay {
namespace {

// Microseconds between the Unix epoch and PostgreSQL's epoch (2000-01-01).
constexpr int64_t kPgEpochOffsetUs = 946684800LL * 1000000;
// Messages read per loop turn before delivery reports and feedback get served.
constexpr int kReadBatch = 2000;
// Confirmations are batched: at most one feedback message per this interval unless
// the server asks for a reply.
constexpr absl::Duration kFeedbackCoalesce = absl::Milliseconds(10);
// How often the set of aggregates with dead letters is re-read while it is not empty.
constexpr absl::Duration kDeadLetterRefresh = absl::Seconds(2);

}  // namespace

Relay::Relay(RelayOptions options, RelayStats* stats, StopSignal* stop)
    : options_(std::move(options)),
      stats_(stats),
      stop_(stop),
      dead_letters_(options_.table),
      mapper_(options_.columns) {
  size_t dot = options_.table.find('.');
  if (dot == std::string::npos) {
    table_name_ = options_.table;
  } else {
    table_schema_ = options_.table.substr(0, dot);
    table_name_ = options_.table.substr(dot + 1);
  }
}

Relay::~Relay() = default;

absl::Status Relay::Run() {
  OUTBOXD_ASSIGN_OR_RETURN(topic_, TopicTemplate::Parse(options_.topic_template));
  OUTBOXD_RETURN_IF_ERROR(CreatePublisher());
  Backoff backoff(options_.reconnect_base, options_.reconnect_cap);
  // Streamed, or found the slot held by another relay: either way the configuration
  // and the environment work, and a later failure (PostgreSQL restarting) is retried.
  bool reached_slot = false;
  bool standing_by = false;
  while (!stop_->requested()) {
    absl::Status status = Connect();
    if (status.ok()) {
      reached_slot = true;
      standing_by = false;
      backoff.Reset();
      status = Loop();
      if (status.ok()) return Shutdown();
    }
    EndSession();
    if (pg::SqlStateOf(status) == "55006") {
      // Another relay holds the slot: stand by and take over when it goes away.
      if (!standing_by) spdlog::info("standing by: {}", status);
      standing_by = true;
      reached_slot = true;
      WaitFor(options_.standby_poll);
      continue;
    }
    // Before the slot was reached, any error is the configuration's or the
    // environment's (exit 2); later, only those that retrying cannot fix end the relay.
    if (!reached_slot || IsConfigurationError(status)) return status;
    if (status.code() == absl::StatusCode::kAborted) {
      spdlog::warn("{}; recreating the producer, resuming from {}", status,
                   pg::FormatLsn(tracker_.watermark()));
      publisher_.reset();
      OUTBOXD_RETURN_IF_ERROR(CreatePublisher());
      continue;
    }
    absl::Duration wait = backoff.Next();
    stats_->reconnects++;
    spdlog::warn("replication stream lost: {}; reconnecting in {} (attempt {})", status,
                 absl::FormatDuration(absl::Trunc(wait, absl::Milliseconds(1))),
                 backoff.attempts());
    WaitFor(wait);
  }
  return absl::OkStatus();
}

absl::Status Relay::CreatePublisher() {
  OUTBOXD_ASSIGN_OR_RETURN(
      publisher_, kafka::Publisher::Create(
                      options_.kafka, [this](const kafka::DeliveryReport& r) { OnDelivery(r); }));
  return absl::OkStatus();
}

absl::Status Relay::CheckWalStatus(const pg::SlotInfo& slot) {
  if (slot.wal_status == "lost") {
    // Streaming on would skip whatever the removed WAL held: stop, loudly.
    return absl::FailedPreconditionError(absl::StrCat(
        "replication slot ", options_.slot,
        " has lost WAL it needed (max_slot_wal_keep_size "
        "exceeded); events committed after ",
        pg::FormatLsn(slot.confirmed_flush_lsn),
        " may be missing from it: drop it (SELECT pg_drop_replication_slot('", options_.slot,
        "')), run outboxd setup, and republish the outbox rows created since the last "
        "acknowledged event"));
  }
  if (slot.wal_status == "unreserved") {
    spdlog::warn(
        "replication slot {} is about to lose WAL (wal_status unreserved, lag {} "
        "bytes): the relay must catch up before the next checkpoint",
        options_.slot, slot.lag_bytes);
  }
  return absl::OkStatus();
}

void Relay::EndSession() {
  stats_->streaming = false;
  stream_.reset();
  pending_error_ = absl::OkStatus();
  // Reports for events already produced still count: wait a little for them so the
  // next session resumes after them instead of sending them again.
  absl::Time deadline = absl::Now() + absl::Seconds(2);
  while (tracker_.events_in_flight() > 0 && !tracker_.has_failed() && absl::Now() < deadline &&
         !stop_->requested()) {
    publisher_->Poll(50);
  }
  tracker_.Reset(tracker_.watermark());
  control_.reset();
  outbox_relation_id_ = 0;
  PublishStats();
}

void Relay::WaitFor(absl::Duration duration) {
  absl::Time until = absl::Now() + duration;
  while (!stop_->requested() && absl::Now() < until) {
    fd_set readable;
    FD_ZERO(&readable);
    FD_SET(stop_->fd(), &readable);
    FD_SET(publisher_->wake_fd(), &readable);
    timeval tv = absl::ToTimeval(std::min(until - absl::Now(), absl::Milliseconds(200)));
    select(std::max(stop_->fd(), publisher_->wake_fd()) + 1, &readable, nullptr, nullptr, &tv);
    publisher_->Poll(0);
  }
}

absl::Status Relay::Connect() {
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::Connection conn,
      pg::Connection::Open(options_.conninfo, pg::ConnectionKind::kReplication));
  OUTBOXD_ASSIGN_OR_RETURN(pg::Connection control, pg::Connection::Open(options_.conninfo));
  control_.emplace(std::move(control));
  OUTBOXD_RETURN_IF_ERROR(RefreshDeadAggregates());
  OUTBOXD_ASSIGN_OR_RETURN(pg::SlotInfo slot, pg::QuerySlot(conn, options_.slot));
  if (!slot.exists) {
    return absl::NotFoundError(
        absl::StrCat("replication slot \"", options_.slot, "\" does not exist; run outboxd setup"));
  }
  OUTBOXD_RETURN_IF_ERROR(CheckWalStatus(slot));
  // Resume after whatever this process already had acknowledged: the slot may be
  // behind it (feedback lost with the connection, or a server crash rolled
  // confirmed_flush_lsn back to the last checkpoint). The watermark never goes back,
  // and feedback never reports less than the slot holds (PostgreSQL 15 would store a
  // smaller value as given).
  tracker_.Reset(slot.confirmed_flush_lsn);
  pg::Lsn start = tracker_.watermark();
  last_sent_flush_ = start;
  received_ = std::max(received_, start);
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::ReplicationStream stream,
      pg::ReplicationStream::Start(
          std::move(conn),
          {.slot = options_.slot, .publication = options_.publication, .start_lsn = start}));
  stream_ = std::make_unique<pg::ReplicationStream>(std::move(stream));
  last_feedback_ = absl::InfinitePast();
  stats_->streaming = true;
  PublishStats();
  spdlog::info("streaming slot {} publication {} from {}", options_.slot, options_.publication,
               pg::FormatLsn(start));
  return absl::OkStatus();
}

absl::Status Relay::Loop() {
  while (!stop_->requested()) {
    bool read_any = false;
    bool reply_requested = false;
    OUTBOXD_RETURN_IF_ERROR(ReadBatch(read_any, reply_requested));
    publisher_->Poll(0);
    OUTBOXD_RETURN_IF_ERROR(ProducerHealth());
    OUTBOXD_RETURN_IF_ERROR(std::exchange(pending_error_, absl::OkStatus()));
    // A replay empties an aggregate's dead letters: let its new events flow again.
    if (!dead_aggregates_.empty() && absl::Now() - dead_refreshed_ > kDeadLetterRefresh) {
      OUTBOXD_RETURN_IF_ERROR(RefreshDeadAggregates());
    }
    OUTBOXD_RETURN_IF_ERROR(MaybeSendFeedback(reply_requested));
    if (stream_->wants_write()) OUTBOXD_RETURN_IF_ERROR(stream_->Flush());
    PublishStats();
    if (!read_any) {
      // Flow control: above the in-flight limit, stop reading the stream but keep
      // serving delivery reports and sending feedback (the walsender must hear from
      // us within wal_sender_timeout whatever the broker does).
      bool want_stream = tracker_.events_in_flight() < options_.max_in_flight;
      absl::Duration timeout = options_.feedback_interval - (absl::Now() - last_feedback_);
      if (tracker_.watermark() != last_sent_flush_) timeout = kFeedbackCoalesce;
      Wait(want_stream, std::clamp(timeout, absl::ZeroDuration(), absl::Seconds(1)));
    }
  }
  return absl::OkStatus();
}

absl::Status Relay::ReadBatch(bool& read_any, bool& reply_requested) {
  for (int i = 0; i < kReadBatch; ++i) {
    if (tracker_.events_in_flight() >= options_.max_in_flight) return absl::OkStatus();
    OUTBOXD_ASSIGN_OR_RETURN(pg::StreamMessage message, stream_->Next());
    if (std::holds_alternative<pg::NoMessage>(message)) return absl::OkStatus();
    read_any = true;
    if (std::holds_alternative<pg::StreamEnd>(message)) {
      return absl::UnavailableError("PostgreSQL ended the replication stream");
    }
    if (auto* data = std::get_if<pg::XLogData>(&message)) {
      received_ = std::max(received_, data->wal_start);
      OUTBOXD_RETURN_IF_ERROR(HandleData(data->data));
    } else if (auto* keepalive = std::get_if<pg::Keepalive>(&message)) {
      received_ = std::max(received_, keepalive->wal_end);
      // Nothing in flight: everything up to the server's position was either
      // published and acknowledged or not ours (other tables). Confirming it keeps
      // an idle outbox from pinning WAL (DESIGN.md trap "idle slot pins WAL").
      tracker_.ConfirmIdlePosition(keepalive->wal_end);
      reply_requested |= keepalive->reply_requested;
    }
  }
  return absl::OkStatus();
}

absl::Status Relay::HandleData(std::string_view data) {
  OUTBOXD_RETURN_IF_ERROR(pgoutput::DecodeInto(data, message_));
  if (auto* insert = std::get_if<pgoutput::Insert>(&message_)) return HandleInsert(*insert);
  if (auto* begin = std::get_if<pgoutput::Begin>(&message_)) {
    tx_ = tracker_.Begin(begin->final_lsn, begin->commit_time + kPgEpochOffsetUs);
    tx_lsn_text_ = pg::FormatLsn(begin->final_lsn);
  } else if (auto* commit = std::get_if<pgoutput::Commit>(&message_)) {
    tracker_.Commit(commit->end_lsn);
  } else if (auto* relation = std::get_if<pgoutput::Relation>(&message_)) {
    return HandleRelation(*relation);
  }
  // Update, Delete and Truncate are never published (the publication asks for
  // inserts only; if someone widens it, we still ignore them). Origin, Type and
  // Message carry nothing for us.
  return absl::OkStatus();
}

absl::Status Relay::HandleRelation(const pgoutput::Relation& relation) {
  if (IsOutboxTable(relation)) {
    // A new Relation for the outbox replaces the mapping (ALTER TABLE mid-stream).
    OUTBOXD_RETURN_IF_ERROR(mapper_.SetRelation(relation));
    outbox_relation_id_ = relation.id;
  }
  relations_.Put(relation);
  return absl::OkStatus();
}

bool Relay::IsOutboxTable(const pgoutput::Relation& relation) const {
  return relation.relname == table_name_ &&
         (table_schema_.empty() || relation.nspname == table_schema_);
}

absl::Status Relay::HandleInsert(const pgoutput::Insert& insert) {
  if (insert.relation_id != outbox_relation_id_ || outbox_relation_id_ == 0) {
    if (!warned_foreign_insert_) {
      const pgoutput::Relation* rel = relations_.Find(insert.relation_id);
      spdlog::warn("publication {} also covers table {}; its rows are not published",
                   options_.publication, rel ? rel->relname : absl::StrCat(insert.relation_id));
      warned_foreign_insert_ = true;
    }
    return absl::OkStatus();
  }
  absl::StatusOr<outbox::OutboxEvent> event = mapper_.Map(insert.tuple);
  if (!event.ok()) {
    // Only a row that contradicts its own Relation gets here (NULL in a mapped
    // column): stop with the reason rather than guess at an event.
    return absl::FailedPreconditionError(absl::StrCat(
        "outbox row in transaction ", tx_lsn_text_, " cannot be read: ", event.status().message()));
  }
  tracker_.AddEvent(tx_);
  std::string_view created_at = outbox::IsoTimestamp(event->created_at, created_at_buffer_);
  const std::array<kafka::Header, 5> headers = {{
      {"id", event->id},
      {"type", event->type},
      {"aggregate_id", event->aggregate_id},
      {"created_at", created_at},
      {"lsn", tx_lsn_text_},
  }};
  kafka::OutgoingMessage message{.topic = topic_.Render(event->type, table_name_, topic_buffer_),
                                 .key = event->aggregate_id,
                                 .value = event->payload,
                                 .headers = headers,
                                 .tag = tx_};
  absl::Status check = payload_checker_.Check(event->payload);
  if (!check.ok()) return DeadLetter(message, check);
  if (!dead_aggregates_.empty() && dead_aggregates_.contains(absl::string_view(
                                       event->aggregate_id.data(), event->aggregate_id.size()))) {
    return DeadLetter(message, absl::FailedPreconditionError(
                                   "follows an earlier dead-lettered event of its aggregate"));
  }
  return Produce(message);
}

absl::Status Relay::Produce(const kafka::OutgoingMessage& message) {
  while (true) {
    absl::Status status = publisher_->Produce(message);
    if (status.ok()) return status;
    if (status.code() == absl::StatusCode::kAborted) return ProducerHealth();
    if (status.code() != absl::StatusCode::kResourceExhausted) return DeadLetter(message, status);
    // librdkafka's queue is full: serve reports until there is room, and keep the
    // walsender informed meanwhile.
    publisher_->Poll(100);
    OUTBOXD_RETURN_IF_ERROR(ProducerHealth());
    OUTBOXD_RETURN_IF_ERROR(MaybeSendFeedback(false));
    if (stop_->requested()) {
      return absl::CancelledError("stopped while the producer queue was full");
    }
  }
}

absl::Status Relay::DeadLetter(const kafka::OutgoingMessage& message, const absl::Status& error) {
  outbox::DeadLetter letter{.topic = std::string(message.topic),
                            .error = std::string(error.message())};
  letter.aggregate_id = message.key;
  letter.payload = message.value;
  for (const kafka::Header& h : message.headers) {
    if (h.name == "id") letter.id = h.value;
    if (h.name == "type") letter.type = h.value;
    if (h.name == "created_at") letter.created_at = h.value;
    if (h.name == "lsn") letter.lsn = h.value;
  }
  if (!control_) return absl::UnavailableError("no connection for the dead-letter table");
  // Written before the event counts as handled: the watermark passes a poison event
  // only once it is safely in the table.
  OUTBOXD_RETURN_IF_ERROR(dead_letters_.Insert(*control_, letter));
  dead_aggregates_.insert(letter.aggregate_id);
  tracker_.Ack(message.tag);
  stats_->events_dead_lettered++;
  spdlog::error("event {} of aggregate {} dead-lettered to {}: {}", letter.id, letter.aggregate_id,
                dead_letters_.table(), letter.error);
  return absl::OkStatus();
}

absl::Status Relay::RefreshDeadAggregates() {
  if (!control_) return absl::OkStatus();
  OUTBOXD_ASSIGN_OR_RETURN(dead_aggregates_, dead_letters_.Aggregates(*control_));
  dead_refreshed_ = absl::Now();
  return absl::OkStatus();
}

absl::Status Relay::ProducerHealth() {
  absl::Status fatal = publisher_->FatalError();
  if (fatal.ok()) return fatal;
  // An idempotent producer that lost its sequence state cannot go on without risking
  // reordering: the session ends and a new producer resumes from the watermark.
  return absl::AbortedError(absl::StrCat("fatal producer error: ", fatal.message()));
}

void Relay::OnDelivery(const kafka::DeliveryReport& report) {
  if (report.status.ok()) {
    tracker_.Ack(report.tag);
    stats_->events_published++;
    return;
  }
  if (report.status.code() == absl::StatusCode::kAborted ||
      report.status.code() == absl::StatusCode::kCancelled) {
    return;  // a fatal producer error or a purge: the session restarts, nothing is lost
  }
  // With an unlimited message timeout only permanent errors arrive here (message too
  // large for the topic, unknown or forbidden topic). Events of the same aggregate
  // already in flight may still be delivered; from now on they follow it.
  stats_->events_failed++;
  kafka::OutgoingMessage message{.topic = report.topic,
                                 .key = report.key,
                                 .value = report.value,
                                 .headers = report.headers,
                                 .tag = report.tag};
  absl::Status stored = DeadLetter(message, report.status);
  if (!stored.ok()) {
    tracker_.MarkFailed(report.tag);  // holds the watermark; the session ends below
    if (pending_error_.ok()) pending_error_ = stored;
  }
}

absl::Status Relay::MaybeSendFeedback(bool force) {
  absl::Time now = absl::Now();
  pg::Lsn flush = tracker_.watermark();
  bool moved = flush != last_sent_flush_ && now - last_feedback_ >= kFeedbackCoalesce;
  bool due = now - last_feedback_ >= options_.feedback_interval;
  if (!force && !moved && !due) return absl::OkStatus();
  OUTBOXD_RETURN_IF_ERROR(stream_->SendFeedback(std::max(received_, flush), flush));
  last_sent_flush_ = flush;
  last_feedback_ = now;
  return absl::OkStatus();
}

void Relay::Wait(bool want_stream, absl::Duration timeout) {
  fd_set readable, writable;
  FD_ZERO(&readable);
  FD_ZERO(&writable);
  int max_fd = -1;
  auto watch = [&](int fd) {
    if (fd < 0) return;
    FD_SET(fd, &readable);
    max_fd = std::max(max_fd, fd);
  };
  if (want_stream) watch(stream_->socket());
  watch(publisher_->wake_fd());
  watch(stop_->fd());
  if (stream_->wants_write()) {  // feedback queued behind a full socket buffer
    FD_SET(stream_->socket(), &writable);
    max_fd = std::max(max_fd, stream_->socket());
  }
  timeval tv = absl::ToTimeval(timeout);
  select(max_fd + 1, &readable, &writable, nullptr, &tv);
}

absl::Status Relay::Shutdown() {
  spdlog::info("stopping: waiting for {} in-flight events", tracker_.events_in_flight());
  absl::Time deadline = absl::Now() + options_.shutdown_timeout;
  while (tracker_.events_in_flight() > 0 && !tracker_.has_failed() && absl::Now() < deadline) {
    publisher_->Poll(50);
    OUTBOXD_RETURN_IF_ERROR(MaybeSendFeedback(false));
  }
  OUTBOXD_RETURN_IF_ERROR(MaybeSendFeedback(true));
  PublishStats();
  spdlog::info("confirmed {}; {} events still unacknowledged will be sent again on restart",
               pg::FormatLsn(tracker_.watermark()), tracker_.events_in_flight());
  stats_->streaming = false;
  return stream_->End();
}

void Relay::PublishStats() {
  stats_->received_lsn = received_;
  stats_->confirmed_lsn = tracker_.watermark();
  stats_->events_in_flight = tracker_.events_in_flight();
  stats_->oldest_unacked_commit_us = tracker_.oldest_unacked_commit_time().value_or(0);
}

}  // namespace outboxd::relay
