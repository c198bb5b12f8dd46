// outboxd-example-nats-reader: a consumer of what `outboxd run --sink nats` publishes,
// written with libnats' JetStream calls as an application's would be (only the
// connection is outboxd's, nats/connection.h, for the same URL forms): a durable pull
// consumer on the JetStream stream, each message printed with its subject, stream
// sequence and headers and acknowledged once handled. A message whose id it has handled
// already is skipped: JetStream drops a repeated Nats-Msg-Id only within the stream's
// duplicate window, and a consumer whose ack was lost gets a message again. The demo's
// consumer (scripts/demo --sink nats); with --publish it instead publishes stdin once,
// as a relay publishing an event again would, and prints the PubAck.
//
//   $ outboxd-example-nats-reader --nats-url nats://127.0.0.1:4222 --subject 'pedido.>'
//   pedido.confirmado seq=1 Nats-Msg-Id=0b6f1a52-... aggregate_id=pedido-1;created_at=...
//       body={"pedido_id": "pedido-1", ...}
//   $ outboxd-example-nats-reader --nats-url ... --publish pedido.confirmado \
//       --msg-id 0b6f1a52-... <payload.json
//   PubAck: stream OUTBOXD seq 1 duplicate=true
//
// Exit codes: 0 published (--publish), 1 a publish refused, 2 bad flags or no server;
// reading runs until killed.
#include <nats/nats.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "nats/connection.h"

namespace {

struct Flags {
  std::string url;
  std::string stream = "OUTBOXD";
  std::string subject = ">";
  std::string durable = "example-reader";
  std::string publish;  // a subject: publish stdin there instead of reading
  std::string msg_id;
};

// "name=value;..." of the message's headers by name, but JetStream's own (Nats-Msg-Id,
// shown apart, and Nats-Expected-Stream, the publisher's expectation).
std::string Headers(natsMsg* m) {
  const char** keys = nullptr;
  int count = 0;
  if (natsMsgHeader_Keys(m, &keys, &count) != NATS_OK) return "";
  std::vector<std::string> names(keys, keys + count);
  free(keys);  // the array only (nats.h, natsMsgHeader_Keys)
  std::sort(names.begin(), names.end());
  std::string out;
  for (const std::string& name : names) {
    if (name.rfind("Nats-", 0) == 0) continue;
    const char* value = nullptr;
    if (natsMsgHeader_Get(m, name.c_str(), &value) != NATS_OK) continue;
    out += (out.empty() ? "" : ";") + name + "=" + value;
  }
  return out;
}

std::string Header(natsMsg* m, const char* name) {
  const char* value = nullptr;
  return natsMsgHeader_Get(m, name, &value) == NATS_OK ? value : "";
}

// Prints one message, or that it was skipped; `seen` holds the ids handled.
void Handle(natsMsg* m, std::set<std::string>& seen) {
  const std::string id = Header(m, "Nats-Msg-Id");
  if (!seen.insert(id).second) {
    std::cout << "duplicate " << id << ": skipped" << std::endl;
    return;
  }
  uint64_t seq = 0;
  jsMsgMetaData* meta = nullptr;
  if (natsMsg_GetMetaData(&meta, m) == NATS_OK) {
    seq = meta->Sequence.Stream;
    jsMsgMetaData_Destroy(meta);
  }
  std::cout << natsMsg_GetSubject(m) << " seq=" << seq << " Nats-Msg-Id=" << id
            << " headers=" << Headers(m)
            << "\n    body=" << std::string(natsMsg_GetData(m), natsMsg_GetDataLength(m))
            << std::endl;
}

// Waits for the stream (the relay creates it when it starts), then reads for ever.
int Read(jsCtx* js, const Flags& flags) {
  jsStreamInfo* info = nullptr;
  while (js_GetStreamInfo(&info, js, flags.stream.c_str(), nullptr, nullptr) != NATS_OK) {
    nats_Sleep(100);
  }
  jsStreamInfo_Destroy(info);
  jsSubOptions so;
  jsSubOptions_Init(&so);
  so.Stream = flags.stream.c_str();
  natsSubscription* sub = nullptr;
  jsErrCode code = static_cast<jsErrCode>(0);
  if (js_PullSubscribe(&sub, js, flags.subject.c_str(), flags.durable.c_str(), nullptr, &so,
                       &code) != NATS_OK) {
    std::cerr << "cannot consume " << flags.stream << ": " << nats_GetLastError(nullptr)
              << std::endl;
    return 2;
  }
  std::set<std::string> seen;
  while (true) {
    natsMsgList list{};
    natsSubscription_Fetch(&list, sub, 10, 1000, &code);  // NATS_TIMEOUT when idle
    for (int i = 0; i < list.Count; ++i) {
      Handle(list.Msgs[i], seen);
      natsMsg_Ack(list.Msgs[i], nullptr);  // after the message was handled
    }
    natsMsgList_Destroy(&list);
  }
}

int Publish(jsCtx* js, const Flags& flags) {
  const std::string body{std::istreambuf_iterator<char>(std::cin),
                         std::istreambuf_iterator<char>()};
  natsMsg* msg = nullptr;
  natsMsg_Create(&msg, flags.publish.c_str(), nullptr, body.data(), static_cast<int>(body.size()));
  jsPubOptions po;
  jsPubOptions_Init(&po);
  po.MsgId = flags.msg_id.c_str();
  jsPubAck* ack = nullptr;
  jsErrCode code = static_cast<jsErrCode>(0);
  const natsStatus s = js_PublishMsg(&ack, js, msg, &po, &code);
  natsMsg_Destroy(msg);
  if (s != NATS_OK) {
    std::cout << "refused: " << nats_GetLastError(nullptr) << std::endl;
    return 1;
  }
  std::cout << "PubAck: stream " << ack->Stream << " seq " << ack->Sequence
            << " duplicate=" << (ack->Duplicate ? "true" : "false") << std::endl;
  jsPubAck_Destroy(ack);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  CLI::App app("Reads (or publishes once to) the JetStream stream outboxd publishes to");
  app.add_option("--nats-url", flags.url, "NATS URL nats://host:4222")->required();
  app.add_option("--stream", flags.stream, "The JetStream stream")->capture_default_str();
  app.add_option("--subject", flags.subject, "Subjects to read")->capture_default_str();
  app.add_option("--durable", flags.durable, "The durable consumer's name")->capture_default_str();
  app.add_option("--publish", flags.publish, "Publish stdin to this subject once instead");
  app.add_option("--msg-id", flags.msg_id, "With --publish: its Nats-Msg-Id");
  CLI11_PARSE(app, argc, argv);
  auto connection =
      outboxd::nats::Connection::Open({.url = flags.url,
                                       .name = "outboxd-example-nats-reader",
                                       .unreachable = outboxd::nats::Unreachable::kFail});
  jsCtx* js = nullptr;
  if (!connection.ok() || natsConnection_JetStream(&js, (*connection)->get(), nullptr) != NATS_OK) {
    std::cerr << (connection.ok() ? nats_GetLastError(nullptr) : connection.status().message())
              << std::endl;
    return 2;
  }
  const int code = flags.publish.empty() ? Read(js, flags) : Publish(js, flags);
  jsCtx_Destroy(js);
  return code;
}
