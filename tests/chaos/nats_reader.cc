#include "chaos/nats_reader.h"

#include <nats/nats.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "support/jetstream_client.h"
#include "support/wait_until.h"

namespace outboxd::chaos {
namespace {

// Messages per fetch: a round reads what a few seconds of load wrote in a few fetches.
constexpr int kBatch = 256;
// A consumer a cut round leaves behind is removed by the server after this idle time.
constexpr absl::Duration kConsumerIdle = absl::Seconds(10);

std::string Header(natsMsg* m, const char* name) {
  const char* value = nullptr;
  return natsMsgHeader_Get(m, name, &value) == NATS_OK && value != nullptr ? value : "";
}

absl::Status Failed(const char* what, natsStatus s) {
  return absl::UnavailableError(absl::StrCat(what, ": ", natsStatus_GetText(s)));
}

// The stream as the relay would make it (file storage, the default duplicate
// window), unless it exists.
absl::Status MakeStream(jsCtx* js, const std::string& stream, const std::string& subject) {
  jsStreamInfo* info = nullptr;
  jsErrCode code{};
  if (js_GetStreamInfo(&info, js, stream.c_str(), nullptr, &code) == NATS_OK) {
    jsStreamInfo_Destroy(info);
    return absl::OkStatus();
  }
  return test::PutStream(js, stream, subject, {});
}

}  // namespace

absl::StatusOr<std::unique_ptr<NatsReader>> NatsReader::Start(const std::string& url,
                                                              const std::string& stream,
                                                              const std::string& subject) {
  // nats::Connection reconnects for ever, 100 ms apart: the faults stop the server
  // on purpose, and the reader comes back as soon as it is up.
  absl::StatusOr<std::unique_ptr<nats::Connection>> conn = nats::Connection::Open(
      {.url = url, .name = "outboxd-chaos reader", .unreachable = nats::Unreachable::kFail});
  if (!conn.ok()) return conn.status();
  jsCtx* js = nullptr;
  if (natsStatus s = natsConnection_JetStream(&js, (*conn)->get(), nullptr); s != NATS_OK) {
    return Failed("natsConnection_JetStream", s);
  }
  std::unique_ptr<NatsReader> reader(new NatsReader(*std::move(conn), js, stream, subject));
  if (absl::Status made = MakeStream(js, stream, subject); !made.ok()) return made;
  reader->thread_ = std::thread([r = reader.get()] { r->Run(); });
  return reader;
}

NatsReader::~NatsReader() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  jsCtx_Destroy(js_);
}

absl::StatusOr<uint64_t> NatsReader::LastSequence() const {
  jsStreamInfo* info = nullptr;
  jsErrCode code{};
  natsStatus s = js_GetStreamInfo(&info, js_, stream_.c_str(), nullptr, &code);
  if (s != NATS_OK) return Failed("stream info", s);
  const uint64_t last = info->State.LastSeq;
  jsStreamInfo_Destroy(info);
  return last;
}

uint64_t NatsReader::ReadRange(uint64_t from, uint64_t last, std::vector<Delivery>& out) {
  jsSubOptions so;
  jsSubOptions_Init(&so);
  so.Stream = stream_.c_str();
  so.Config.DeliverPolicy = js_DeliverByStartSequence;
  so.Config.OptStartSeq = from;
  // A pull consumer needs acks in 2.9: one per fetch, for all before it.
  so.Config.AckPolicy = js_AckAll;
  so.Config.InactiveThreshold = absl::ToInt64Nanoseconds(kConsumerIdle);
  natsSubscription* sub = nullptr;
  jsErrCode code{};
  if (js_PullSubscribe(&sub, js_, subject_.c_str(), nullptr, nullptr, &so, &code) != NATS_OK) {
    return from;
  }
  uint64_t next = from;
  while (next <= last && !stop_) {
    natsMsgList list{};
    const int want = static_cast<int>(std::min<uint64_t>(kBatch, last - next + 1));
    const natsStatus s = natsSubscription_Fetch(&list, sub, want, 2000, &code);
    for (int i = 0; i < list.Count; ++i) {
      natsMsg* m = list.Msgs[i];
      jsMsgMetaData* meta = nullptr;
      if (natsMsg_GetMetaData(&meta, m) != NATS_OK) continue;
      const uint64_t seq = meta->Sequence.Stream;
      jsMsgMetaData_Destroy(meta);
      if (seq < next) continue;
      out.push_back(Delivery{.partition = 0,
                             .offset = static_cast<int64_t>(seq),
                             .id = Header(m, "id"),
                             .aggregate = Header(m, "aggregate_id"),
                             .lsn = Header(m, "lsn")});
      next = seq + 1;
    }
    if (list.Count > 0) natsMsg_Ack(list.Msgs[list.Count - 1], nullptr);
    natsMsgList_Destroy(&list);
    // A timeout or a cut connection ends the round; the next starts at `next`.
    if (s != NATS_OK) break;
  }
  natsSubscription_Unsubscribe(sub);  // deletes the consumer (a dead server: idle expiry)
  natsSubscription_Destroy(sub);
  return next;
}

void NatsReader::Run() {
  while (!stop_) {
    absl::StatusOr<uint64_t> last = LastSequence();
    if (last.ok() && *last >= next_) {
      std::vector<Delivery> batch;
      next_ = ReadRange(next_, *last, batch);
      Record(batch);
      if (next_ > *last) continue;
    }
    // Caught up, or the server is away (killed, paused): look again soon.
    absl::SleepFor(absl::Milliseconds(100));
  }
}

bool NatsReader::WaitCaughtUp(absl::Duration timeout) const {
  uint64_t caught_up_at = 0;  // the last sequence when everything up to it was read
  return test::WaitUntil(
      timeout,
      [&] {
        absl::StatusOr<uint64_t> last = LastSequence();
        if (!last.ok() || next_ <= *last) return false;
        if (*last == caught_up_at) return true;
        caught_up_at = *last;
        return false;
      },
      absl::Seconds(1));
}

std::vector<Delivery> NatsReader::StopAndTake() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  stop_ = false;  // ReadRange reads while not stopped
  std::vector<Delivery> all;
  uint64_t next = 1;
  test::WaitUntil(absl::Minutes(2), [&] {
    absl::StatusOr<uint64_t> last = LastSequence();
    if (last.ok() && next <= *last) next = ReadRange(next, *last, all);
    return last.ok() && next > *last;
  });
  stop_ = true;
  return all;
}

}  // namespace outboxd::chaos
