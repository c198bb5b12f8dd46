// ReadBack over librdkafka's consumer: manual assignment only (no group membership,
// nothing committed), each round assigning every partition not finished yet at the
// start of its next chunk, reading until each reaches the end of that chunk.
#include "kafka/read_back.h"

#include <librdkafka/rdkafka.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/progress.h"
#include "kafka/internal/rdkafka_util.h"
#include "kafka/rdkafka_client.h"
#include "sink/sink.h"

namespace outboxd::kafka {
namespace {

using ConfPtr = std::unique_ptr<rd_kafka_conf_t, decltype(&rd_kafka_conf_destroy)>;
using HandlePtr = std::unique_ptr<rd_kafka_t, void (*)(rd_kafka_t*)>;
using ListPtr = std::unique_ptr<rd_kafka_topic_partition_list_t,
                                decltype(&rd_kafka_topic_partition_list_destroy)>;
using MessagePtr = std::unique_ptr<rd_kafka_message_t, decltype(&rd_kafka_message_destroy)>;
using MetadataPtr =
    std::unique_ptr<const rd_kafka_metadata_t, decltype(&rd_kafka_metadata_destroy)>;

// The first round reads this many offsets per partition, each later round twice as
// many: a window of n messages takes about log2(n / 500) rounds, and the common one (a
// kill -9 under load leaves a few hundred unconfirmed) a single round.
constexpr int64_t kFirstChunk = 500;
// A fetch that finds nothing returns after this: a partition's end is seen at once.
constexpr char kFetchWaitMs[] = "10";
constexpr int kMetadataTimeoutMs = 5000;

// Overridable by --kafka except where noted in MakeConsumer.
constexpr std::pair<const char*, const char*> kDefaults[] = {
    {"client.id", "outboxd-read-back"},
    {"fetch.wait.max.ms", kFetchWaitMs},
    {"reconnect.backoff.max.ms", "1000"},
    {"log.connection.close", "false"},
};

void DestroyConsumer(rd_kafka_t* rk) {
  rd_kafka_destroy_flags(rk, RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
}

absl::StatusOr<HandlePtr> MakeConsumer(const ReadBackOptions& options) {
  ConfPtr conf(rd_kafka_conf_new(), &rd_kafka_conf_destroy);
  std::vector<std::pair<std::string, std::string>> all = {{"bootstrap.servers", options.brokers}};
  all.insert(all.end(), std::begin(kDefaults), std::end(kDefaults));
  all.insert(all.end(), options.properties.begin(), options.properties.end());
  // Not overridable: the group is never joined (partitions are assigned) and nothing is
  // committed; the end of a partition must be reported; a chunk start retention
  // deleted meanwhile must fail, not jump to another offset.
  all.emplace_back("group.id", "outboxd-read-back");
  all.emplace_back("enable.auto.commit", "false");
  all.emplace_back("enable.partition.eof", "true");
  all.emplace_back("auto.offset.reset", "error");
  for (const auto& [name, value] : all) {
    if (absl::Status s = SetProperty(conf.get(), name, value); !s.ok()) return s;
  }
  // The producer's --kafka settings warn on a consumer ("is a producer property"); what
  // matters of the rest comes back as errors on the messages, which the caller reports.
  rd_kafka_conf_set_log_cb(conf.get(), [](const rd_kafka_t*, int, const char*, const char*) {});
  char errstr[512];
  HandlePtr rk(rd_kafka_new(RD_KAFKA_CONSUMER, conf.get(), errstr, sizeof(errstr)),
               &DestroyConsumer);
  if (rk == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("Kafka read-back consumer: ", internal::OneLine(errstr)));
  }
  conf.release();  // rd_kafka_new() took it
  rd_kafka_poll_set_consumer(rk.get());
  return rk;
}

// Where one partition's read is.
struct Cursor {
  int32_t partition = 0;
  int64_t low = 0;  // its watermarks when the read began
  int64_t high = 0;
  int64_t start = 0;  // the chunk being read is [start, end)
  int64_t end = 0;
  int64_t next = 0;  // the chunk's next offset to examine: each message counts once
  bool chunk_read = false;
  int64_t chunk_newest_ms = -1;  // the newest timestamp in the chunk, -1: none read yet
  bool boundary = false;         // met an own message below the window's start
  std::optional<ReadBackFallback> fallback;
  bool done = false;
};

bool IsPermissionError(rd_kafka_resp_err_t err) {
  return err == RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED ||
         err == RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED ||
         err == RD_KAFKA_RESP_ERR_GROUP_AUTHORIZATION_FAILED;
}

class Reader {
 public:
  Reader(const ReadBackOptions& options, std::string topic, rd_kafka_t* rk, TopicHoldings* out)
      : options_(options), topic_(std::move(topic)), rk_(rk), out_(out) {}

  void Run() {
    deadline_ = absl::Now() + options_.timeout;
    if (!FindPartitions()) return;
    Progress progress({.what = absl::StrCat("read-back of Kafka topic ", topic_),
                       .unit = Progress::Unit::kEvents});
    for (int64_t chunk = kFirstChunk; Unfinished() > 0; chunk *= 2) {
      if (!Assign(chunk)) break;
      ReadRound(progress);
      if (absl::Now() >= deadline_) break;
      EndRound();
    }
    for (Cursor& c : cursors_) {
      if (!c.done && !c.fallback) {
        c.fallback =
            Fallback(c.partition, "timeout",
                     absl::StrCat("not read back within ", absl::FormatDuration(options_.timeout)));
      }
      if (c.fallback) out_->fallbacks.push_back(*c.fallback);
    }
    rd_kafka_assign(rk_, nullptr);
    progress.Finish();
  }

 private:
  ReadBackFallback Fallback(int32_t partition, std::string reason, std::string detail) const {
    return {.partition = partition, .reason = std::move(reason), .detail = std::move(detail)};
  }

  // The topic's partitions and their watermarks. A metadata request for every topic:
  // one naming the topic would create it on a broker that auto-creates (the mock does).
  bool FindPartitions() {
    const rd_kafka_metadata_t* md = nullptr;
    const rd_kafka_resp_err_t err = rd_kafka_metadata(rk_, 1, nullptr, &md, MetadataTimeoutMs());
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      out_->fallbacks.push_back(
          Fallback(-1, IsPermissionError(err) ? "no_read_permission" : "unavailable",
                   absl::StrCat("cannot read the cluster's metadata: ", rd_kafka_err2str(err))));
      return false;
    }
    MetadataPtr owned(md, &rd_kafka_metadata_destroy);
    for (int t = 0; t < md->topic_cnt; ++t) {
      const rd_kafka_metadata_topic_t& topic = md->topics[t];
      if (topic_ != topic.topic) continue;
      if (topic.err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        // A topic it may not describe: a principal that may produce but not read it.
        if (topic.err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART) return false;
        out_->fallbacks.push_back(
            Fallback(-1, IsPermissionError(topic.err) ? "no_read_permission" : "unavailable",
                     absl::StrCat("cannot describe the topic: ", rd_kafka_err2str(topic.err))));
        return false;
      }
      out_->partitions = topic.partition_cnt;
      for (int p = 0; p < topic.partition_cnt; ++p) AddPartition(topic.partitions[p].id);
      return true;
    }
    return false;  // no such topic yet: it holds nothing
  }

  void AddPartition(int32_t partition) {
    Cursor c{.partition = partition};
    const rd_kafka_resp_err_t err = rd_kafka_query_watermark_offsets(
        rk_, topic_.c_str(), partition, &c.low, &c.high, MetadataTimeoutMs());
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      c.fallback =
          Fallback(partition, IsPermissionError(err) ? "no_read_permission" : "unavailable",
                   absl::StrCat("cannot read its offsets: ", rd_kafka_err2str(err)));
      c.done = true;
    }
    c.start = c.end = c.high;
    c.done = c.done || c.high <= c.low;  // empty
    cursors_.push_back(c);
  }

  int Unfinished() const {
    return static_cast<int>(
        std::count_if(cursors_.begin(), cursors_.end(), [](const Cursor& c) { return !c.done; }));
  }

  // Each unfinished partition at the start of its next chunk, the one below the last.
  bool Assign(int64_t chunk) {
    ListPtr list(rd_kafka_topic_partition_list_new(Unfinished()),
                 &rd_kafka_topic_partition_list_destroy);
    for (Cursor& c : cursors_) {
      if (c.done) continue;
      c.end = c.start;
      c.start = c.next = std::max(c.low, c.end - chunk);
      c.chunk_read = false;
      c.chunk_newest_ms = -1;
      rd_kafka_topic_partition_list_add(list.get(), topic_.c_str(), c.partition)->offset = c.start;
    }
    if (rd_kafka_resp_err_t err = rd_kafka_assign(rk_, list.get())) {
      for (Cursor& c : cursors_) {
        if (!c.done) c.fallback = Fallback(c.partition, "unavailable", rd_kafka_err2str(err));
      }
      return false;
    }
    return true;
  }

  void ReadRound(Progress& progress) {
    while (std::any_of(cursors_.begin(), cursors_.end(),
                       [](const Cursor& c) { return !c.done && !c.chunk_read; })) {
      if (absl::Now() >= deadline_) return;
      MessagePtr m(rd_kafka_consumer_poll(rk_, 100), &rd_kafka_message_destroy);
      if (m == nullptr) continue;
      Cursor* c = Find(m->partition);
      if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        OnError(m.get(), c);
        continue;
      }
      if (c == nullptr || c->done || c->chunk_read) continue;
      if (m->offset >= c->end) {  // past the chunk: another producer's newer message
        c->chunk_read = true;
        continue;
      }
      if (m->offset < c->next) continue;  // fetched again after a transient error
      c->next = m->offset + 1;
      ++out_->messages_read;
      progress.Update(out_->messages_read);
      Examine(m.get(), *c);
      if (m->offset + 1 >= c->end) c->chunk_read = true;
    }
  }

  Cursor* Find(int32_t partition) {
    for (Cursor& c : cursors_) {
      if (c.partition == partition) return &c;
    }
    return nullptr;
  }

  void OnError(const rd_kafka_message_t* m, Cursor* c) {
    if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
      if (c != nullptr) c->chunk_read = true;  // the end: nothing after the last message
      return;
    }
    std::string why = internal::OneLine(rd_kafka_message_errstr(m));
    std::string reason;
    if (IsPermissionError(m->err)) {
      reason = "no_read_permission";
    } else if (m->err == RD_KAFKA_RESP_ERR__AUTO_OFFSET_RESET ||
               m->err == RD_KAFKA_RESP_ERR_OFFSET_OUT_OF_RANGE) {
      reason = "retention";
    } else {
      return;  // transient (a broker down): retried by librdkafka until the deadline
    }
    // An error for the whole topic names no partition: every unfinished one falls back.
    for (Cursor& each : cursors_) {
      if (each.done || (c != nullptr && &each != c)) continue;
      each.fallback = Fallback(each.partition, reason, why);
      each.done = true;
    }
  }

  void Examine(const rd_kafka_message_t* m, Cursor& c) {
    // No timestamp (-1): as if new, so that it never ends a read.
    const int64_t made_ms = rd_kafka_message_timestamp(m, nullptr);
    c.chunk_newest_ms =
        std::max(c.chunk_newest_ms, made_ms < 0 ? std::numeric_limits<int64_t>::max() : made_ms);
    std::string_view mark, id, lsn;
    ForEachHeader(m, [&](const char* name, const void* value, size_t size) {
      const std::string_view v(static_cast<const char*>(value), value == nullptr ? 0 : size);
      if (options_.mark_name == name) mark = v;
      if (std::strcmp(name, "id") == 0) id = v;
      if (std::strcmp(name, "lsn") == 0) lsn = v;
    });
    if (mark != options_.mark_value || id.empty()) return;  // another producer's
    const std::string_view key(static_cast<const char*>(m->key),
                               m->key == nullptr ? 0 : m->key_len);
    out_->messages[sink::HeldIdentity(id, key)].emplace_back(lsn);
    if (ParseLsnHeader(lsn) < options_.since) {
      c.boundary = true;
    } else if (made_ms >= 0 && made_ms < options_.not_before_ms) {
      out_->clock_disagrees = true;
    }
  }

  // A chunk whose every message was made before the window's first event could be.
  // Stopping there can only miss an own message (sent again), never invent one.
  bool MadeBeforeTheWindow(const Cursor& c) const {
    return options_.not_before_ms > 0 && !out_->clock_disagrees && c.chunk_newest_ms >= 0 &&
           c.chunk_newest_ms < options_.not_before_ms;
  }

  // A partition is finished once the round met its boundary or a chunk made before the
  // window, reached its low watermark or read its limit.
  void EndRound() {
    for (Cursor& c : cursors_) {
      if (c.done) continue;
      if (c.boundary || MadeBeforeTheWindow(c)) {
        c.done = true;
      } else if (c.start <= c.low) {
        c.done = true;
        // Older messages were deleted: the window may have begun among them.
        if (c.low > 0) {
          c.fallback = Fallback(c.partition, "retention",
                                absl::StrCat("the broker no longer holds offsets below ", c.low,
                                             ", where the window may begin"));
        }
      } else if (Span(c) >= options_.max_messages) {
        c.done = true;
        c.fallback = Fallback(c.partition, "window_too_large",
                              absl::StrCat("no message below the confirmed position among the "
                                           "last ",
                                           Span(c), " messages"));
      }
    }
  }

  // A metadata or offsets request's wait: within the read's timeout, so that brokers
  // which do not answer cost the timeout, not 5 s per request.
  int MetadataTimeoutMs() const {
    const int64_t left = absl::ToInt64Milliseconds(deadline_ - absl::Now());
    return static_cast<int>(std::clamp<int64_t>(left, 1, kMetadataTimeoutMs));
  }

  // Offsets read so far in one partition.
  static int64_t Span(const Cursor& c) { return c.high - c.start; }

  const ReadBackOptions& options_;
  const std::string topic_;
  rd_kafka_t* rk_;
  TopicHoldings* out_;
  absl::Time deadline_;  // the read's, options_.timeout after it began
  std::vector<Cursor> cursors_;
};

}  // namespace

uint64_t ParseLsnHeader(std::string_view text) {
  const size_t slash = text.find('/');
  uint32_t high = 0;
  uint32_t low = 0;
  if (slash == std::string_view::npos ||
      !absl::SimpleHexAtoi(absl::string_view(text.data(), slash), &high) ||
      !absl::SimpleHexAtoi(absl::string_view(text.data() + slash + 1, text.size() - slash - 1),
                           &low)) {
    return 0;
  }
  return (uint64_t{high} << 32) | low;
}

absl::StatusOr<TopicHoldings> ReadBackTopic(const ReadBackOptions& options,
                                            std::string_view topic) {
  absl::StatusOr<HandlePtr> rk = MakeConsumer(options);
  if (!rk.ok()) return rk.status();
  TopicHoldings out;
  Reader(options, std::string(topic), rk->get(), &out).Run();
  return out;
}

}  // namespace outboxd::kafka
