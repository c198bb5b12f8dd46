#include "chaos/kafka_reader.h"

#include <librdkafka/rdkafka.h>

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "support/kafka_consumer.h"

namespace outboxd::chaos {
namespace {

constexpr size_t kBatch = 4096;

std::string Header(rd_kafka_headers_t* headers, const char* name) {
  const void* value = nullptr;
  size_t size = 0;
  if (headers == nullptr ||
      rd_kafka_header_get_last(headers, name, &value, &size) != RD_KAFKA_RESP_ERR_NO_ERROR ||
      value == nullptr) {
    return "";
  }
  return std::string(static_cast<const char*>(value), size);
}

}  // namespace

absl::StatusOr<std::unique_ptr<KafkaReader>> KafkaReader::Start(
    const std::string& bootstraps, const std::vector<std::string>& topics, int partitions) {
  // Outages are the point of the run: no reconnect chatter.
  absl::StatusOr<test::ConsumerPtr> consumer =
      test::StartConsumer(bootstraps, "outboxd-chaos-reader", test::ConsumerLogs::kCriticalOnly);
  if (!consumer.ok()) return consumer.status();
  rd_kafka_t* rk = consumer->get();
  // The topics exist (the broker created them at start): assign every partition
  // from the beginning, no discovery, no group.
  rd_kafka_topic_partition_list_t* list =
      rd_kafka_topic_partition_list_new(static_cast<int>(topics.size()) * partitions);
  for (const std::string& topic : topics) {
    for (int p = 0; p < partitions; ++p) {
      rd_kafka_topic_partition_list_add(list, topic.c_str(), p)->offset = RD_KAFKA_OFFSET_BEGINNING;
    }
  }
  rd_kafka_resp_err_t err = rd_kafka_assign(rk, list);
  rd_kafka_topic_partition_list_destroy(list);
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return absl::InternalError(absl::StrCat("reader assign: ", rd_kafka_err2str(err)));
  }
  std::unique_ptr<KafkaReader> reader(new KafkaReader(consumer->release(), topics, partitions));
  reader->thread_ = std::thread([r = reader.get()] { r->Run(); });
  return reader;
}

KafkaReader::KafkaReader(rd_kafka_s* consumer, std::vector<std::string> topics, int partitions)
    : consumer_(consumer),
      topics_(std::move(topics)),
      partitions_(partitions),
      next_offset_(topics_.size() * partitions, 0) {}

int32_t KafkaReader::Stream(const char* topic, int32_t partition) const {
  for (size_t t = 0; t < topics_.size(); ++t) {
    if (topics_[t] == topic) return static_cast<int32_t>(t) * partitions_ + partition;
  }
  return -1;  // not assigned: cannot happen
}

KafkaReader::~KafkaReader() { StopAndTake(); }

std::vector<Delivery> KafkaReader::StopAndTake() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  if (consumer_ != nullptr) {
    rd_kafka_destroy_flags(consumer_, RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
    consumer_ = nullptr;
  }
  return TakeRecorded();
}

bool KafkaReader::WaitCaughtUp(absl::Duration timeout) const {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    bool caught_up = true;
    for (size_t t = 0; t < topics_.size() && caught_up; ++t) {
      for (int p = 0; p < partitions_ && caught_up; ++p) {
        int64_t low = 0;
        int64_t high = 0;
        if (rd_kafka_query_watermark_offsets(consumer_, topics_[t].c_str(), p, &low, &high, 2000) !=
            RD_KAFKA_RESP_ERR_NO_ERROR) {
          caught_up = false;
          break;
        }
        std::lock_guard lock(offsets_mu_);
        caught_up = next_offset_[t * partitions_ + p] >= high;
      }
    }
    if (caught_up) return true;
    absl::SleepFor(absl::Milliseconds(100));
  }
  return false;
}

void KafkaReader::Run() {
  rd_kafka_queue_t* queue = rd_kafka_queue_get_consumer(consumer_);
  std::vector<rd_kafka_message_t*> batch(kBatch);
  while (!stop_) {
    const ssize_t n = rd_kafka_consume_batch_queue(queue, 50, batch.data(), kBatch);
    std::vector<Delivery> got;
    int64_t skipped = 0;
    for (ssize_t i = 0; i < n; ++i) {
      rd_kafka_message_t* m = batch[i];
      // Errors are transient here (a broker down); the consumer retries by itself.
      if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
        rd_kafka_headers_t* headers = nullptr;
        rd_kafka_message_headers(m, &headers);
        Delivery d{.partition = Stream(rd_kafka_topic_name(m->rkt), m->partition),
                   .offset = m->offset,
                   .id = Header(headers, "id"),
                   .aggregate = m->key ? std::string(static_cast<const char*>(m->key), m->key_len)
                                       : std::string(),
                   .lsn = Header(headers, "lsn"),
                   .created_ms = rd_kafka_message_timestamp(m, nullptr)};
        got.push_back(std::move(d));
      }
      rd_kafka_message_destroy(m);
    }
    std::unique_lock lock(offsets_mu_);
    for (const Delivery& d : got) {
      // Offsets on the mock are contiguous from 0 (no compaction, no transactions),
      // so a jump is the broker's retention dropping what we had not read yet.
      int64_t& next = next_offset_[d.partition];
      if (d.offset > next) skipped += d.offset - next;
      next = std::max(next, d.offset + 1);
    }
    lock.unlock();
    Record(got, skipped);
  }
  rd_kafka_queue_destroy(queue);
}

}  // namespace outboxd::chaos
