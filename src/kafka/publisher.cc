// Publisher over librdkafka's C API. Every librdkafka handle is owned by a unique_ptr
// from the line that creates it; the wake pipe outlives the producer because the
// producer's threads write to it until rd_kafka_destroy() returns.
#include "kafka/publisher.h"

#include <fcntl.h>
#include <librdkafka/rdkafka.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "base/log.h"
#include "base/log_escape.h"
#include "base/status_macros.h"
#include "kafka/internal/rdkafka_util.h"
#include "kafka/rdkafka_client.h"
#include "kafka/read_back.h"

namespace outboxd::kafka {
namespace {

using internal::OneLine;

// The tag travels as librdkafka's per-message opaque pointer, so no allocation per
// message; that needs a pointer wide enough for every uint64_t.
static_assert(sizeof(void*) >= sizeof(uint64_t), "tags travel in a void*");

using ConfPtr = std::unique_ptr<rd_kafka_conf_t, decltype(&rd_kafka_conf_destroy)>;
using HandlePtr = std::unique_ptr<rd_kafka_t, decltype(&rd_kafka_destroy)>;
using QueuePtr = std::unique_ptr<rd_kafka_queue_t, decltype(&rd_kafka_queue_destroy)>;
using TopicPtr = std::unique_ptr<rd_kafka_topic_t, decltype(&rd_kafka_topic_destroy)>;
using HeadersPtr = std::unique_ptr<rd_kafka_headers_t, decltype(&rd_kafka_headers_destroy)>;

// Our defaults; user properties are applied after these and win.
//   enable.idempotence/acks: no duplicates or reordering from producer retries, and an
//     ack means every in-sync replica has the event (at least once, per-aggregate order).
//   message.timeout.ms=0: never give up on a message; an outage must delay delivery,
//     never fail it (docs/architecture.md trap "librdkafka message timeout").
//   linger.ms=5: batches backlogs. Measured through outboxd run on outboxd-mock-broker
//     (TCP_NODELAY, one partition, 2-core box), linger.ms 1 against 0: draining a
//     60,000-event backlog 15,000-27,000 events/s at 7-20 us CPU per event against
//     8,700-9,000 events/s at 51-54 us (0.25 and 0.5 ms sat in between). 5 against 1:
//     a 100,000-transaction backlog over 12 partitions and 3 brokers, keys over 1,000
//     aggregates (scripts/bench --only-cpu --cpu-runs 3, load 3): 4.6-6.5 against
//     6.2-8.0 us CPU per event, drained in 1.2-1.4 against 1.8-2.0 s; one partition
//     3.7-4.4 against 4.5-5.4 us. At 1 ms a catch-up left as one produce request per
//     partition per millisecond (strace: 7,001 sendmsg for 100k events). Live traffic
//     does not wait it out: the relay asks for SendNow() after each live read, which
//     suspends the linger on the sender thread for the whole linger (SendNowWindow).
//   socket.nagle.disable: with pipelined produce requests Nagle + delayed ACK can hold
//     a small request back for ~40 ms.
//   reconnect.backoff.max.ms=1000: after an outage reconnect within a second instead
//     of the default 10 s backoff ceiling.
//   queue.buffering.max.messages: 10x the default, so the relay's own flow control
//     (not librdkafka's queue) decides how much is in flight; the byte limit stays
//     at librdkafka's 1 GiB default.
//   partitioner=murmur2_random: the Java client's default partitioner, so a key lands
//     on the same partition whichever producer wrote it (e.g. when migrating from
//     Debezium's outbox router, or alongside Java producers); per-key order survives
//     a switch-over. Same key -> same partition either way.
constexpr std::pair<const char*, const char*> kDefaults[] = {
    {"client.id", "outboxd"},
    {"enable.idempotence", "true"},
    {"acks", "all"},
    {"message.timeout.ms", "0"},
    {"linger.ms", "5"},
    {"socket.nagle.disable", "true"},
    {"reconnect.backoff.max.ms", "1000"},
    {"queue.buffering.max.messages", "1000000"},
    {"partitioner", "murmur2_random"},
};

// SendNowWindow's bounds. At least 1 ms, as the relay's blocking live flush had (issue
// 17 point 2: acknowledged within 1 ms of the commit 15 % -> 54 % at 1,000 events/s);
// at most 50 ms, so a user's long linger does not keep the sender flushing (and
// waking every broker thread each millisecond) through a broker outage.
constexpr absl::Duration kMinSendNowWindow = absl::Milliseconds(1);
constexpr absl::Duration kMaxSendNowWindow = absl::Milliseconds(50);

// Debian's abseil is built with its own absl::string_view (not std::string_view).
absl::string_view AsAbsl(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// librdkafka's messages are one line already; make sure, since users see them as is.

int ToTimeoutMs(absl::Duration timeout) {
  if (timeout == absl::InfiniteDuration()) return -1;
  if (timeout <= absl::ZeroDuration()) return 0;
  const int64_t ms = absl::ToInt64Milliseconds(absl::Ceil(timeout, absl::Milliseconds(1)));
  return static_cast<int>(std::min<int64_t>(ms, std::numeric_limits<int>::max()));
}

// Kafka's own rule (kafka.common.internals.Topic): 1..249 of [a-zA-Z0-9._-], not "."
// or "..". Checked here because the mock broker accepts any name while a real broker
// fails the message later; we want the same immediate answer from both.
absl::Status ValidateTopicName(std::string_view topic) {
  if (topic.empty() || topic.size() > 249 || topic == "." || topic == "..") {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid Kafka topic name \"", OneLine(AsAbsl(topic)),
                     "\": must be 1..249 characters and not \".\" or \"..\""));
  }
  for (char c : topic) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) {
      return absl::InvalidArgumentError(
          absl::StrCat("invalid Kafka topic name \"", OneLine(AsAbsl(topic)),
                       "\": only letters, digits, '.', '_' and '-' are allowed"));
    }
  }
  return absl::OkStatus();
}

// A delivery report's error (internal::ErrorStatus): Aborted means recreate the
// producer and resume from the confirmed position, InvalidArgument dead-letter the
// message, Cancelled purged at shutdown; a code it does not name is Unavailable.
absl::Status DeliveryStatus(rd_kafka_resp_err_t err, absl::string_view topic) {
  if (err == RD_KAFKA_RESP_ERR_NO_ERROR) return absl::OkStatus();
  return internal::ErrorStatus(
      err,
      absl::StrCat("Kafka delivery to topic \"", topic, "\" failed: ", rd_kafka_err2str(err), " (",
                   rd_kafka_err2name(err), ")"),
      absl::StatusCode::kUnavailable);
}

// Publisher::SendNow's thread. librdkafka waits out linger.ms unless the application is
// inside rd_kafka_flush(), which sets the producer's "flushing" state and wakes the
// broker threads (librdkafka 2.0 rd_kafka_flush and producer_serve). That call blocks
// until every message is acknowledged; made on the relay's thread it held a message
// that arrived meanwhile for up to an acknowledgement's round trip (issue 17 point 2).
// So the call is made here, in slices of 1 ms for as long as a request asks, while the
// caller goes on reading and serving its delivery reports. With delivery reports as
// events (RD_KAFKA_EVENT_DR) rd_kafka_flush only waits for the count of unreported
// messages to reach zero and never serves a report itself, so the reports still reach
// the handler only on the thread calling Poll(), as the sink contract says.
class Sender {
 public:
  explicit Sender(rd_kafka_t* rk) : rk_(rk), thread_([this] { Run(); }) {}
  ~Sender() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    wake_.notify_one();
    thread_.join();  // within one slice
  }

  // Sends what is queued, and whatever is produced meanwhile, at once until
  // everything is acknowledged or `window` has passed; returns at once.
  void SendFor(absl::Duration window) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++requested_;
      until_ = std::max(until_, absl::Now() + window);
    }
    wake_.notify_one();
  }

 private:
  void Run() {
    std::unique_lock<std::mutex> lock(mu_);
    uint64_t served = 0;
    while (true) {
      wake_.wait(lock, [&] { return stopping_ || requested_ != served; });
      if (stopping_) return;
      const uint64_t serving = requested_;
      lock.unlock();
      const bool all_acknowledged = rd_kafka_flush(rk_, 1) == RD_KAFKA_RESP_ERR_NO_ERROR;
      lock.lock();
      // A request made during the slice asks for another; so does an unfinished one.
      if (all_acknowledged || absl::Now() >= until_) served = serving;
    }
  }

  rd_kafka_t* rk_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;
  uint64_t requested_ = 0;
  absl::Time until_ = absl::InfinitePast();
  std::thread thread_;  // last: starts once the rest is built
};

}  // namespace

struct Publisher::Impl {
  int wake_read = -1;   // closed by ~Impl, after the producer
  int wake_write = -1;  // librdkafka's threads write here until rd_kafka_destroy()
  DeliveryHandler on_delivery;
  std::function<void(int, std::string_view, std::string_view)> on_log;
  HandlePtr rk{nullptr, &rd_kafka_destroy};
  QueuePtr main_queue{nullptr, &rd_kafka_queue_destroy};
  absl::flat_hash_map<std::string, TopicPtr> topics;
  int close_timeout_ms = 0;
  absl::Duration send_now_window = kMinSendNowWindow;
  int in_flight = 0;
  uint64_t in_flight_bytes = 0;
  int served = 0;  // delivery reports handed out by the current Poll()
  std::unique_ptr<Sender> sender;
  // --dedupe: the brokers and properties a read-back consumer needs, and what the
  // read-backs of the current window found, by topic (Held).
  ReadBackOptions read_back;
  absl::flat_hash_map<std::string, absl::flat_hash_map<std::string, std::vector<std::string>>> held;
  uint64_t held_window = 0;  // the HeldQuery::window `held` answers for
  std::string identity;      // Held's lookup key, its buffer kept between questions
  absl::Duration read_back_budget;
  absl::Time read_back_deadline;  // the window's, read_back_budget after it began
  // Why this window cannot trust a read-back at all (messages of an earlier session
  // still unacknowledged, WaitForEarlierSession): given with each topic's first answer.
  std::optional<ReadBackFallback> window_fallback;

  // Dependency order: the sender calls into the producer, topic and queue handles are
  // references into it, and its threads may write to the pipe until it is destroyed.
  ~Impl() {
    sender.reset();
    topics.clear();
    main_queue.reset();
    rk.reset();
    if (wake_read >= 0) close(wake_read);
    if (wake_write >= 0) close(wake_write);
  }

  // One event from the main queue: delivery reports, log lines (log.queue).
  void Serve(rd_kafka_event_t* event) {
    switch (rd_kafka_event_type(event)) {
      case RD_KAFKA_EVENT_DR:
        while (const rd_kafka_message_t* msg = rd_kafka_event_message_next(event)) {
          OnDeliveryReport(msg);
        }
        break;
      case RD_KAFKA_EVENT_LOG: {
        const char* facility = "";
        const char* text = "";
        int level = 6;
        rd_kafka_event_log(event, &facility, &text, &level);
        if (on_log) on_log(level, facility, text);
        break;
      }
      default:
        // Error events repeat what librdkafka has already logged (connection
        // failures, "all brokers down"); a fatal one is also latched for FatalError().
        break;
    }
  }

  void OnDeliveryReport(const rd_kafka_message_t* msg) {
    --in_flight;
    in_flight_bytes -= std::min(in_flight_bytes, MessageBytes(msg));
    if (!on_delivery) return;  // tearing down: nobody listens any more
    DeliveryReport report;
    report.tag = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(msg->_private));
    report.status = DeliveryStatus(msg->err, rd_kafka_topic_name(msg->rkt));
    report.partition = msg->partition;
    report.offset = msg->offset;
    report.topic = rd_kafka_topic_name(msg->rkt);  // events by topic, in the relays' metrics
    if (msg->err != RD_KAFKA_RESP_ERR_NO_ERROR) DescribeMessage(msg, report);
    ++served;
    on_delivery(report);
  }

  // The same count as Produce() adds: key, value, header names and values.
  static uint64_t MessageBytes(const rd_kafka_message_t* msg) {
    uint64_t bytes = msg->key_len + msg->len;
    ForEachHeader(msg, [&bytes](const char* name, const void*, size_t size) {
      bytes += std::strlen(name) + size;
    });
    return bytes;
  }

  static void DescribeMessage(const rd_kafka_message_t* msg, DeliveryReport& report) {
    auto view = [](const void* data, size_t len) {
      return data == nullptr ? std::string_view() : std::string_view(static_cast<const char*>(data), len);
    };
    report.key = view(msg->key, msg->key_len);
    report.value = view(msg->payload, msg->len);
    ForEachHeader(msg, [&](const char* name, const void* value, size_t size) {
      report.headers.push_back({name, view(value, size)});
    });
  }

  // Empties the wake pipe. Called *before* serving the queue: librdkafka writes one
  // byte per non-polling period and re-arms when the queue is served, so draining
  // afterwards could swallow the byte for a report that arrived meanwhile.
  void DrainWakePipe() const {
    char buf[64];
    while (read(wake_read, buf, sizeof(buf)) > 0) {
    }
  }

  // The cached handle for a topic; a name is validated once, when first seen.
  absl::StatusOr<rd_kafka_topic_t*> Topic(std::string_view name) {
    if (auto it = topics.find(AsAbsl(name)); it != topics.end()) return it->second.get();
    OUTBOXD_RETURN_IF_ERROR(ValidateTopicName(name));
    std::string owned(name);
    TopicPtr topic(rd_kafka_topic_new(rk.get(), owned.c_str(), nullptr), &rd_kafka_topic_destroy);
    if (topic == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("Kafka topic \"", owned, "\": ", rd_kafka_err2str(rd_kafka_last_error())));
    }
    rd_kafka_topic_t* raw = topic.get();
    topics.emplace(std::move(owned), std::move(topic));
    return raw;
  }
};

bool IsSecretProperty(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  // Broad on purpose: a location or a key id redacted by mistake costs nothing.
  for (std::string_view word : {"password", "passwd", "secret", "key", "token", "credential",
                                "jaas", "oauthbearer.config"}) {
    if (lower.find(word) != std::string::npos) return true;
  }
  return false;
}

namespace {

// A property as librdkafka holds it after the defaults and the user's overrides
// (topic-level ones such as acks are looked up in the default topic configuration).
std::string ReadBack(rd_kafka_conf_t* conf, const char* name) {
  char value[256];
  size_t size = sizeof(value);
  if (rd_kafka_conf_get(conf, name, value, &size) == RD_KAFKA_CONF_OK) return value;
  const rd_kafka_topic_conf_t* topic = rd_kafka_conf_get_default_topic_conf(conf);
  size = sizeof(value);
  if (topic != nullptr && rd_kafka_topic_conf_get(topic, name, value, &size) == RD_KAFKA_CONF_OK) {
    return value;
  }
  return "";
}

}  // namespace

// Why these and no others (librdkafka 2.0 CONFIGURATION.md): with enable.idempotence
// on, librdkafka itself refuses max.in.flight above 5, retries=0 and acks other than
// all at rd_kafka_new(), so idempotence off is the one way to the reordering retries
// of max.in.flight > 1 and to the gaps a failed batch leaves. acks=0/1 lets the broker
// acknowledge what a failover then loses. A finite message.timeout.ms (or its alias
// delivery.timeout.ms) turns an outage into failed deliveries. partitioner=random
// sends one aggregate to several partitions (the *_random ones hash every non-empty
// key). queuing.strategy=lifo sends newer messages first.
absl::StatusOr<std::vector<UnsafeSetting>> UnsafeSettings(const PublisherOptions& options,
                                                          MessageTimeout timeout) {
  ConfPtr conf(rd_kafka_conf_new(), &rd_kafka_conf_destroy);
  for (const auto& [name, value] : kDefaults) {
    OUTBOXD_RETURN_IF_ERROR(SetProperty(conf.get(), name, value));
  }
  for (const auto& [name, value] : options.properties) {
    OUTBOXD_RETURN_IF_ERROR(SetProperty(conf.get(), name, value));
  }
  std::vector<UnsafeSetting> unsafe;
  const auto check = [&](const char* name, bool safe, const char* risk) {
    if (!safe) unsafe.push_back({absl::StrCat(name, "=", ReadBack(conf.get(), name)), risk});
  };
  check("enable.idempotence", ReadBack(conf.get(), "enable.idempotence") == "true",
        "a retried batch may be duplicated, reordered or leave a gap");
  const std::string acks = ReadBack(conf.get(), "acks");
  check("acks", acks == "-1" || acks == "all",
        "an event counts as delivered before every in-sync replica has it");
  if (timeout == MessageTimeout::kMustBeInfinite) {
    check("message.timeout.ms", ReadBack(conf.get(), "message.timeout.ms") == "0",
          "an outage longer than it fails events instead of delaying them");
  }
  check("partitioner", ReadBack(conf.get(), "partitioner") != "random",
        "events of one aggregate land on different partitions, out of order");
  check("queuing.strategy", ReadBack(conf.get(), "queuing.strategy") != "lifo",
        "newer events are sent before older ones");
  return unsafe;
}

Publisher::Publisher(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

sink::SinkFactory Publisher::Factory(PublisherOptions options) {
  return [options = std::move(options)](
             const sink::SinkSettings& settings) -> absl::StatusOr<std::unique_ptr<sink::Sink>> {
    PublisherOptions with_timeout = options;
    if (settings.delivery_timeout != absl::InfiniteDuration()) {
      with_timeout.properties.insert(
          with_timeout.properties.begin(),
          {"message.timeout.ms",
           absl::StrCat(std::max<int>(1, ToTimeoutMs(settings.delivery_timeout)))});
    }
    OUTBOXD_ASSIGN_OR_RETURN(std::unique_ptr<Publisher> publisher,
                             Create(with_timeout, settings.on_delivery));
    return std::unique_ptr<sink::Sink>(std::move(publisher));
  };
}

absl::StatusOr<std::unique_ptr<Publisher>> Publisher::Create(const PublisherOptions& options,
                                                             DeliveryHandler on_delivery) {
  auto impl = std::make_unique<Impl>();
  impl->on_delivery = std::move(on_delivery);
  impl->read_back.brokers = options.brokers;
  impl->read_back.properties = options.properties;
  impl->read_back_budget = options.read_back_budget;
  impl->close_timeout_ms = ToTimeoutMs(options.close_timeout);

  ConfPtr conf(rd_kafka_conf_new(), &rd_kafka_conf_destroy);
  for (const auto& [name, value] : kDefaults) {
    if (absl::Status s = SetProperty(conf.get(), name, value); !s.ok()) {
      return absl::InternalError(absl::StrCat("built-in default rejected: ", s.message()));
    }
  }
  bool has_brokers = !options.brokers.empty();
  if (has_brokers) {
    OUTBOXD_RETURN_IF_ERROR(SetProperty(conf.get(), "bootstrap.servers", options.brokers));
  }
  for (const auto& [name, value] : options.properties) {
    OUTBOXD_RETURN_IF_ERROR(SetProperty(conf.get(), name, value));
    if (name == "bootstrap.servers" || name == "metadata.broker.list") has_brokers = true;
  }
  if (!has_brokers) {
    return absl::InvalidArgumentError("no Kafka brokers given: pass --brokers HOST:PORT[,...]");
  }
  // Delivery reports (and errors, and log lines with log.queue) as events on the main
  // queue, served by Poll(): what lets Sender flush on a thread of its own.
  rd_kafka_conf_set_events(conf.get(), RD_KAFKA_EVENT_DR);
  if (options.on_log) {
    // log.queue: lines wait on the main queue for Poll(), so the handler never runs on
    // one of librdkafka's threads.
    impl->on_log = options.on_log;
    OUTBOXD_RETURN_IF_ERROR(SetProperty(conf.get(), "log.queue", "true"));
  }

  char errstr[512];
  impl->rk.reset(rd_kafka_new(RD_KAFKA_PRODUCER, conf.get(), errstr, sizeof(errstr)));
  if (impl->rk == nullptr) {
    // Conflicting settings (e.g. acks=1 with idempotence) are only caught here.
    std::string reason = OneLine(errstr);
    for (const auto& [name, value] : options.properties) {
      if (IsSecretProperty(name)) reason = internal::RedactValue(reason, value);
    }
    return absl::InvalidArgumentError(absl::StrCat("Kafka producer: ", reason));
  }
  conf.release();  // rd_kafka_new() took it
  char linger[32];
  size_t linger_size = sizeof(linger);
  impl->send_now_window =
      rd_kafka_conf_get(rd_kafka_conf(impl->rk.get()), "linger.ms", linger, &linger_size) ==
              RD_KAFKA_CONF_OK
          ? SendNowWindow(linger)
          : kMinSendNowWindow;
  if (impl->on_log) rd_kafka_set_log_queue(impl->rk.get(), nullptr);  // the main queue

  int fds[2];
  if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    return absl::InternalError(absl::StrCat("pipe2: ", std::strerror(errno)));
  }
  impl->wake_read = fds[0];
  // Non-blocking write end too: librdkafka's threads must never block on a full pipe.
  impl->wake_write = fds[1];
  impl->main_queue.reset(rd_kafka_queue_get_main(impl->rk.get()));
  static constexpr char kWakeByte = 1;
  rd_kafka_queue_io_event_enable(impl->main_queue.get(), impl->wake_write, &kWakeByte, 1);
  impl->sender = std::make_unique<Sender>(impl->rk.get());
  return std::unique_ptr<Publisher>(new Publisher(std::move(impl)));
}

Publisher::~Publisher() {
  if (impl_ != nullptr) Close(absl::Milliseconds(impl_->close_timeout_ms));
}

int Publisher::Close(absl::Duration flush_timeout) {
  if (impl_ == nullptr) return 0;
  // Reports served by this flush still reach the handler, which is why its state must
  // outlive the publisher. No flush at all when the caller has already waited: with
  // the brokers down it would only add its whole timeout to the stop.
  if (flush_timeout > absl::ZeroDuration()) Flush(flush_timeout).IgnoreError();
  impl_->sender.reset();
  impl_->on_delivery = nullptr;
  impl_->on_log = nullptr;
  const int dropped = impl_->in_flight;
  // Whatever is left (brokers unreachable) is dropped, unreported: the relay resumes
  // from its confirmed position and sends those events again. Purged first, so that
  // rd_kafka_destroy has nothing left to wait for.
  rd_kafka_purge(impl_->rk.get(), RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
  Poll(0);
  impl_.reset();
  return dropped;
}

absl::Status Publisher::Produce(const OutgoingMessage& message) {
  OUTBOXD_ASSIGN_OR_RETURN(rd_kafka_topic_t * topic, impl_->Topic(message.topic));

  HeadersPtr headers(nullptr, &rd_kafka_headers_destroy);
  uint64_t bytes = message.key.size() + message.value.size();
  if (!message.headers.empty()) {
    headers.reset(rd_kafka_headers_new(message.headers.size()));
    for (const Header& h : message.headers) {
      bytes += h.name.size() + h.value.size();
      rd_kafka_header_add(headers.get(), h.name.data(), static_cast<ssize_t>(h.name.size()),
                          h.value.data(), static_cast<ssize_t>(h.value.size()));
    }
  }
  const rd_kafka_resp_err_t err = rd_kafka_producev(
      impl_->rk.get(), RD_KAFKA_V_RKT(topic), RD_KAFKA_V_PARTITION(RD_KAFKA_PARTITION_UA),
      RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
      RD_KAFKA_V_KEY(message.key.data(), message.key.size()),
      RD_KAFKA_V_VALUE(const_cast<char*>(message.value.data()), message.value.size()),
      RD_KAFKA_V_HEADERS(headers.get()),
      RD_KAFKA_V_OPAQUE(reinterpret_cast<void*>(static_cast<uintptr_t>(message.tag))),
      RD_KAFKA_V_END);
  if (err == RD_KAFKA_RESP_ERR_NO_ERROR) {
    headers.release();  // librdkafka owns them now; on failure they stay ours
    ++impl_->in_flight;
    impl_->in_flight_bytes += bytes;
    return absl::OkStatus();
  }
  return internal::ErrorStatus(err,
                               absl::StrCat("Kafka produce to topic \"", AsAbsl(message.topic),
                                            "\": ", rd_kafka_err2str(err)),
                               absl::StatusCode::kInvalidArgument);
}

int Publisher::Poll(int timeout_ms) {
  impl_->DrainWakePipe();
  impl_->served = 0;
  // The first event may be waited for; the rest are those already queued.
  for (int wait_ms = timeout_ms;; wait_ms = 0) {
    rd_kafka_event_t* event = rd_kafka_queue_poll(impl_->main_queue.get(), wait_ms);
    if (event == nullptr) break;
    impl_->Serve(event);
    rd_kafka_event_destroy(event);  // frees the reported messages
  }
  return impl_->served;
}

void Publisher::SendNow() { impl_->sender->SendFor(impl_->send_now_window); }

absl::Status Publisher::Flush(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  if (impl_->sender) impl_->sender->SendFor(timeout);
  while (impl_->in_flight > 0) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) break;
    Poll(ToTimeoutMs(std::min(left, absl::Milliseconds(100))));
  }
  if (impl_->in_flight == 0) return absl::OkStatus();
  return absl::DeadlineExceededError(absl::StrCat(impl_->in_flight,
                                                  " Kafka messages still unacknowledged after ",
                                                  absl::FormatDuration(timeout)));
}

absl::Status Publisher::FatalError() const {
  char errstr[512];
  const rd_kafka_resp_err_t err = rd_kafka_fatal_error(impl_->rk.get(), errstr, sizeof(errstr));
  if (err == RD_KAFKA_RESP_ERR_NO_ERROR) return absl::OkStatus();
  return absl::AbortedError(
      absl::StrCat("Kafka producer fatal error (", rd_kafka_err2name(err), "): ", OneLine(errstr)));
}

namespace {

// Held: how long a window's first read-back waits for an earlier session's messages.
// Longer than a produce round trip under load; short enough that a broker which
// acknowledges nothing delays the resume by this much, once, and no more.
constexpr absl::Duration kEarlierSessionWait = absl::Seconds(10);

// Waits until nothing is in flight in the producer; nullopt when that happened.
std::optional<ReadBackFallback> WaitForEarlierSession(Publisher& producer) {
  if (producer.InFlight() == 0) return std::nullopt;
  spdlog::info(
      "--dedupe: waiting up to {} for {} messages an earlier session left in the producer "
      "before reading back",
      absl::FormatDuration(kEarlierSessionWait), producer.InFlight());
  if (producer.Flush(kEarlierSessionWait).ok()) return std::nullopt;
  return ReadBackFallback{.reason = "in_flight",
                          .detail = absl::StrCat(producer.InFlight(),
                                                 " messages of an earlier session still "
                                                 "unacknowledged after ",
                                                 absl::FormatDuration(kEarlierSessionWait))};
}

}  // namespace

absl::StatusOr<sink::HeldAnswer> Publisher::Held(const sink::HeldQuery& query) {
  ReadBackOptions& window = impl_->read_back;
  // Another window (a new session): what the last one read is no answer for it.
  if (query.window != impl_->held_window) {
    impl_->held.clear();
    impl_->held_window = query.window;
    window.since = query.since;
    window.mark_name = query.mark.name;
    window.mark_value = query.mark.value;
    window.max_messages =
        query.max_messages > 0 ? query.max_messages : ReadBackOptions{}.max_messages;
    // The first question of a window comes before its session produced anything:
    // whatever is in flight is an earlier session's, and may reach the broker after
    // a read-back looked, which would then send it again.
    impl_->window_fallback = WaitForEarlierSession(*this);
    impl_->read_back_deadline = absl::Now() + impl_->read_back_budget;
  }
  sink::HeldAnswer answer;
  auto it = impl_->held.find(AsAbsl(query.topic));
  if (it == impl_->held.end()) {
    window.timeout = impl_->read_back_deadline - absl::Now();
    window.not_before_ms = query.not_before_ms;
    TopicHoldings found;
    if (window.timeout > absl::ZeroDuration()) {
      OUTBOXD_ASSIGN_OR_RETURN(found, ReadBackTopic(window, query.topic));
      if (found.clock_disagrees) {
        spdlog::warn(
            "--dedupe: topic {} holds this relay's messages stamped before their events' "
            "commit (the relay's and PostgreSQL's clocks disagree by seconds): its read-back "
            "ran to its limit; synchronise the clocks (NTP)",
            EscapeForLog(query.topic));
      }
    } else {  // the window's budget is spent: this topic is sent at least once
      found.fallbacks.push_back(
          {.reason = "timeout",
           .detail = absl::StrCat("the window's read-back budget of ",
                                  absl::FormatDuration(impl_->read_back_budget),
                                  " was spent on other topics")});
    }
    if (impl_->window_fallback) found.fallbacks.push_back(*impl_->window_fallback);
    for (ReadBackFallback& f : found.fallbacks) {
      answer.fallbacks.emplace_back(std::move(f.reason),
                                    f.partition < 0
                                        ? std::move(f.detail)
                                        : absl::StrCat("partition ", f.partition, ": ", f.detail));
    }
    it = impl_->held.emplace(std::string(query.topic), std::move(found.messages)).first;
  }
  // Each copy at the broker answers one question: two rows alike in id, lsn and key
  // with one copy there means one of them is sent again.
  if (it->second.empty()) return answer;  // the common first drain: nothing of this relay's
  sink::HeldIdentity(query.id, query.key, &impl_->identity);
  auto copies = it->second.find(impl_->identity);
  if (copies == it->second.end()) return answer;
  std::vector<std::string>& lsns = copies->second;
  auto copy = query.any_lsn ? lsns.begin() : std::find(lsns.begin(), lsns.end(), query.lsn);
  answer.held = copy != lsns.end();
  if (answer.held) lsns.erase(copy);
  return answer;
}

int Publisher::InFlight() const { return impl_->in_flight; }

uint64_t Publisher::InFlightBytes() const { return impl_->in_flight_bytes; }

void Publisher::RaiseFatalErrorForTesting(std::string_view reason) {
  // OUT_OF_ORDER_SEQUENCE_NUMBER: what a broker answers when the producer's sequence
  // state is lost, the fatal idempotence error users actually meet.
  rd_kafka_test_fatal_error(impl_->rk.get(), RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER,
                            std::string(reason).c_str());
}

int Publisher::wake_fd() const { return impl_->wake_read; }

absl::Duration SendNowWindow(std::string_view linger_ms) {
  double ms = 0;
  if (!absl::SimpleAtod(AsAbsl(linger_ms), &ms)) return kMinSendNowWindow;
  return std::clamp(absl::Milliseconds(ms), kMinSendNowWindow, kMaxSendNowWindow);
}

}  // namespace outboxd::kafka
