// Consumer: the inbox transaction and the retry policy; the broker side is an
// internal::Source (internal/kafka_source.cc, internal/amqp_source.cc,
// internal/nats_source.cc), which settles
// a message only when told to, after the database COMMIT.
#include "inbox/consumer.h"

#include <libpq-fe.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/log.h"
#include "base/log_escape.h"
#include "inbox/internal/source.h"

namespace outboxd::inbox {

std::string_view ResultName(Delivery::Result result) {
  switch (result) {
    case Delivery::Result::kProcessed:
      return "processed";
    case Delivery::Result::kDuplicate:
      return "duplicate";
    default:
      return "failed";
  }
}

absl::StatusOr<std::unique_ptr<Consumer>> Consumer::Create(pg::Connection conn,
                                                           ConsumerOptions options,
                                                           Handler handler) {
  const bool amqp = !options.amqp_url.empty();
  const bool nats = !options.nats_url.empty();
  if ((!amqp && !nats && options.brokers.empty()) || options.group_id.empty() ||
      options.topics.empty() || !handler) {
    return absl::InvalidArgumentError(
        "inbox consumer needs brokers (or an AMQP or NATS URL), a group id, topics and a handler");
  }
  if (amqp && nats) {
    return absl::InvalidArgumentError("inbox consumer takes an AMQP URL or a NATS URL, not both");
  }
  absl::StatusOr<std::unique_ptr<internal::Source>> source =
      amqp   ? internal::MakeAmqpSource(options)
      : nats ? internal::MakeNatsSource(options)
             : internal::MakeKafkaSource(options);
  if (!source.ok()) return source.status();
  return std::unique_ptr<Consumer>(
      new Consumer(std::move(conn), std::move(options), std::move(handler), std::move(*source)));
}

Consumer::Consumer(pg::Connection conn, ConsumerOptions options, Handler handler,
                   std::unique_ptr<internal::Source> source)
    : conn_(std::move(conn)),
      options_(std::move(options)),
      handler_(std::move(handler)),
      source_(std::move(source)),
      detect_inbox_key_(options_.inbox.key == InboxKey::kDetect),
      backoff_(options_.initial_backoff, options_.max_backoff, Backoff::Jitter::kNone) {}

Consumer::~Consumer() { Close(); }

void Consumer::Close() {
  if (closed_) return;
  closed_ = true;
  source_->Close();
}

absl::StatusOr<std::optional<Delivery>> Consumer::PollOnce(absl::Duration timeout) {
  if (closed_) return absl::FailedPreconditionError("inbox consumer is closed");
  const absl::Time now = absl::Now();
  if (now < resume_at_) {  // backing off after a failure: the retry waits
    absl::SleepFor(std::min(resume_at_ - now, timeout));
    if (absl::Now() < resume_at_) return std::nullopt;
    timeout = absl::ZeroDuration();
  }
  absl::StatusOr<std::optional<internal::Received>> received = source_->Next(timeout);
  if (!received.ok()) return received.status();
  if (!*received) return std::nullopt;
  return Handle(**received);
}

absl::StatusOr<std::optional<Delivery>> Consumer::Handle(const internal::Received& received) {
  Delivery delivery{.message = received.message};
  if (!IsUuid(delivery.message.id)) {
    source_->Redeliver(received);
    return absl::FailedPreconditionError(
        absl::StrCat("message ", source_->Where(delivery.message), " has ",
                     delivery.message.id.empty()
                         ? absl::StrCat("no \"", options_.id_header, "\" header")
                         : absl::StrCat("a \"", options_.id_header, "\" header that is not a UUID"),
                     ", so it cannot be deduplicated; ", source_->SkipAdvice()));
  }
  // libpq does not reconnect on its own; the retry after a lost connection does.
  if (PQstatus(conn_.get()) == CONNECTION_BAD) PQreset(conn_.get());
  delivery.attempt = backoff_.attempts() + 1;
  LearnInboxKey();
  absl::StatusOr<Outcome> outcome = Process(conn_, delivery.message, handler_, options_.inbox);
  if (!outcome.ok()) {
    // Looked up again before the retry: an inbox moved to a partitioned one under a
    // running consumer then costs one failed attempt, not a consumer stuck on it.
    if (detect_inbox_key_) options_.inbox.key = InboxKey::kDetect;
    return Failed(received, std::move(delivery), outcome.status());
  }
  backoff_.Reset();
  delivery.result =
      *outcome == Outcome::kProcessed ? Delivery::Result::kProcessed : Delivery::Result::kDuplicate;
  delivery.offset_commit = source_->Settle(received);
  if (!delivery.offset_commit.ok()) {
    spdlog::warn("{} {}: {} (it will be redelivered and skipped as a duplicate)",
                 ResultName(delivery.result), source_->Where(delivery.message),
                 delivery.offset_commit);
  }
  return delivery;
}

void Consumer::LearnInboxKey() {
  if (options_.inbox.key != InboxKey::kDetect) return;
  // On an error Process looks the key up itself (and meets the same error).
  if (absl::StatusOr<InboxKey> key = DetectKey(conn_, options_.inbox); key.ok()) {
    options_.inbox.key = *key;
  }
}

std::optional<Delivery> Consumer::Failed(const internal::Received& received, Delivery delivery,
                                         absl::Status error) {
  source_->Redeliver(received);
  const absl::Duration backoff = backoff_.Next();
  resume_at_ = absl::Now() + backoff;
  spdlog::warn("message {} (id {}) failed, attempt {}, retrying in {}: {}",
               source_->Where(delivery.message), LogExcerpt(delivery.message.id), delivery.attempt,
               absl::FormatDuration(backoff), LogSafe(error.message()));
  delivery.result = Delivery::Result::kFailed;
  delivery.error = std::move(error);
  return delivery;
}

}  // namespace outboxd::inbox
