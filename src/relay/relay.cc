// The relay loop. Reading order matters: pgoutput (protocol 1, no streaming) sends
// only committed transactions, Begin .. rows .. Commit, so rows are produced as they
// are decoded and the AckTracker closes the transaction at its Commit.
#include "relay/relay.h"

#include <sys/select.h>

#include <algorithm>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/log.h"
#include "base/log_escape.h"
#include "base/status_macros.h"
#include "pg/lsn.h"
#include "pg/slot.h"
#include "pg/table_name.h"
#include "relay/backfill.h"
#include "relay/backoff.h"
#include "relay/startup_retry.h"

namespace outboxd::relay {
namespace {

// Microseconds between the Unix epoch and PostgreSQL's epoch (2000-01-01).
constexpr int64_t kPgEpochOffsetUs = 946684800LL * 1000000;
// Messages read per loop turn before delivery reports and feedback get served.
constexpr int kReadBatch = 2000;
// A read of this many messages (three or more single-row transactions) means the
// stream is behind; the relay then sleeps kBacklogNap before reading again. Measured
// on a 60,000-transaction backlog: relay CPU 17 -> 4.5 us per event, drain time
// unchanged or shorter (the walsender, not the relay, sets the pace). Live traffic
// at 1,000 events/s reads one transaction at a time and never naps.
constexpr int kBacklogBatch = 8;
constexpr absl::Duration kBacklogNap = absl::Milliseconds(1);
// A smaller read is live traffic: one transaction, and nothing behind it to batch
// with. The relay then has librdkafka send at once instead of waiting out linger.ms
// (kept at 1 ms for backlogs, where batches pay), and serves the acknowledgements
// meanwhile, for at most this long. Measured at 1,000 events/s (outboxd-mock-broker):
// acknowledged within 1 ms of the commit 15 % -> 54 %, probe p50 2.5 -> 2.0 ms, at
// about 25 % more relay CPU per event; at 5,000 events/s p50 unchanged (3.3-3.5 ms).
constexpr absl::Duration kLiveFlush = absl::Milliseconds(1);
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
      position_(options_.table, options_.slot, options_.position_interval),
      state_(options_.table),
      mapper_(options_.columns),
      encoder_(options_.format),
      slot_watch_(options_.slot, options_.slot_check_interval),
      feedback_interval_(options_.feedback_interval) {
  // Preflight (relay/preflight.h) refused a name that does not parse before any relay
  // is built; kept whole, such a name would just match no Relation message.
  absl::StatusOr<pg::TableName> table = pg::TableName::Parse(options_.table);
  table_name_ = table.ok() ? table->name : options_.table;
  if (table.ok()) table_schema_ = table->schema;
}

Relay::~Relay() = default;

absl::Status Relay::Run() {
  OUTBOXD_ASSIGN_OR_RETURN(topic_, outbox::TopicTemplate::Parse(options_.topic_template));
  OUTBOXD_RETURN_IF_ERROR(CreateSink());
  Backoff backoff(options_.reconnect_base, options_.reconnect_cap);
  // Streamed, or found the slot held by another relay: either way the configuration
  // and the environment work, and a later failure (PostgreSQL restarting) is retried.
  bool reached_slot = false;
  bool standing_by = false;
  while (!stop_->requested()) {
    absl::Status status = Connect();
    // /readyz counts a standby as ready (observe/health.h).
    stats_->health.SetStandingBy(pg::SqlStateOf(status) == "55006");
    if (status.ok()) {
      reached_slot = true;
      standing_by = false;
      backoff.Reset();
      status = Loop();
      if (status.ok()) {
        status = Shutdown();
        CloseProducer();
        return status;
      }
    }
    EndSession();
    if (stop_->requested()) break;
    if (pg::SqlStateOf(status) == "55006") {
      // Another relay holds the slot: stand by and take over when it goes away.
      if (!standing_by) spdlog::info("standing by: {}", status);
      standing_by = true;
      reached_slot = true;
      WaitFor(options_.standby_poll);
      continue;
    }
    // Before the slot was reached, an error is the configuration's or the
    // environment's (exit 2), unless it is a server not up yet (see startup_retry.h);
    // later, only those that retrying cannot fix end the relay.
    if (IsConfigurationError(status) || (!reached_slot && !IsTransientDatabaseError(status))) {
      return status;
    }
    if (status.code() == absl::StatusCode::kAborted) {
      spdlog::warn("{}; recreating the producer, resuming from {}", status,
                   pg::FormatLsn(tracker_.watermark()));
      sink_.reset();
      OUTBOXD_RETURN_IF_ERROR(CreateSink());
      continue;
    }
    absl::Duration wait = backoff.Next();
    stats_->reconnects++;
    stats_->metrics.Reconnected();
    spdlog::warn("{}: {}; reconnecting in {} (attempt {})",
                 reached_slot ? "replication stream lost" : "PostgreSQL is not available yet",
                 status, absl::FormatDuration(absl::Trunc(wait, absl::Milliseconds(1))),
                 backoff.attempts());
    WaitFor(wait);
  }
  CloseProducer();
  return absl::OkStatus();
}

absl::Status Relay::CreateSink() {
  OUTBOXD_ASSIGN_OR_RETURN(
      sink_, options_.make_sink({.on_delivery = [this](const sink::DeliveryReport& r) {
        OnDelivery(r);
      }}));
  return absl::OkStatus();
}

absl::Status Relay::CheckWalStatus(const pg::SlotInfo& slot) {
  stats_->metrics.SetSlotWalStatus(slot.wal_status, slot.safe_wal_size);
  if (slot.wal_status == "lost") {
    // Streaming on would skip whatever the removed WAL held: stop, loudly.
    return absl::FailedPreconditionError(absl::StrCat(
        "replication slot ", options_.slot,
        " has lost WAL it needed (max_slot_wal_keep_size "
        "exceeded); events committed after ",
        pg::FormatLsn(slot.confirmed_flush_lsn),
        " may be missing from it: stop the relays on it and run outboxd setup "
        "--recreate-slot --slot ", options_.slot,
        ", then start outboxd run: it republishes the outbox rows after the last "
        "acknowledged position first"));
  }
  // safe_wal_size too: it runs out exactly when wal_status turns unreserved, and a
  // slot whose WAL is already removed still reads `unreserved` while its walsender
  // lives (PostgreSQL 15), with a negative safe_wal_size.
  const bool unreserved = slot.wal_status == "unreserved" ||
                          (slot.safe_wal_size.has_value() && *slot.safe_wal_size <= 0);
  if (unreserved) {
    std::string problem = absl::StrCat(
        "replication slot ", options_.slot, " is about to lose WAL (wal_status ",
        slot.wal_status, ", safe_wal_size ",
        slot.safe_wal_size ? absl::StrCat(*slot.safe_wal_size) : std::string("unknown"),
        " bytes, lag ", slot.lag_bytes,
        " bytes): the relay must catch up before the next checkpoint");
    // Warned once per change, not at every check; /healthz says it at every probe.
    if (!slot_unreserved_) spdlog::warn("{}", problem);
    stats_->health.SetSlotProblem(std::move(problem));
  } else if (slot_unreserved_) {
    spdlog::info("replication slot {} holds its WAL again (wal_status {})", options_.slot,
                 slot.wal_status);
    stats_->health.SetSlotProblem("");
  }
  slot_unreserved_ = unreserved;
  return absl::OkStatus();
}

absl::Status Relay::WatchSlot() {
  if (!control_) return absl::OkStatus();
  OUTBOXD_ASSIGN_OR_RETURN(std::optional<pg::SlotInfo> slot, slot_watch_.Poll(*control_));
  // A slot that vanished while we stream cannot happen (an active slot cannot be
  // dropped); the stream itself reports whatever follows.
  if (!slot || !slot->exists) return absl::OkStatus();
  return CheckWalStatus(*slot);
}

absl::Status Relay::ChooseFeedbackInterval(pg::Connection& conn) {
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::Result result,
      conn.Exec("SELECT setting FROM pg_settings WHERE name = 'wal_sender_timeout'"));
  int64_t timeout_ms = 0;
  if (result.rows() != 1 || !absl::SimpleAtoi(std::string(result.Get(0, 0)), &timeout_ms)) {
    return absl::InternalError("cannot read wal_sender_timeout from pg_settings");
  }
  feedback_interval_ = options_.feedback_interval;
  // While flow control pauses reading, the walsender's keepalive requests wait unread
  // behind the data in the socket: only our own timer keeps the connection alive
  // (docs/architecture.md trap "silent client killed by wal_sender_timeout").
  if (timeout_ms > 0 && absl::Milliseconds(timeout_ms) / 3 < feedback_interval_) {
    feedback_interval_ = absl::Milliseconds(timeout_ms) / 3;
    spdlog::info("feedback every {} (a third of wal_sender_timeout {}ms)",
                 absl::FormatDuration(feedback_interval_), timeout_ms);
  }
  return absl::OkStatus();
}

bool Relay::InFlightFull() const {
  return tracker_.events_in_flight() >= options_.max_in_flight ||
         sink_->InFlightBytes() >= options_.max_in_flight_bytes;
}

void Relay::EndSession() {
  stats_->streaming = false;
  stream_.reset();
  pending_error_ = absl::OkStatus();
  // Reports for events already produced still count: wait a little for them so the
  // next session resumes after them instead of sending them again.
  absl::Time deadline = absl::Now() + absl::Seconds(2);
  // A producer with a fatal error acknowledges nothing more: no point waiting.
  const bool producer_alive = sink_->Health().ok();
  while (producer_alive && tracker_.events_in_flight() > 0 && !tracker_.has_failed() &&
         absl::Now() < deadline && !stop_->requested()) {
    sink_->Poll(50);
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
    FD_SET(sink_->wake_fd(), &readable);
    timeval tv = absl::ToTimeval(std::min(until - absl::Now(), absl::Milliseconds(200)));
    select(std::max(stop_->fd(), sink_->wake_fd()) + 1, &readable, nullptr, nullptr, &tv);
    sink_->Poll(0);
  }
}

absl::Status Relay::Connect() {
  OUTBOXD_ASSIGN_OR_RETURN(
      pg::Connection conn,
      pg::Connection::Open(options_.conninfo, pg::ConnectionKind::kReplication));
  if (adopted_control_) {
    control_.emplace(std::move(*adopted_control_));
    adopted_control_.reset();
  } else {
    OUTBOXD_ASSIGN_OR_RETURN(pg::Connection control, pg::Connection::Open(options_.conninfo));
    control_.emplace(std::move(control));
  }
  slot_watch_.Restart();  // whatever it had in flight went with the old connection
  OUTBOXD_RETURN_IF_ERROR(RefreshDeadAggregates());
  OUTBOXD_ASSIGN_OR_RETURN(pg::SlotInfo slot, pg::QuerySlot(conn, options_.slot));
  if (!slot.active) {  // else another relay holds it: a standby retries every second, quietly
    spdlog::info(
        "connected to PostgreSQL at {} as {}; slot {} {}", conn.endpoint(), conn.user(),
        options_.slot,
        slot.exists ? absl::StrCat("confirmed up to ", pg::FormatLsn(slot.confirmed_flush_lsn),
                                   ", lag ", slot.lag_bytes, " bytes, wal_status ", slot.wal_status)
                    : std::string("does not exist yet"));
  }
  OUTBOXD_ASSIGN_OR_RETURN(std::optional<outbox::BackfillRequest> backfill,
                           state_.PendingBackfill(*control_, options_.slot));
  OUTBOXD_RETURN_IF_ERROR(ChooseFeedbackInterval(conn));
  pg::Lsn start = 0;
  if (backfill) {
    OUTBOXD_ASSIGN_OR_RETURN(start, Backfill(conn, slot, *backfill));
  } else {
    if (!slot.exists) {
      return absl::NotFoundError(absl::StrCat("replication slot \"", options_.slot,
                                              "\" does not exist; run outboxd setup"));
    }
    OUTBOXD_RETURN_IF_ERROR(CheckWalStatus(slot));
    // Resume after whatever this process already had acknowledged: the slot may be
    // behind it (feedback lost with the connection, or a server crash rolled
    // confirmed_flush_lsn back to the last checkpoint). The watermark never goes
    // back, and feedback never reports less than the slot holds (PostgreSQL 15 would
    // store a smaller value as given).
    tracker_.Reset(slot.confirmed_flush_lsn);
    start = tracker_.watermark();
  }
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
    bool reply_requested = false;
    OUTBOXD_ASSIGN_OR_RETURN(const int read, ReadBatch(reply_requested));
    // Catching up, the walsender sends message by message and a relay that waits on
    // the socket wakes for every few of them: that wake-up (select, recv) was most of
    // its CPU. When the last read found a backlog, let it gather a moment instead.
    // Live traffic instead (a small read): send it now rather than after linger.ms.
    // Flush returns early once all is acknowledged; a timeout is the normal case.
    if (read >= kBacklogBatch) {
      absl::SleepFor(kBacklogNap);
    } else if (read > 0) {
      sink_->Flush(kLiveFlush).IgnoreError();
    }
    sink_->Poll(0);
    OUTBOXD_RETURN_IF_ERROR(ProducerHealth());
    OUTBOXD_RETURN_IF_ERROR(std::exchange(pending_error_, absl::OkStatus()));
    // A replay empties an aggregate's dead letters: let its new events flow again.
    if (!dead_aggregates_.empty() && absl::Now() - dead_refreshed_ > kDeadLetterRefresh) {
      OUTBOXD_RETURN_IF_ERROR(RefreshDeadAggregates());
    }
    OUTBOXD_RETURN_IF_ERROR(WatchSlot());
    OUTBOXD_RETURN_IF_ERROR(MaybeSendFeedback(reply_requested));
    if (position_.Due()) {
      OUTBOXD_RETURN_IF_ERROR(slot_watch_.Settle(*control_));
      OUTBOXD_RETURN_IF_ERROR(position_.Tick(*control_, tracker_.watermark()));
    }
    if (stream_->wants_write()) OUTBOXD_RETURN_IF_ERROR(stream_->Flush());
    PublishStats();
    if (read == 0) {
      // Flow control: above an in-flight limit (events or bytes), stop reading the
      // stream but keep serving delivery reports and sending feedback (the walsender
      // must hear from us within wal_sender_timeout whatever the broker does).
      bool want_stream = !InFlightFull();
      absl::Duration timeout = feedback_interval_ - (absl::Now() - last_feedback_);
      if (tracker_.watermark() != last_sent_flush_) timeout = kFeedbackCoalesce;
      Wait(want_stream, std::clamp(timeout, absl::ZeroDuration(), absl::Seconds(1)));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int> Relay::ReadBatch(bool& reply_requested) {
  int read = 0;
  for (; read < kReadBatch; ++read) {
    if (InFlightFull()) return read;
    OUTBOXD_ASSIGN_OR_RETURN(pg::StreamMessage message, stream_->Next());
    if (std::holds_alternative<pg::NoMessage>(message)) return read;
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
      // an idle outbox from pinning WAL (docs/architecture.md trap "idle slot pins WAL").
      tracker_.ConfirmIdlePosition(keepalive->wal_end);
      reply_requested |= keepalive->reply_requested;
    }
  }
  return read;
}

absl::Status Relay::HandleData(std::string_view data) {
  OUTBOXD_RETURN_IF_ERROR(pgoutput::DecodeInto(data, message_));
  if (auto* insert = std::get_if<pgoutput::Insert>(&message_)) return HandleInsert(*insert);
  if (auto* begin = std::get_if<pgoutput::Begin>(&message_)) {
    tx_ = tracker_.Begin(begin->final_lsn, begin->commit_time + kPgEpochOffsetUs);
    tx_lsn_ = begin->final_lsn;
    tx_lsn_text_ = pg::FormatLsn(begin->final_lsn);
    tx_commit_us_ = begin->commit_time + kPgEpochOffsetUs;
    tx_commit_text_.clear();
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
                   options_.publication,
                   LogSafe(rel ? rel->relname : absl::StrCat(insert.relation_id)));
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
  if (options_.columns.created_at.empty()) event->created_at = CommitTimeText();
  return Publish(*event);
}

std::string_view Relay::CommitTimeText() {
  if (tx_commit_text_.empty()) {
    // As PostgreSQL renders a timestamptz in UTC, so the encoder's IsoTimestamp
    // treats it like a created-at column's value.
    tx_commit_text_ = absl::FormatTime("%Y-%m-%d %H:%M:%E*S+00",
                                       absl::FromUnixMicros(tx_commit_us_), absl::UTCTimeZone());
  }
  return tx_commit_text_;
}

absl::Status Relay::Publish(const outbox::OutboxEvent& event) {
  tracker_.AddEvent(tx_);
  absl::Status encoded = encoder_.Encode(event, tx_lsn_text_);
  const outbox::EncodedMessage& m = encoder_.message();
  sink::OutgoingMessage message{.topic = topic_.Render(event.type, table_name_, topic_buffer_),
                                 .key = m.key,
                                 .value = m.value,
                                 .headers = m.headers,
                                 .tag = tx_};
  // A payload that is not a JSON object or array, or has no --key-pointer field.
  if (!encoded.ok()) return DeadLetter(message, event.payload, encoded);
  if (!dead_aggregates_.empty()) {
    auto dead = dead_aggregates_.find(
        absl::string_view(event.aggregate_id.data(), event.aggregate_id.size()));
    if (dead != dead_aggregates_.end() && FollowsDeadLetter(dead->second, event.id)) {
      return DeadLetter(message, event.payload,
                        absl::FailedPreconditionError(
                            "follows an earlier dead-lettered event of its aggregate"));
    }
  }

  return Produce(message, event.payload);
}

absl::Status Relay::Produce(const sink::OutgoingMessage& message, std::string_view payload) {
  while (true) {
    absl::Status status = sink_->Produce(message);
    if (status.ok()) {
      AfterProduce();
      return status;
    }
    if (status.code() == absl::StatusCode::kAborted) return ProducerHealth();
    if (status.code() != absl::StatusCode::kResourceExhausted) {
      stats_->events_failed++;
      stats_->metrics.PublishFailed();
      return DeadLetter(message, payload, status);
    }
    // librdkafka's queue is full: serve reports until there is room, and keep the
    // walsender informed meanwhile.
    sink_->Poll(100);
    OUTBOXD_RETURN_IF_ERROR(ProducerHealth());
    OUTBOXD_RETURN_IF_ERROR(MaybeSendFeedback(false));
    if (stop_->requested()) {
      return absl::CancelledError("stopped while the producer queue was full");
    }
  }
}

void Relay::AfterProduce() {
  events_in_flight_peak_ = std::max(events_in_flight_peak_, tracker_.events_in_flight());
  bytes_in_flight_peak_ = std::max(bytes_in_flight_peak_, sink_->InFlightBytes());
  if (++produced_ == options_.test_fatal_error_after) {
    spdlog::warn("test: raising a fatal producer error after {} events", produced_);
    sink_->RaiseFatalErrorForTesting("test fatal error (--test-fatal-error-after)");
  }
}

absl::Status Relay::DeadLetter(const sink::OutgoingMessage& message, std::string_view payload,
                               const absl::Status& error) {
  outbox::DeadLetter letter{.topic = std::string(message.topic),
                            .error = std::string(error.message())};
  letter.payload = payload;
  for (const sink::Header& h : message.headers) {
    if (h.name == "id") letter.id = h.value;
    if (h.name == "aggregate_id") letter.aggregate_id = h.value;  // the key may be another field
    if (h.name == "type") letter.type = h.value;
    if (h.name == "created_at") letter.created_at = h.value;
    if (h.name == "lsn") letter.lsn = h.value;
  }
  if (!control_) return absl::UnavailableError("no connection for the dead-letter table");
  OUTBOXD_RETURN_IF_ERROR(slot_watch_.Settle(*control_));
  // Written before the event counts as handled: the watermark passes a poison event
  // only once it is safely in the table.
  OUTBOXD_RETURN_IF_ERROR(dead_letters_.Insert(*control_, letter));
  auto [dead, added] = dead_aggregates_.try_emplace(
      letter.aggregate_id, DeadAggregate{.lsn = pg::ParseLsn(letter.lsn).value_or(0),
                                         .first_id = letter.id});
  if (dead->second.first_id == letter.id) dead->second.passed_in = message.tag;
  tracker_.Ack(message.tag);
  stats_->events_dead_lettered++;
  stats_->metrics.DeadLettered();
  // Every value here may come from the row: escaped, so none can forge a log line.
  spdlog::error("event {} of aggregate {} dead-lettered to {}: {}", LogSafe(letter.id),
                LogSafe(letter.aggregate_id), dead_letters_.table(), LogSafe(letter.error));
  return absl::OkStatus();
}

absl::StatusOr<pg::Lsn> Relay::Backfill(pg::Connection& conn, const pg::SlotInfo& slot,
                                        const outbox::BackfillRequest& request) {
  // One relay backfills; another one started meanwhile stands by.
  OUTBOXD_ASSIGN_OR_RETURN(pg::Result locked,
                           control_->ExecParams("SELECT pg_try_advisory_lock(hashtext($1))",
                                                {"outboxd backfill " + options_.slot}));
  if (locked.Get(0, 0) != "t") {
    return pg::WithSqlState(
        absl::UnavailableError(absl::StrCat("another relay is backfilling slot ", options_.slot)),
        "55006");
  }
  // A slot left by an interrupted backfill never streamed and confirmed nothing:
  // start again with a fresh one (and a fresh snapshot).
  if (slot.exists) OUTBOXD_RETURN_IF_ERROR(pg::DropSlot(*control_, options_.slot));
  OUTBOXD_ASSIGN_OR_RETURN(pg::CreatedSlot created,
                           pg::CreateSlotWithSnapshot(conn, options_.slot));
  OUTBOXD_ASSIGN_OR_RETURN(
      BackfillReader reader,
      BackfillReader::Open(options_.conninfo, {.table = options_.table, .columns = options_.columns},
                           request, created.snapshot));
  spdlog::info("created slot {} at {}; publishing the outbox rows committed before it first",
               options_.slot, pg::FormatLsn(created.consistent_point));
  // All backfilled rows form one tracked "transaction" ending at the consistent
  // point: the watermark cannot pass it before every one is acknowledged.
  tracker_.Reset(created.consistent_point);
  tx_ = tracker_.Begin(created.consistent_point, absl::ToUnixMicros(absl::Now()));
  tx_lsn_ = created.consistent_point;
  tx_lsn_text_ = pg::FormatLsn(created.consistent_point);
  int64_t published = 0;
  while (true) {
    OUTBOXD_ASSIGN_OR_RETURN(pg::Result rows, reader.Next(1000));
    if (rows.rows() == 0) break;
    for (int i = 0; i < rows.rows(); ++i) {
      OUTBOXD_RETURN_IF_ERROR(Drain(/*all=*/false));
      OUTBOXD_RETURN_IF_ERROR(Publish({.id = rows.Get(i, 0),
                                       .aggregate_id = rows.Get(i, 1),
                                       .type = rows.Get(i, 2),
                                       .payload = rows.Get(i, 3),
                                       .created_at = rows.Get(i, 4)}));
    }
    published += rows.rows();
  }
  tracker_.Commit(created.consistent_point);
  OUTBOXD_RETURN_IF_ERROR(reader.Close());
  OUTBOXD_RETURN_IF_ERROR(Drain(/*all=*/true));
  OUTBOXD_RETURN_IF_ERROR(state_.FinishBackfill(*control_, options_.slot));
  spdlog::info("backfill done: {} events acknowledged; streaming from {}", published,
               tx_lsn_text_);
  return created.consistent_point;
}

absl::Status Relay::Drain(bool all) {
  while (all ? tracker_.events_in_flight() > 0 : InFlightFull()) {
    sink_->Poll(100);
    OUTBOXD_RETURN_IF_ERROR(ProducerHealth());
    OUTBOXD_RETURN_IF_ERROR(std::exchange(pending_error_, absl::OkStatus()));
    if (stop_->requested()) return absl::CancelledError("stopped during the backfill");
  }
  return absl::OkStatus();
}

absl::Status Relay::RefreshDeadAggregates() {
  if (!control_) return absl::OkStatus();
  OUTBOXD_RETURN_IF_ERROR(slot_watch_.Settle(*control_));
  OUTBOXD_ASSIGN_OR_RETURN(auto stored, dead_letters_.Aggregates(*control_));
  absl::flat_hash_map<std::string, DeadAggregate> fresh;
  for (auto& [aggregate, first] : stored) {
    // An unreadable LSN counts as 0: every event of the aggregate then follows.
    DeadAggregate dead{.lsn = pg::ParseLsn(first.lsn).value_or(0), .first_id = first.id};
    // A refresh can fall inside the first letter's own transaction: keep knowing
    // that the relay already passed it there.
    auto old = dead_aggregates_.find(aggregate);
    if (old != dead_aggregates_.end() && old->second.first_id == dead.first_id) {
      dead.passed_in = old->second.passed_in;
    }
    fresh.emplace(aggregate, std::move(dead));
  }
  dead_aggregates_ = std::move(fresh);
  dead_refreshed_ = absl::Now();
  return absl::OkStatus();
}

bool Relay::FollowsDeadLetter(DeadAggregate& dead, std::string_view event_id) {
  if (tx_lsn_ != dead.lsn) return tx_lsn_ > dead.lsn;
  // The first dead letter's own transaction: the events before it there precede it.
  if (event_id == dead.first_id) dead.passed_in = tx_;
  return dead.passed_in == tx_;
}

absl::Status Relay::ProducerHealth() {
  absl::Status fatal = sink_->Health();
  if (fatal.ok()) return fatal;
  // An idempotent producer that lost its sequence state cannot go on without risking
  // reordering: the session ends and a new producer resumes from the watermark.
  return absl::AbortedError(absl::StrCat("fatal producer error: ", fatal.message()));
}

void Relay::OnDelivery(const sink::DeliveryReport& report) {
  if (report.status.ok()) {
    RecordAck(report);  // before Ack(): a complete transaction is forgotten
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
  stats_->metrics.PublishFailed();
  sink::OutgoingMessage message{.topic = report.topic,
                                 .key = report.key,
                                 .value = report.value,
                                 .headers = report.headers,
                                 .tag = report.tag};
  // The value may be an envelope or protobuf: the letter keeps the payload inside it.
  absl::StatusOr<std::string_view> payload = encoder_.PayloadOf(report.value, report.headers);
  absl::Status stored = DeadLetter(message, payload.value_or(report.value), report.status);
  if (!stored.ok()) {
    tracker_.MarkFailed(report.tag);  // holds the watermark; the session ends below
    if (pending_error_.ok()) pending_error_ = stored;
  }
}

void Relay::RecordAck(const sink::DeliveryReport& report) {
  const absl::Time now = absl::Now();
  std::optional<int64_t> commit_us = tracker_.commit_time(report.tag);
  std::optional<double> latency;
  if (commit_us) latency = static_cast<double>(absl::ToUnixMicros(now) - *commit_us) / 1e6;
  stats_->metrics.Acknowledged(report.topic, latency);
  stats_->health.Acknowledged(now);
}

absl::Status Relay::MaybeSendFeedback(bool force) {
  absl::Time now = absl::Now();
  pg::Lsn flush = tracker_.watermark();
  bool moved = flush != last_sent_flush_ && now - last_feedback_ >= kFeedbackCoalesce;
  bool due = now - last_feedback_ >= feedback_interval_;
  if (!force && !moved && !due) return absl::OkStatus();
  // On the timer, ask for a reply: the walsender answers with a keepalive carrying
  // how far it has read, even while it is catching up through other tables' WAL and
  // would otherwise send nothing until it is done. With nothing in flight that
  // position is confirmed (ReadBatch), so the slot, and the horizon it proves for the
  // recorded position, keep moving during a long catch-up.
  OUTBOXD_RETURN_IF_ERROR(stream_->SendFeedback(std::max(received_, flush), flush,
                                                /*reply_requested=*/due));
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
  watch(sink_->wake_fd());
  watch(stop_->fd());
  if (stream_->wants_write()) {  // feedback queued behind a full socket buffer
    FD_SET(stream_->socket(), &writable);
    max_fd = std::max(max_fd, stream_->socket());
  }
  timeval tv = absl::ToTimeval(timeout);
  select(max_fd + 1, &readable, &writable, nullptr, &tv);
}

absl::Status Relay::Shutdown() {
  spdlog::info("stopping: waiting up to {} for {} in-flight events",
               absl::FormatDuration(options_.shutdown_timeout), tracker_.events_in_flight());
  absl::Time deadline = absl::Now() + options_.shutdown_timeout;
  while (tracker_.events_in_flight() > 0 && !tracker_.has_failed() && absl::Now() < deadline) {
    sink_->Poll(50);
    OUTBOXD_RETURN_IF_ERROR(MaybeSendFeedback(false));
  }
  OUTBOXD_RETURN_IF_ERROR(MaybeSendFeedback(true));
  PublishStats();
  stats_->events_abandoned = tracker_.events_in_flight();
  spdlog::info("confirmed {}; {} events still unacknowledged will be sent again on restart",
               pg::FormatLsn(tracker_.watermark()), tracker_.events_in_flight());
  spdlog::info("in flight at most {} events, {} bytes (limits {}, {})", events_in_flight_peak_,
               bytes_in_flight_peak_, options_.max_in_flight, options_.max_in_flight_bytes);
  stats_->streaming = false;
  return stream_->End();
}

void Relay::CloseProducer() {
  if (!sink_) return;
  // The shutdown's wait was the whole budget: no second flush in the producer's
  // destructor, which added its own 5 s to every stop with the brokers down.
  const int dropped = sink_->Close(absl::ZeroDuration());
  if (stats_->events_abandoned == 0) stats_->events_abandoned = dropped;
  sink_.reset();
}

void Relay::PublishStats() {
  stats_->received_lsn = received_;
  stats_->confirmed_lsn = tracker_.watermark();
  stats_->events_in_flight = tracker_.events_in_flight();
  stats_->bytes_in_flight = sink_->InFlightBytes();
  stats_->events_in_flight_peak = events_in_flight_peak_;
  stats_->bytes_in_flight_peak = bytes_in_flight_peak_;
  std::optional<int64_t> oldest = tracker_.oldest_unacked_commit_time();
  stats_->oldest_unacked_commit_us = oldest.value_or(0);
  observe::Metrics& m = stats_->metrics;
  m.SetConnected(stats_->streaming);
  m.SetReceivedLsn(received_);
  m.SetConfirmedLsn(tracker_.watermark());
  m.SetInFlight(tracker_.events_in_flight());
  m.SetOldestUnacked(oldest ? std::optional(absl::FromUnixMicros(*oldest)) : std::nullopt);
  stats_->health.SetConnected(stats_->streaming);
  stats_->health.SetInFlight(tracker_.events_in_flight(), absl::Now());
}

}  // namespace outboxd::relay
