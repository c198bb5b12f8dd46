// KafkaCollector over librdkafka's consumer: manual assignment only (rd_kafka_assign),
// one thread that both discovers topics and consumes, so positions it resumes from on
// a reassignment are exactly the offsets it has already kept.
#include "support/kafka_collector.h"

#include <librdkafka/rdkafka.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kafka/rdkafka_client.h"

namespace outboxd::test {
namespace {

using QueuePtr = std::unique_ptr<rd_kafka_queue_t, decltype(&rd_kafka_queue_destroy)>;
using ListPtr = std::unique_ptr<rd_kafka_topic_partition_list_t,
                                decltype(&rd_kafka_topic_partition_list_destroy)>;

constexpr size_t kBatch = 4096;
constexpr int kPollMs = 50;
constexpr auto kRediscoverEvery = std::chrono::milliseconds(100);

CollectedMessage ToCollected(const rd_kafka_message_t* m) {
  CollectedMessage out;
  kafka::CopyMessage(m, out);
  return out;
}

}  // namespace

std::optional<std::string> CollectedMessage::Header(std::string_view name) const {
  for (const auto& [n, v] : headers) {
    if (n == name) return v;
  }
  return std::nullopt;
}

absl::StatusOr<std::unique_ptr<KafkaCollector>> KafkaCollector::Start(
    std::string bootstraps, std::vector<std::string> topics) {
  absl::StatusOr<ConsumerPtr> consumer =
      StartConsumer(bootstraps, "outboxd-test-collector", ConsumerLogs::kLibrdkafkaDefault);
  if (!consumer.ok()) return consumer.status();
  std::unique_ptr<KafkaCollector> collector(
      new KafkaCollector(*std::move(consumer), std::move(topics)));
  collector->thread_ = std::thread([c = collector.get()] { c->Run(); });
  return collector;
}

KafkaCollector::KafkaCollector(ConsumerPtr consumer, std::vector<std::string> topics)
    : consumer_(std::move(consumer)), wanted_(std::move(topics)) {
  std::sort(wanted_.begin(), wanted_.end());
  wanted_.erase(std::unique(wanted_.begin(), wanted_.end()), wanted_.end());
}

KafkaCollector::~KafkaCollector() { Stop(); }

void KafkaCollector::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  consumer_.reset();
}

bool KafkaCollector::WaitUntilAssigned(absl::Duration timeout) {
  std::unique_lock lock(mu_);
  return arrived_.wait_for(lock, absl::ToChronoMilliseconds(timeout),
                           [&] { return all_assigned_; });
}

bool KafkaCollector::WaitForCount(size_t n, absl::Duration timeout) {
  std::unique_lock lock(mu_);
  return arrived_.wait_for(lock, absl::ToChronoMilliseconds(timeout),
                           [&] { return messages_.size() >= n; });
}

bool KafkaCollector::WaitUntilCaughtUp(absl::Duration timeout) {
  const auto deadline = std::chrono::steady_clock::now() + absl::ToChronoMilliseconds(timeout);
  const rd_kafka_metadata_t* md = nullptr;
  if (rd_kafka_metadata(consumer_.get(), 1, nullptr, &md, 5000) != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return false;
  }
  std::unique_ptr<const rd_kafka_metadata_t, decltype(&rd_kafka_metadata_destroy)> owned(
      md, &rd_kafka_metadata_destroy);
  std::map<PartitionKey, int64_t> high_of;
  for (int t = 0; t < md->topic_cnt; ++t) {
    const std::string name = md->topics[t].topic;
    if (std::find(wanted_.begin(), wanted_.end(), name) == wanted_.end()) continue;
    for (int p = 0; p < md->topics[t].partition_cnt; ++p) {
      const int32_t partition = md->topics[t].partitions[p].id;
      int64_t low = 0, high = 0;
      if (rd_kafka_query_watermark_offsets(consumer_.get(), name.c_str(), partition, &low, &high,
                                           5000) != RD_KAFKA_RESP_ERR_NO_ERROR) {
        return false;
      }
      if (high > 0) high_of[{name, partition}] = high;
    }
  }
  std::unique_lock lock(mu_);
  return arrived_.wait_until(lock, deadline, [&] {
    for (const auto& [key, high] : high_of) {
      auto it = read_to_.find(key);
      if (it == read_to_.end() || it->second < high) return false;
    }
    return true;
  });
}

std::vector<CollectedMessage> KafkaCollector::Messages() const {
  std::lock_guard lock(mu_);
  return messages_;
}

int64_t KafkaCollector::Skipped() const {
  std::lock_guard lock(mu_);
  return skipped_;
}

size_t KafkaCollector::Count() const {
  std::lock_guard lock(mu_);
  return messages_.size();
}

void KafkaCollector::Run() {
  QueuePtr queue(rd_kafka_queue_get_consumer(consumer_.get()), &rd_kafka_queue_destroy);
  rd_kafka_message_t* batch[kBatch];
  auto next_discovery = std::chrono::steady_clock::now();
  while (!stop_) {
    if (assigned_topics_.size() < wanted_.size() &&
        std::chrono::steady_clock::now() >= next_discovery) {
      DiscoverTopics();
      next_discovery = std::chrono::steady_clock::now() + kRediscoverEvery;
    }
    const ssize_t n = rd_kafka_consume_batch_queue(queue.get(), kPollMs, batch, kBatch);
    if (n > 0) Collect(batch, static_cast<size_t>(n));
  }
}

void KafkaCollector::DiscoverTopics() {
  const rd_kafka_metadata_t* md = nullptr;
  // all_topics=1: lists what exists without naming (and so auto-creating) anything.
  if (rd_kafka_metadata(consumer_.get(), 1, nullptr, &md, 1000) != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return;  // brokers unreachable: try again later
  }
  std::unique_ptr<const rd_kafka_metadata_t, decltype(&rd_kafka_metadata_destroy)> owned(
      md, &rd_kafka_metadata_destroy);
  bool grew = false;
  for (int t = 0; t < md->topic_cnt; ++t) {
    const rd_kafka_metadata_topic_t& topic = md->topics[t];
    const std::string name = topic.topic;
    const bool wanted = std::find(wanted_.begin(), wanted_.end(), name) != wanted_.end();
    if (!wanted || assigned_topics_.count(name) != 0 || topic.err != 0 ||
        topic.partition_cnt == 0) {
      continue;
    }
    for (int p = 0; p < topic.partition_cnt; ++p) {
      next_offset_.try_emplace({name, topic.partitions[p].id}, RD_KAFKA_OFFSET_BEGINNING);
    }
    assigned_topics_.insert(name);
    grew = true;
  }
  if (!grew) return;
  ListPtr list(rd_kafka_topic_partition_list_new(static_cast<int>(next_offset_.size())),
               &rd_kafka_topic_partition_list_destroy);
  for (const auto& [key, offset] : next_offset_) {
    rd_kafka_topic_partition_list_add(list.get(), key.topic.c_str(), key.partition)->offset =
        offset;
  }
  if (rd_kafka_assign(consumer_.get(), list.get()) != RD_KAFKA_RESP_ERR_NO_ERROR) {
    assigned_topics_.clear();  // rediscover and try again
    return;
  }
  if (assigned_topics_.size() == wanted_.size()) {
    std::lock_guard lock(mu_);
    all_assigned_ = true;
  }
  arrived_.notify_all();
}

void KafkaCollector::Collect(rd_kafka_message_t* const* batch, size_t count) {
  std::vector<CollectedMessage> kept;
  kept.reserve(count);
  int64_t skipped = 0;
  for (size_t i = 0; i < count; ++i) {
    std::unique_ptr<rd_kafka_message_t, decltype(&rd_kafka_message_destroy)> m(
        batch[i], &rd_kafka_message_destroy);
    // Errors here are transient (broker down, reconnecting); the consumer retries.
    if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR) continue;
    int64_t& next = next_offset_[{rd_kafka_topic_name(m->rkt), m->partition}];
    // Offsets on the mock are contiguous from 0 (no compaction, no control records
    // without transactions), so a jump is messages dropped by retention.
    if (m->offset > std::max<int64_t>(next, 0)) skipped += m->offset - std::max<int64_t>(next, 0);
    next = m->offset + 1;
    kept.push_back(ToCollected(m.get()));
  }
  if (kept.empty()) return;
  {
    std::lock_guard lock(mu_);
    for (CollectedMessage& m : kept) {
      read_to_[{m.topic, m.partition}] = m.offset + 1;
      messages_.push_back(std::move(m));
    }
    skipped_ += skipped;
  }
  arrived_.notify_all();
}

}  // namespace outboxd::test
