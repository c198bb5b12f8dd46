// The relay's data path: reading turns, delivery (sink, AckTracker, dead letters) and
// feedback; what a message means is the TransactionIntake's (relay/transaction_intake.cc).
#include "relay/pipeline.h"

#include <sys/select.h>

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/log_escape.h"
#include "base/status_macros.h"
#include "outbox/broker_message.h"
#include "outbox/dead_letter.h"
#include "outbox/emitted_event.h"
#include "pg/copy_data.h"
#include "pg/table_name.h"

namespace outboxd::relay {
namespace {

// Messages read per loop turn before delivery reports and feedback get served.
constexpr int kReadBatch = 2000;
// A read of this many messages (three or more single-row transactions) whose last
// transaction committed over kBacklogAge ago means the stream is behind; the relay
// then sleeps kBacklogNap before reading again. Measured on a 60,000-transaction
// backlog: relay CPU 17 -> 4.5 us per event, drain time unchanged or shorter (the
// walsender, not the relay, sets the pace). The age keeps the nap off live traffic:
// at 5,000 events/s a turn often reads 8 messages or more, and a nap there held
// every one of them 1 ms after it had arrived (issue 17 point 2). A relay whose clock
// runs behind PostgreSQL's by more than kBacklogAge naps less in a catch-up (more
// CPU, same events); one ahead naps as before.
constexpr int kBacklogBatch = 8;
constexpr absl::Duration kBacklogNap = absl::Milliseconds(1);
constexpr absl::Duration kBacklogAge = absl::Milliseconds(100);
// Catching up (the stream below the server's position when the session connected),
// the nap is longer: what arrives meanwhile is produced as one burst, and librdkafka
// sends each partition's share of a burst as one request once linger.ms is out. After
// a 1 ms nap a burst is ~30 events, 2-3 per partition of a 12-partition topic, each
// with its own produce request, response and broker-thread wake-ups: context switches
// were most of the relay's CPU. Measured on a 100,000-transaction backlog, keys over
// 1,000 aggregates (scripts/bench --only-cpu, load 8 on 2 cores): 12 partitions over
// 3 brokers 11.8-14.5 -> 7.0-8.7 us CPU per event, drained in 6.8-8.8 -> 1.9-4.5 s;
// one partition 6.3-6.8 -> 4.8-5.7 us; context switches 25-56k -> 11-15k per drain.
// Longer bursts did better still, once a turn could read them whole (up to
// kCatchUpReadBatch): same backlog, load 11, two or three runs each, 10 ms and 2,000
// messages 10.0-14.7 us, 30 ms and 10,000 8.5-12.1 us, 50 ms and 20,000 5.5-8.3 us
// (drained in 2.9-3.2 s against 3.8-6.8 s). linger.ms 5 on top changed nothing.
// Past that position (live traffic, whatever its rate) the nap is kBacklogNap again.
constexpr absl::Duration kCatchUpNap = absl::Milliseconds(50);
constexpr int kCatchUpReadBatch = 20000;
// A turn also ends once it has read this many bytes of pgoutput messages: what it
// reads it produces, and librdkafka holds each message (~650 bytes of heap with its
// five headers, heaptrack) until its delivery report is served after the turn. Whole
// 20,000-message turns of 10,000-row transactions made the relay's peak RSS 33 MiB
// at load 12 (17.9 before those turns); in flight peaked at 9,300-11,600 events at
// load 7 (25.4-27.7 MiB). 10 x 10,000 rows, one partition, load 7: 20,000 messages
// alone (seven runs) 25.4-27.7 MiB, drained in 2.9-4.4 s at 4.0-5.6 us per event; with
// 512 KiB (2,750 such rows, or 6,600 messages: 2,200 single-row transactions) 23.0-24.5
// MiB, 3.0-3.1 s, 3.1-3.2 us; 256 KiB 23.2-23.3 MiB but 3.8-4.9 s. The 100k single-row
// backlog over 12 partitions stayed within the noise (7.2-8.5 against 8.7-9.8 us).
// Every turn, live ones too: a turn's bytes are as much memory whatever its pace.
constexpr size_t kReadBytes = size_t{512} << 10;
// Dead letters that follow their aggregate's first are summed up at most this often.
constexpr absl::Duration kFollowersLogInterval = absl::Seconds(10);
// A session that ends waits this long for reports of what it already produced, so the
// next one resumes after them instead of sending them again; but no longer than
// kReportGap without one (a broker that is down or fails every request).
constexpr absl::Duration kEndSessionGrace = absl::Seconds(2);
constexpr absl::Duration kReportGap = absl::Milliseconds(250);

}  // namespace

absl::Duration BacklogNap(ReadEnd end, pg::Lsn received, pg::Lsn catch_up_to) {
  if (received >= catch_up_to) return kBacklogNap;
  return end == ReadEnd::kTurnLimit ? absl::ZeroDuration() : kCatchUpNap;
}

Pipeline::Pipeline(const RelayOptions& options, DeadLetterGate* gate, RelayStats* stats,
                   StopSignal* stop, Clock clock, Sleep sleep)
    : options_(options),
      gate_(gate),
      stats_(stats),
      stop_(stop),
      clock_(std::move(clock)),
      sleep_(std::move(sleep)),
      encoder_(options_.format),
      intake_(options_, stats_, clock_, this) {
  // Preflight (relay/preflight.h) refused a name that does not parse before any relay
  // is built; kept whole, such a name would just match no Relation message.
  absl::StatusOr<pg::TableName> table = pg::TableName::Parse(options_.table);
  table_name_ = table.ok() ? table->name : options_.table;
}

Pipeline::~Pipeline() = default;

absl::Status Pipeline::Start() {
  OUTBOXD_ASSIGN_OR_RETURN(topic_, outbox::TopicTemplate::Parse(options_.topic_template));
  return RecreateSink().status();
}

absl::StatusOr<int> Pipeline::RecreateSink() {
  OUTBOXD_ASSIGN_OR_RETURN(
      std::unique_ptr<sink::Sink> fresh,
      options_.make_sink(
          {.on_delivery = [this](const sink::DeliveryReport& r) { OnDelivery(r); }}));
  // No flush: whatever the old one holds is dropped, as a kill -9 would drop it.
  const int dropped = sink_ ? sink_->Close(absl::ZeroDuration()) : 0;
  sink_ = std::move(fresh);
  return dropped;
}

pg::Lsn Pipeline::ResumeFrom(pg::Lsn slot_confirmed) {
  // The slot may be behind what this process acknowledged (feedback lost with the
  // connection, or a server crash rolled confirmed_flush_lsn back to the last
  // checkpoint). The watermark never goes back, and feedback never reports less than
  // the slot holds (PostgreSQL 15 would store a smaller value as given).
  tracker_.Reset(slot_confirmed);
  return tracker_.watermark();
}

void Pipeline::ForgetPosition() {
  tracker_.Rebase(0);
  hold_.Forget();
  received_ = 0;
  feedback_.Forget();
}

void Pipeline::Stream(std::unique_ptr<ChangeStream> stream, pg::Lsn start,
                      absl::Duration feedback_interval) {
  stream_ = std::move(stream);
  feedback_.Restart(start, feedback_interval);
  received_ = std::max(received_, start);
  catch_up_to_ = 0;
  stats_->streaming = true;
  PublishStats();
}

absl::StatusOr<Pipeline::Turn> Pipeline::Step() {
  OUTBOXD_ASSIGN_OR_RETURN(const Batch batch, ReadBatch());
  Pace(batch);
  OUTBOXD_RETURN_IF_ERROR(ServeDeliveries());
  LogParkedFollowers(/*now=*/false);
  intake_.LogRejections(TransactionIntake::LogNow::kWhenDue);
  OUTBOXD_RETURN_IF_ERROR(SendFeedback(batch.reply_requested ? FeedbackRule::Urgency::kNow
                                                             : FeedbackRule::Urgency::kWhenDue));
  if (stream_->wants_write()) OUTBOXD_RETURN_IF_ERROR(stream_->Flush());
  PublishStats();
  return batch.read == 0 ? Turn::kIdle : Turn::kRead;
}

absl::StatusOr<Pipeline::Batch> Pipeline::ReadBatch() {
  Batch batch;
  const int limit = received_ < catch_up_to_ ? kCatchUpReadBatch : kReadBatch;
  size_t bytes = 0;
  for (; batch.read < limit; ++batch.read) {
    if (bytes >= kReadBytes) break;
    if (InFlightFull()) return batch;
    if (hold_.committed()) {  // --standby-slot: its messages first, once the standbys have it
      if (hold_.waiting()) return batch;
      OUTBOXD_ASSIGN_OR_RETURN(const std::optional<std::string_view> held, hold_.Released());
      if (held) {
        bytes += held->size();
        OUTBOXD_RETURN_IF_ERROR(intake_.Handle(*held, /*sent_us=*/0));
        continue;
      }
    }
    OUTBOXD_ASSIGN_OR_RETURN(pg::StreamMessage message, stream_->Next());
    if (std::holds_alternative<pg::NoMessage>(message)) return batch;
    if (std::holds_alternative<pg::StreamEnd>(message)) {
      return absl::UnavailableError("PostgreSQL ended the replication stream");
    }
    if (auto* data = std::get_if<pg::XLogData>(&message)) {
      received_ = std::max(received_, data->wal_start);
      bytes += data->data.size();
      if (!options_.standby_slots.empty()) {
        OUTBOXD_RETURN_IF_ERROR(Hold(data->data));
        continue;
      }
      const int64_t sent_us = data->send_time != 0 ? data->send_time + kPgEpochOffsetUs : 0;
      OUTBOXD_RETURN_IF_ERROR(intake_.Handle(data->data, sent_us));
    } else if (auto* keepalive = std::get_if<pg::Keepalive>(&message)) {
      received_ = std::max(received_, keepalive->wal_end);
      // A held transaction is not in the tracker yet, and lies before that position.
      if (FeedbackRule::ConfirmsKeepalive(
              {.in_flight = !tracker_.Idle(), .held = !hold_.empty()})) {
        tracker_.ConfirmIdlePosition(keepalive->wal_end);
      }
      batch.reply_requested |= keepalive->reply_requested;
    }
  }
  batch.end = ReadEnd::kTurnLimit;  // more may be waiting
  return batch;
}

void Pipeline::Pace(const Batch& batch) {
  // Catching up, the walsender sends message by message and a relay that waits on
  // the socket wakes for every few of them: that wake-up (select, recv) was most of
  // its CPU. When the last read found a backlog, let it gather a moment instead.
  // Any other read is live traffic, with nothing behind it to batch with: the sink
  // sends it at once instead of after linger.ms (kept for backlogs, where batches
  // pay; kafka/publisher.cc), and the loop goes back to the stream at once.
  // SendNow() does not wait: a flush here, which lasts until the acknowledgement,
  // held a message that arrived meanwhile for up to a round trip (issue 17 point 2).
  // A batched stream's short read (the bulk catch-up's) is a chunk's tail, whose last
  // acknowledgements the slot's advance waits for: a nap there held them 50 ms.
  const bool old = clock_() - absl::FromUnixMicros(intake_.transaction().commit_us) > kBacklogAge;
  const bool tail = stream_->batched() && batch.end == ReadEnd::kStreamIdle;
  if (batch.read >= kBacklogBatch && old && !tail) {
    sleep_(BacklogNap(batch.end, received_, catch_up_to_));
  } else if (batch.read > 0) {
    sink_->SendNow();
  }
}

absl::Status Pipeline::ServeDeliveries() {
  sink_->Poll(0);
  OUTBOXD_RETURN_IF_ERROR(SinkHealth());
  return std::exchange(pending_error_, absl::OkStatus());
}

// --standby-slot: each message of the transaction into the hold, but no copy of a
// message the relay skips or refuses for its size, which could be as large as a bytea.
absl::Status Pipeline::Hold(std::string_view data) {
  return intake_.WorthHolding(data) ? hold_.Add(data) : absl::OkStatus();
}

AckTracker::TxId Pipeline::BeginTransaction(pg::Lsn commit_lsn, int64_t commit_us) {
  return tracker_.Begin(commit_lsn, commit_us);
}

void Pipeline::CommitTransaction(pg::Lsn end_lsn) { tracker_.Commit(end_lsn); }

absl::Status Pipeline::Publish(const outbox::OutboxEvent& event, Transaction& tx) {
  tracker_.AddEvent(tx.id);
  const std::string_view topic = topic_.Render(event.type, table_name_, topic_buffer_);
  const outbox::BrokerMessage built =
      outbox::BuildBrokerMessage(encoder_, event, tx.lsn_text, topic, tx.id);
  // A payload that is not a JSON object or array, or has no --key-pointer field.
  if (!built.encoded.ok()) {
    return DeadLetter(built.message, event.payload, event.headers, built.encoded);
  }
  dropped_headers_.Report(event.id, encoder_.dropped(), clock_);
  // Before the gate: an event the broker holds was delivered, even if its aggregate
  // was parked after it (a failed delivery reported later); it is no dead letter.
  OUTBOXD_ASSIGN_OR_RETURN(
      const bool held,
      dedupe_.AlreadyPublished(
          *sink_, tx.lsn, tx.commit_us,
          {.topic = topic, .id = event.id, .lsn = tx.lsn_text, .key = built.message.key}));
  if (held) {
    tracker_.Ack(tx.id);
    return absl::OkStatus();
  }
  OUTBOXD_ASSIGN_OR_RETURN(
      const bool follows,
      gate_->Follows(
          event.aggregate_id, event.id,
          {.commit_lsn = tx.lsn, .commit_time = absl::FromUnixMicros(tx.commit_us), .tx = tx.id}));
  if (follows) {
    return DeadLetter(
        built.message, event.payload, event.headers,
        absl::FailedPreconditionError("follows an earlier dead-lettered event of its aggregate"));
  }
  return Produce(built.message, event, tx);
}

absl::Status Pipeline::DeadLetterRow(const outbox::OutboxEvent& event, const Transaction& tx,
                                     const absl::Status& error) {
  tracker_.AddEvent(tx.id);
  const sink::Header headers[] = {{.name = "id", .value = event.id},
                                  {.name = "aggregate_id", .value = event.aggregate_id},
                                  {.name = "type", .value = event.type},
                                  {.name = "created_at", .value = event.created_at},
                                  {.name = "lsn", .value = tx.lsn_text}};
  const sink::OutgoingMessage letter{.topic = topic_.Render(event.type, table_name_, topic_buffer_),
                                     .headers = headers,
                                     .tag = tx.id};
  return DeadLetter(letter, event.payload, event.headers, error);
}

absl::Status Pipeline::Produce(const sink::OutgoingMessage& message,
                               const outbox::OutboxEvent& event, Transaction& tx) {
  while (true) {
    absl::Status status = sink_->Produce(message);
    if (status.ok()) {
      if (!tx.picked_up && tx.sent_us != 0) ObservePickup(tx);
      // Each event's way through the relay, for `--log-level debug` (scripts/demo).
      if (spdlog::should_log(spdlog::level::debug)) LogSent(message, tx);
      AfterProduce();
      return status;
    }
    if (status.code() == absl::StatusCode::kAborted) return SinkHealth();
    if (status.code() != absl::StatusCode::kResourceExhausted) {
      stats_->metrics.PublishFailed();
      return DeadLetter(message, event.payload, event.headers, status);
    }
    // The sink's queue is full (librdkafka) or the broker blocked it (RabbitMQ's
    // memory or disk alarm, for as long as it lasts): serve reports until there is
    // room, and keep the walsender informed meanwhile (no stream yet during a
    // backfill), and /metrics and /healthz, which would otherwise freeze on the last
    // turn's figures and never see this wait turn into a stall.
    sink_->Poll(100);
    OUTBOXD_RETURN_IF_ERROR(SinkHealth());
    if (stream_) OUTBOXD_RETURN_IF_ERROR(SendFeedback(FeedbackRule::Urgency::kWhenDue));
    PublishStats();
    if (stop_->requested()) {
      return absl::CancelledError("stopped while the producer queue was full");
    }
  }
}

void Pipeline::LogSent(const sink::OutgoingMessage& message, const Transaction& tx) {
  std::string_view id;
  for (const sink::Header& h : message.headers) {
    if (h.name == "id") id = h.value;
  }
  spdlog::debug("sent event {} key={} to {} (commit {})", LogExcerpt(id), LogExcerpt(message.key),
                LogSafe(message.topic), tx.lsn_text);
}

void Pipeline::ObservePickup(Transaction& tx) {
  tx.picked_up = true;
  const absl::Time sent = absl::FromUnixMicros(tx.sent_us);
  stats_->metrics.PickedUp(
      std::max(sent - absl::FromUnixMicros(tx.commit_us), absl::ZeroDuration()),
      std::max(clock_() - sent, absl::ZeroDuration()));
}

void Pipeline::AfterProduce() {
  events_in_flight_peak_ = std::max(events_in_flight_peak_, tracker_.events_in_flight());
  bytes_in_flight_peak_ = std::max(bytes_in_flight_peak_, sink_->InFlightBytes());
  if (++produced_ == options_.test_fatal_error_after) {
    spdlog::warn("test: raising a fatal producer error after {} events", produced_);
    sink_->RaiseFatalErrorForTesting("test fatal error (--test-fatal-error-after)");
  }
}

absl::Status Pipeline::DeadLetter(const sink::OutgoingMessage& message, std::string_view payload,
                                  std::string_view headers, const absl::Status& error) {
  outbox::DeadLetter letter{.topic = std::string(message.topic),
                            .headers = std::string(headers),
                            .error = std::string(error.message())};
  letter.payload = payload;
  for (const sink::Header& h : message.headers) {
    if (h.name == "id") letter.id = h.value;
    if (h.name == "aggregate_id") letter.aggregate_id = h.value;  // the key may be another field
    if (h.name == "type") letter.type = h.value;
    if (h.name == "created_at") letter.created_at = h.value;
    if (h.name == "lsn") letter.lsn = h.value;
  }
  // Written before the event counts as handled: the watermark passes a poison event
  // only once it is safely in the table.
  const bool follower = gate_->IsParked(letter.aggregate_id);
  OUTBOXD_RETURN_IF_ERROR(gate_->Store(letter, message.tag));
  tracker_.Ack(message.tag);
  stats_->metrics.DeadLettered();
  // Every value here may come from the row: escaped, so none can forge a log line, and
  // the row's values bounded (a 6.4 kB aggregate id was quoted whole).
  // One error per aggregate that gets parked; the events that follow it there are
  // counted in a summary (LogParkedFollowers): an exchange without a queue for a key
  // once logged a line for each of 100,000 events.
  if (follower) {
    ++followers_unlogged_;
    spdlog::debug("event {} of aggregate {} dead-lettered to {}: {}", LogExcerpt(letter.id),
                  LogExcerpt(letter.aggregate_id), gate_->table_name(), LogSafe(letter.error));
  } else {
    spdlog::error("event {} of aggregate {} dead-lettered to {}: {}", LogExcerpt(letter.id),
                  LogExcerpt(letter.aggregate_id), gate_->table_name(), LogSafe(letter.error));
  }
  return absl::OkStatus();
}

void Pipeline::LogParkedFollowers(bool now) {
  if (followers_unlogged_ == 0) return;
  if (!now && clock_() - followers_logged_at_ < kFollowersLogInterval) return;
  spdlog::error(
      "{} more event(s) dead-lettered to {} behind their aggregates' first dead letter "
      "(each aggregate stays parked until `outboxd dead-letter replay`)",
      followers_unlogged_, gate_->table_name());
  followers_unlogged_ = 0;
  followers_logged_at_ = clock_();
}

void Pipeline::BeginBackfill(pg::Lsn consistent_point) {
  // --dedupe: what the slot's earlier incarnation streamed may be at the broker.
  dedupe_.Begin({.since = 0,
                 .until = consistent_point,
                 .mark = slot_mark_,
                 .max_messages = ReadBackLimit(options_.max_in_flight),
                 .any_lsn = true});
  tracker_.Reset(consistent_point);
  intake_.BeginBackfill(tracker_.Begin(consistent_point, absl::ToUnixMicros(absl::Now())),
                        consistent_point);
}

absl::Status Pipeline::PublishBackfilled(const outbox::OutboxEvent& event) {
  OUTBOXD_RETURN_IF_ERROR(Drain(DrainUntil::kRoomForOne));
  return Publish(event, intake_.transaction());
}

absl::Status Pipeline::EndBackfill(pg::Lsn consistent_point) {
  dedupe_.End();
  tracker_.Commit(consistent_point);
  return Drain(DrainUntil::kNothingInFlight);
}

absl::Status Pipeline::Drain(DrainUntil until) {
  auto more = [&] {
    return until == DrainUntil::kNothingInFlight ? tracker_.events_in_flight() > 0 : InFlightFull();
  };
  while (more()) {
    sink_->Poll(100);
    OUTBOXD_RETURN_IF_ERROR(SinkHealth());
    OUTBOXD_RETURN_IF_ERROR(std::exchange(pending_error_, absl::OkStatus()));
    if (stop_->requested()) return absl::CancelledError("stopped during the backfill");
  }
  return absl::OkStatus();
}

bool Pipeline::InFlightFull() const {
  return tracker_.events_in_flight() >= options_.max_in_flight ||
         sink_->InFlightBytes() >= options_.max_in_flight_bytes;
}

absl::Status Pipeline::SinkHealth() const {
  absl::Status fatal = sink_->Health();
  if (fatal.ok()) return fatal;
  // An idempotent producer that lost its sequence state cannot go on without risking
  // reordering: the session ends and a new producer resumes from the watermark.
  return absl::AbortedError(absl::StrCat("fatal producer error: ", fatal.message()));
}

void Pipeline::OnDelivery(const sink::DeliveryReport& report) {
  if (report.status.ok()) {
    RecordAck(report);  // before Ack(): a complete transaction is forgotten
    tracker_.Ack(report.tag);
    return;
  }
  if (report.status.code() == absl::StatusCode::kAborted ||
      report.status.code() == absl::StatusCode::kCancelled) {
    return;  // a fatal producer error or a purge: the session restarts, nothing is lost
  }
  // With an unlimited message timeout only permanent errors arrive here (message too
  // large for the topic, unknown or forbidden topic). Events of the same aggregate
  // already in flight may still be delivered; from now on they follow it.
  stats_->metrics.PublishFailed();
  sink::OutgoingMessage message{.topic = report.topic,
                                .key = report.key,
                                .value = report.value,
                                .headers = report.headers,
                                .tag = report.tag};
  // The value may be an envelope or protobuf: the letter keeps the payload inside it.
  absl::StatusOr<std::string_view> payload = encoder_.PayloadOf(report.value, report.headers);
  absl::Status stored = DeadLetter(message, payload.value_or(report.value),
                                   encoder_.RowHeadersOf(report.headers), report.status);
  if (!stored.ok()) {
    tracker_.MarkFailed(report.tag);  // holds the watermark; the session ends below
    if (pending_error_.ok()) pending_error_ = stored;
  }
}

void Pipeline::RecordAck(const sink::DeliveryReport& report) {
  const absl::Time now = clock_();
  std::optional<int64_t> commit_us = tracker_.commit_time(report.tag);
  std::optional<double> latency;
  if (commit_us) latency = static_cast<double>(absl::ToUnixMicros(now) - *commit_us) / 1e6;
  stats_->metrics.Acknowledged(report.topic, latency);
  if (report.partition >= 0) {
    spdlog::debug("broker acknowledged {}[{}]@{}", LogSafe(report.topic), report.partition,
                  report.offset);
  } else {
    spdlog::debug("broker acknowledged a message to {}", LogSafe(report.topic));
  }
  stats_->health.Acknowledged(now);
}

absl::Status Pipeline::SendFeedback(FeedbackRule::Urgency urgency) {
  const absl::Time now = clock_();
  const std::optional<FeedbackRule::Report> report = feedback_.Decide(
      {.watermark = tracker_.watermark(), .received = received_, .batched = stream_->batched()},
      now, urgency);
  if (!report) return absl::OkStatus();
  OUTBOXD_RETURN_IF_ERROR(stream_->SendFeedback(report->received, report->flush, report->reply));
  feedback_.Sent(*report, now);
  return absl::OkStatus();
}

void Pipeline::WaitForWork() {
  // Flow control: above an in-flight limit (events or bytes), stop reading the
  // stream but keep serving delivery reports and sending feedback (the walsender
  // must hear from us within wal_sender_timeout whatever the broker does).
  const bool want_stream = !InFlightFull() && !holding();
  absl::Duration timeout = feedback_.UntilDue(tracker_.watermark(), clock_());
  // Held for the standbys: the session reads their position every standby_interval.
  if (holding()) timeout = std::min(timeout, options_.standby_interval);
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
  timeval tv = absl::ToTimeval(std::clamp(timeout, absl::ZeroDuration(), absl::Seconds(1)));
  select(max_fd + 1, &readable, &writable, nullptr, &tv);
}

void Pipeline::IdleFor(absl::Duration duration) {
  const absl::Time until = absl::Now() + duration;
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

void Pipeline::EndSession() {
  stats_->streaming = false;
  stream_.reset();
  pending_error_ = absl::OkStatus();
  AwaitLastReports();
  DropSinkBacklog();
  LogParkedFollowers(/*now=*/true);
  intake_.LogRejections(TransactionIntake::LogNow::kNow);
  tracker_.Reset(tracker_.watermark());
  dedupe_.End();
  hold_.Clear();  // streamed again from the confirmed position
  intake_.EndSession();
  PublishStats();
}

void Pipeline::AwaitLastReports() {
  // A producer with a fatal error acknowledges nothing more: no point waiting.
  if (!sink_->Health().ok()) return;
  const absl::Time deadline = absl::Now() + kEndSessionGrace;
  absl::Time last_report = absl::Now();
  while (sink_->InFlight() > 0 && !tracker_.has_failed() && !stop_->requested()) {
    const absl::Time now = absl::Now();
    if (now >= deadline || now - last_report >= kReportGap) return;
    if (sink_->Poll(50) > 0) last_report = absl::Now();
  }
}

void Pipeline::DropSinkBacklog() {
  // A sink with a fatal error delivers nothing more; the relay replaces it (Relay::Run).
  if (sink_->InFlight() == 0 || !sink_->Health().ok()) return;
  absl::StatusOr<int> dropped = RecreateSink();
  if (!dropped.ok()) {
    spdlog::warn(
        "the producer keeps {} messages of the ended session (a new one could not be "
        "made: {}); another relay taking the slot may receive them twice",
        sink_->InFlight(), dropped.status());
    return;
  }
  spdlog::info(
      "dropped {} messages of the ended session the broker had not acknowledged; the "
      "next session sends them again",
      *dropped);
}

absl::Status Pipeline::Shutdown() {
  dedupe_.End();  // its summary, when the stop comes inside a resumed window
  spdlog::info("stopping: waiting up to {} for {} in-flight events",
               absl::FormatDuration(options_.shutdown_timeout), tracker_.events_in_flight());
  const absl::Time deadline = absl::Now() + options_.shutdown_timeout;
  while (tracker_.events_in_flight() > 0 && !tracker_.has_failed() && absl::Now() < deadline) {
    sink_->Poll(50);
    OUTBOXD_RETURN_IF_ERROR(SendFeedback(FeedbackRule::Urgency::kWhenDue));
  }
  OUTBOXD_RETURN_IF_ERROR(SendFeedback(FeedbackRule::Urgency::kNow));
  LogParkedFollowers(/*now=*/true);
  intake_.LogRejections(TransactionIntake::LogNow::kNow);
  PublishStats();
  // Held for the standbys: never sent, and streamed again from the confirmed position.
  stats_->events_abandoned = tracker_.events_in_flight() + hold_.events();
  spdlog::info(
      "confirmed {}; {} events still unacknowledged ({} held for the standbys) will be "
      "sent again on restart",
      pg::FormatLsn(tracker_.watermark()), stats_->events_abandoned.load(), hold_.events());
  spdlog::info("in flight at most {} events, {} bytes (limits {}, {})", events_in_flight_peak_,
               bytes_in_flight_peak_, options_.max_in_flight, options_.max_in_flight_bytes);
  stats_->streaming = false;
  return stream_->End();
}

void Pipeline::CloseSink() {
  if (!sink_) return;
  // The shutdown's wait was the whole budget: no second flush in the producer's
  // destructor, which added its own 5 s to every stop with the brokers down.
  const int dropped = sink_->Close(absl::ZeroDuration());
  if (stats_->events_abandoned == 0) stats_->events_abandoned = dropped;
  sink_.reset();
}

void Pipeline::PublishStats() {
  stats_->confirmed_lsn = tracker_.watermark();
  std::optional<int64_t> oldest = tracker_.oldest_unacked_commit_time();
  // A transaction held for the standbys waits too: the stall alert and /healthz see it.
  if (!oldest && hold_.commit_time_pg_us() != 0) {
    oldest = hold_.commit_time_pg_us() + kPgEpochOffsetUs;
  }
  if (stuck_commit_us_) oldest = std::min(oldest.value_or(*stuck_commit_us_), *stuck_commit_us_);
  const uint64_t waiting = std::max<uint64_t>(tracker_.events_in_flight() + hold_.events(),
                                              stuck_commit_us_ ? 1 : 0);
  observe::Metrics& m = stats_->metrics;
  m.SetConnected(stats_->streaming);
  m.SetReceivedLsn(received_);
  m.SetConfirmedLsn(tracker_.watermark());
  m.SetInFlight(waiting);
  m.SetOldestUnacked(oldest ? std::optional(absl::FromUnixMicros(*oldest)) : std::nullopt);
  stats_->health.SetConnected(stats_->streaming);
  stats_->health.SetInFlight(waiting, clock_());
}

}  // namespace outboxd::relay
