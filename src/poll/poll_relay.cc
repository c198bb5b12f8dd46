// The polling loop. Everything runs on the caller's thread: delivery reports are
// served by Publisher::Poll() while a batch waits for them, and the sleep between
// empty batches is a select() on the stop signal and, with --notify, the PostgreSQL
// socket.
#include "poll/poll_relay.h"

#include <libpq-fe.h>
#include <sys/select.h>

#include <algorithm>
#include <utility>

#include "absl/algorithm/container.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/log.h"
#include "base/log_escape.h"
#include "base/status_macros.h"
#include "outbox/broker_message.h"
#include "outbox/message_format.h"
#include "outbox/names.h"
#include "pg/identifier.h"
#include "pg/table_name.h"
#include "poll/internal/outbox_queries.h"
#include "poll/notify_trigger.h"

namespace outboxd::poll {
namespace {

// Pause after a failed batch before trying again on a new connection (the seed
// article's relay waits 2 s too): long enough not to hammer a restarting server.
constexpr absl::Duration kRetryDelay = absl::Seconds(2);
// librdkafka scans for timed-out messages about once a second, so the report of a
// message that hit message.timeout.ms (= publish_timeout) can come up to ~1 s later.
constexpr absl::Duration kReportGrace = absl::Seconds(2);
// Longest single Poll() while waiting, so the deadline is checked regularly.
constexpr absl::Duration kPollSlice = absl::Milliseconds(100);
// How often the oldest pending row's age is read for /metrics.
constexpr absl::Duration kOldestSampleInterval = absl::Seconds(5);
// --dedupe: a row's created-at is the server's clock, its message's timestamp the
// producing relay's; this much apart is allowed (more costs a duplicate, never a loss).
constexpr int64_t kClockMarginMs = 5000;
// --dedupe: messages read back per partition at most, this table's and others'. An
// interrupted batch's messages are among the newest unless the topic is busy with
// others'; past the limit its rows are sent again (window_too_large, counted).
constexpr int64_t kReadBackLimit = 100000;

int ToPollMs(absl::Duration d) {
  return static_cast<int>(
      absl::ToInt64Milliseconds(std::clamp(d, absl::ZeroDuration(), kPollSlice)));
}

}  // namespace

PollRelay::PollRelay(PollOptions options, PollStats* stats)
    : options_(std::move(options)),
      stats_(stats),
      encoder_(options_.format) {}

PollRelay::~PollRelay() {
  // First: the sink's closing flush may still hand reports to OnDelivery, which
  // reads batch_, a member destroyed before sink_ would be.
  sink_.reset();
}

absl::Status PollRelay::Start() {
  if (options_.batch < 1) return absl::InvalidArgumentError("--batch must be at least 1");
  OUTBOXD_RETURN_IF_ERROR(CheckNames());
  if (options_.publish_timeout < absl::Milliseconds(1)) {
    // message.timeout.ms=0 would mean "never": a batch must end.
    return absl::InvalidArgumentError("--publish-timeout must be at least 1ms");
  }
  if (!conn_) OUTBOXD_RETURN_IF_ERROR(Connect());
  if (!sink_) OUTBOXD_RETURN_IF_ERROR(CreateSink());
  return absl::OkStatus();
}

absl::Status PollRelay::CheckNames() const {
  OUTBOXD_RETURN_IF_ERROR(outbox::CheckNames(options_.table, options_.columns));
  if (!options_.notify) return absl::OkStatus();
  return pg::CheckIdentifier(options_.channel, "--notify-channel");
}

absl::Status PollRelay::Connect() {
  OUTBOXD_ASSIGN_OR_RETURN(topic_, outbox::TopicTemplate::Parse(options_.topic_template));
  OUTBOXD_ASSIGN_OR_RETURN(pg::Connection conn, pg::Connection::Open(options_.conninfo));
  OUTBOXD_ASSIGN_OR_RETURN(const pg::TableName table, pg::TableName::Parse(options_.table));
  OUTBOXD_RETURN_IF_ERROR(
      internal::CheckTable(conn, table, options_.columns, options_.poll_columns));
  table_name_ = table.name;
  OUTBOXD_ASSIGN_OR_RETURN(
      internal::OutboxQueries queries,
      internal::BuildQueries(conn, table, options_.columns, options_.poll_columns));
  queries_ = std::make_unique<const internal::OutboxQueries>(std::move(queries));
  OUTBOXD_ASSIGN_OR_RETURN(std::string created_at,
                           conn.QuoteIdentifier(options_.columns.created_at));
  OUTBOXD_ASSIGN_OR_RETURN(std::string published_at,
                           conn.QuoteIdentifier(options_.poll_columns.published_at));
  OUTBOXD_ASSIGN_OR_RETURN(std::string seq, conn.QuoteIdentifier(options_.poll_columns.seq));
  // Along the pending-rows index (seq order): one probe however large the backlog.
  oldest_pending_query_ =
      absl::StrCat("SELECT extract(epoch FROM now() - ", created_at, ")::float8 FROM ",
                   table.quoted, " WHERE ", published_at, " IS NULL ORDER BY ", seq, " LIMIT 1");
  if (options_.notify) {
    OUTBOXD_ASSIGN_OR_RETURN(std::string channel, conn.QuoteIdentifier(options_.channel));
    OUTBOXD_RETURN_IF_ERROR(conn.Exec(absl::StrCat("LISTEN ", channel)).status());
    OUTBOXD_ASSIGN_OR_RETURN(bool has_trigger, HasNotifyTrigger(conn, options_.table));
    if (!has_trigger) {
      spdlog::warn(
          "--notify: table {} has no {} trigger, so wake-ups come only from your own NOTIFY {}; "
          "add --install-notify-trigger to create it",
          options_.table, kNotifyTriggerName, options_.channel);
    }
  }
  if (options_.dedupe) {
    // The table as the server names it, so that pollers configured with "outbox" and
    // "public.outbox" recognise each other's messages.
    OUTBOXD_ASSIGN_OR_RETURN(
        pg::Result names,
        conn.ExecParams("SELECT current_database(), n.nspname, c.relname FROM pg_class c JOIN "
                        "pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass($1)",
                        {table.quoted}));
    if (names.rows() == 1) {
      mark_ = outbox::SlotMark(names.Get(0, 0), absl::StrCat("poll:", std::string(names.Get(0, 1)),
                                                             ".", std::string(names.Get(0, 2))));
      encoder_.SetSlotMark(mark_);
    }
  }
  spdlog::info("connected to PostgreSQL at {} as {}", conn.endpoint(), conn.user());
  conn_ = std::move(conn);
  return absl::OkStatus();
}

absl::Status PollRelay::CreateSink() {
  // Unlike the CDC relay (unlimited, an outage only delays), a poll attempt must end:
  // the sink itself fails a message at publish_timeout, so a failed attempt leaves
  // nothing queued that could still reach the broker later and duplicate the retry.
  OUTBOXD_ASSIGN_OR_RETURN(
      sink_, options_.make_sink({.on_delivery = [this](const sink::DeliveryReport& r) { OnDelivery(r); },
                                 .delivery_timeout = options_.publish_timeout}));
  return absl::OkStatus();
}

absl::StatusOr<int> PollRelay::RunOnce() {
  OUTBOXD_RETURN_IF_ERROR(Start());
  absl::Status status = conn_->Exec("BEGIN").status();
  absl::StatusOr<int> reserved = status.ok() ? ReserveAndPublish() : status;
  if (reserved.ok()) status = RecordOutcomes();
  if (!reserved.ok() || !status.ok()) {
    // Best effort: on a lost connection the server has rolled back already.
    (void)conn_->Exec("ROLLBACK");
    stats_->healthy = false;
    stats_->metrics.SetConnected(false);
    stats_->health.SetConnected(false);
    return reserved.ok() ? status : reserved.status();
  }
  stats_->batches++;
  stats_->healthy = true;
  stats_->metrics.BatchDone();
  stats_->metrics.SetConnected(true);
  stats_->health.SetConnected(true);
  SampleOldestPending();
  return reserved;
}

absl::StatusOr<int> PollRelay::ReserveAndPublish() {
  OUTBOXD_ASSIGN_OR_RETURN(pg::Result rows,
                           conn_->ExecParams(queries_->reserve, {absl::StrCat(options_.batch)}));
  batch_.assign(rows.rows(), Pending{});
  first_tag_ = next_tag_;
  next_tag_ += rows.rows();
  unreported_ = 0;
  const absl::Time deadline = absl::Now() + options_.publish_timeout + kReportGrace;
  FindInterrupted(rows);
  for (int row = 0; row < rows.rows(); ++row) {
    OUTBOXD_RETURN_IF_ERROR(ProduceRow(rows, row, deadline));
  }
  PublishInFlight(unreported_);
  AwaitReports(deadline);
  PublishInFlight(0);  // what is left unreported has timed out: a failed attempt
  return rows.rows();
}

absl::Status PollRelay::ProduceRow(const pg::Result& rows, int row, absl::Time deadline) {
  using internal::ReservedColumn;
  Pending& pending = batch_[row];
  if (!absl::SimpleAtoi(std::string(rows.Get(row, ReservedColumn::kSeq)), &pending.seq)) {
    return absl::InternalError(absl::StrCat(
        "outbox seq \"", std::string(rows.Get(row, ReservedColumn::kSeq)), "\" is not an integer"));
  }
  pending.id = rows.Get(row, ReservedColumn::kId);
  const std::string_view type = rows.Get(row, ReservedColumn::kType);
  // The CDC relay's contract minus the lsn header: a polled row has no commit LSN
  // of its own, and a made-up one would mislead consumers that compare them.
  const outbox::BrokerMessage built = outbox::BuildBrokerMessage(
      encoder_,
      {.id = pending.id,
       .aggregate_id = rows.Get(row, ReservedColumn::kAggregateId),
       .type = type,
       .payload = rows.Get(row, ReservedColumn::kPayload),
       .created_at = rows.Get(row, ReservedColumn::kCreatedAt),
       .headers = rows.Get(row, ReservedColumn::kHeaders)},
      /*lsn=*/"", topic_.Render(type, table_name_, topic_buffer_), first_tag_ + row);
  absl::Time created;
  std::string ignored;
  if (absl::ParseTime("%Y-%m-%dT%H:%M:%E*S%Ez", std::string(encoder_.created_at()), &created,
                      &ignored)) {
    pending.created_at = created;
  }
  if (!built.encoded.ok()) {
    // A poison payload (or one without its --key-pointer field) is a failed attempt
    // like any other.
    pending.outcome = built.encoded;
    return absl::OkStatus();
  }
  dropped_headers_.Report(pending.id, encoder_.dropped(), absl::Now);
  const sink::OutgoingMessage& message = built.message;
  if (!rows.IsNull(row, ReservedColumn::kInterrupted)) {
    OUTBOXD_ASSIGN_OR_RETURN(const bool held, AlreadyPublished(message, pending.id));
    if (held) {  // published by the interrupted batch: only its mark is missing
      pending.outcome = absl::OkStatus();
      stats_->metrics.DedupeSkipped();
      return absl::OkStatus();
    }
  }
  absl::Status status = sink_->Produce(message);
  while (status.code() == absl::StatusCode::kResourceExhausted && absl::Now() < deadline) {
    sink_->Poll(ToPollMs(deadline - absl::Now()));  // make room in librdkafka's queue
    status = sink_->Produce(message);
  }
  if (status.ok()) {
    ++unreported_;
  } else {
    pending.outcome = status;  // e.g. an invalid topic name: fails this event only
  }
  return absl::OkStatus();
}

void PollRelay::FindInterrupted(const pg::Result& rows) {
  std::optional<int64_t> earliest;
  for (int row = 0; row < rows.rows(); ++row) {
    if (rows.IsNull(row, internal::ReservedColumn::kInterrupted)) continue;
    int64_t created_ms = 0;
    (void)absl::SimpleAtoi(std::string(rows.Get(row, internal::ReservedColumn::kInterrupted)),
                           &created_ms);
    earliest = std::min(earliest.value_or(created_ms), created_ms);
  }
  if (!earliest) return;
  // What an earlier batch read back is no answer now: this poller (or another) has
  // sent more since.
  ++held_window_;
  not_before_ms_ = *earliest > 0 ? *earliest - kClockMarginMs : 0;
  reported_topics_.clear();
}

absl::StatusOr<bool> PollRelay::AlreadyPublished(const sink::OutgoingMessage& message,
                                                 std::string_view id) {
  if (mark_.empty() || unreadable_) return false;
  absl::StatusOr<sink::HeldAnswer> answer =
      sink_->Held({.topic = message.topic,
                   .id = id,
                   .key = message.key,
                   .any_lsn = true,  // a polled message has no lsn header
                   .mark = {.name = outbox::kSlotHeader, .value = mark_},
                   .not_before_ms = not_before_ms_,
                   .window = held_window_,
                   .max_messages = kReadBackLimit});
  if (absl::IsUnimplemented(answer.status())) {
    spdlog::info("--dedupe: {}; rows an interrupted batch held are sent again (at least once)",
                 answer.status().message());
    unreadable_ = true;
    return false;
  }
  if (!answer.ok()) return answer.status();
  ReportFallbacks(message.topic, *answer);
  return answer->held;
}

void PollRelay::ReportFallbacks(std::string_view topic, const sink::HeldAnswer& answer) {
  if (answer.fallbacks.empty() || absl::c_linear_search(reported_topics_, topic)) return;
  reported_topics_.emplace_back(topic);
  for (const auto& [reason, detail] : answer.fallbacks) {
    stats_->metrics.DedupeFellBack(reason);
    spdlog::warn(
        "--dedupe: topic {} could not be read back whole ({}: {}); rows an interrupted batch "
        "held may be sent again",
        EscapeForLog(topic), reason, EscapeForLog(detail));
  }
}

void PollRelay::AwaitReports(absl::Time deadline) {
  // The batch is all there is: send it now rather than after linger.ms.
  if (unreported_ > 0) sink_->SendNow();
  while (unreported_ > 0 && absl::Now() < deadline) {
    sink_->Poll(ToPollMs(deadline - absl::Now()));
    if (!sink_->Health().ok()) return;  // no report will come any more
  }
}

void PollRelay::OnDelivery(const sink::DeliveryReport& report) {
  // A message of an earlier batch, reported after that batch gave up on it: its row
  // was counted as failed and will be sent again (a duplicate the id header reveals).
  if (report.tag < first_tag_ || report.tag >= first_tag_ + batch_.size()) return;
  Pending& pending = batch_[report.tag - first_tag_];
  if (pending.outcome) return;
  pending.outcome = report.status;
  --unreported_;
  if (report.status.ok()) {
    const absl::Time now = absl::Now();
    std::optional<double> latency;
    if (pending.created_at) latency = absl::ToDoubleSeconds(now - *pending.created_at);
    stats_->metrics.Acknowledged(report.topic, latency);
    stats_->health.Acknowledged(now);
    failures_since_ack_ = 0;
    stats_->health.SetFailedAttempts(0, now);
  }
  PublishInFlight(unreported_);
}

void PollRelay::PublishInFlight(int in_flight) {
  const uint64_t events = static_cast<uint64_t>(std::max(in_flight, 0));
  stats_->metrics.SetInFlight(events);
  stats_->health.SetInFlight(events, absl::Now());
}

void PollRelay::SampleOldestPending() {
  const absl::Time now = absl::Now();
  if (now - oldest_sampled_ < kOldestSampleInterval) return;
  oldest_sampled_ = now;
  absl::StatusOr<pg::Result> r = conn_->Exec(oldest_pending_query_);
  double age = 0;
  if (!r.ok()) {
    spdlog::warn("reading the oldest pending event's age for /metrics: {}", r.status());
    return;
  }
  if (r->rows() == 1 && !r->IsNull(0, 0)) {
    (void)absl::SimpleAtod(std::string(r->Get(0, 0)), &age);
  }
  stats_->metrics.SetOldestUnackedAge(absl::Seconds(age));
}

absl::Status PollRelay::RecordOutcomes() {
  std::vector<int64_t> acked;
  for (const Pending& pending : batch_) {
    if (pending.outcome && pending.outcome->ok()) acked.push_back(pending.seq);
  }
  if (!acked.empty()) {
    OUTBOXD_RETURN_IF_ERROR(conn_
                                ->ExecParams(queries_->mark_published,
                                             {absl::StrCat("{", absl::StrJoin(acked, ","), "}")})
                                .status());
  }
  const std::string timed_out = absl::StrCat("not acknowledged by the broker within ",
                                             absl::FormatDuration(options_.publish_timeout));
  for (const Pending& pending : batch_) {
    if (pending.outcome && pending.outcome->ok()) continue;
    std::string error = pending.outcome ? std::string(pending.outcome->message()) : timed_out;
    OUTBOXD_RETURN_IF_ERROR(
        conn_->ExecParams(queries_->mark_failed, {absl::StrCat(pending.seq), error}).status());
  }
  OUTBOXD_RETURN_IF_ERROR(conn_->Exec("COMMIT").status());
  CountAndLog(acked.size());
  if (absl::Status fatal = sink_->Health(); !fatal.ok()) {
    // The idempotent producer cannot go on; a new one starts with the next batch.
    spdlog::error("{}; recreating the broker sink", fatal);
    sink_.reset();
  }
  return absl::OkStatus();
}

void PollRelay::CountAndLog(size_t published) {
  stats_->events_published += published;
  for (const Pending& pending : batch_) {
    if (pending.outcome && pending.outcome->ok()) continue;
    stats_->events_failed++;
    stats_->metrics.PublishFailed();
    // Every cause counts, a poison payload too: nothing else acknowledged since means
    // nothing is getting through, whatever the reason (docs/operations.md, "Metrics and alerts").
    failures_since_ack_++;
    // The id and the reason (a bad topic name, say) come from the row: escaped.
    spdlog::warn("event {} (seq {}) not published, retried after backoff: {}",
                 LogExcerpt(pending.id), pending.seq,
                 LogSafe(pending.outcome ? std::string(pending.outcome->message())
                                         : std::string("no delivery report")));
  }
  stats_->health.SetFailedAttempts(failures_since_ack_, absl::Now());
  PublishInFlight(0);
}

absl::Status PollRelay::Run(StopSignal* stop) {
  OUTBOXD_RETURN_IF_ERROR(Start());
  spdlog::info("polling table {} (batch {}, interval {}{})", options_.table, options_.batch,
               absl::FormatDuration(options_.interval),
               options_.notify ? absl::StrCat(", woken by NOTIFY on ", options_.channel) : "");
  while (!stop->requested()) {
    absl::StatusOr<int> reserved = RunOnce();
    if (reserved.ok()) {
      if (*reserved == 0) {
        Sleep(options_.interval, stop, options_.notify ? Wake::kOnStopOrNotify : Wake::kOnStop);
      }
      continue;
    }
    if (IsConfigurationError(reserved.status())) return reserved.status();
    spdlog::warn("batch failed, retrying in {} on a new connection: {}",
                 absl::FormatDuration(kRetryDelay), reserved.status());
    conn_.reset();  // reconnects (and LISTENs again) in the next RunOnce
    stats_->metrics.Reconnected();
    Sleep(kRetryDelay, stop, Wake::kOnStop);
  }
  return absl::OkStatus();
}

void PollRelay::Sleep(absl::Duration timeout, StopSignal* stop, Wake wake) {
  const bool wake_on_notify = wake == Wake::kOnStopOrNotify;
  // A NOTIFY delivered with the last COMMIT is already queued in libpq: the socket
  // will not become readable for it, so look before sleeping.
  if (wake_on_notify && DrainNotifications()) return;
  fd_set readable;
  FD_ZERO(&readable);
  FD_SET(stop->fd(), &readable);
  int max_fd = stop->fd();
  if (wake_on_notify) {
    FD_SET(conn_->socket(), &readable);
    max_fd = std::max(max_fd, conn_->socket());
  }
  timeval tv = absl::ToTimeval(timeout);
  select(max_fd + 1, &readable, nullptr, nullptr, &tv);
  if (wake_on_notify) DrainNotifications();
}

bool PollRelay::DrainNotifications() {
  // A failed read means a lost connection: wake up so the next batch finds out.
  if (PQconsumeInput(conn_->get()) == 0) return true;
  bool any = false;
  while (PGnotify* notification = PQnotifies(conn_->get())) {
    PQfreemem(notification);
    any = true;
  }
  return any;
}

}  // namespace outboxd::poll
