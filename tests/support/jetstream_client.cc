#include "support/jetstream_client.h"

#include <nats/nats.h>
#include <stdlib.h>

#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "support/wait_until.h"

namespace outboxd::test {
namespace {

constexpr char kScript[] = OUTBOXD_SOURCE_DIR "/scripts/nats";

// Runs `command` with sh; its output, prefixed "failed: " when it exits non-zero.
std::string RunCommand(const std::string& command) {
  std::string output;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return "failed: popen";
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) output.append(buffer, n);
  return pclose(pipe) == 0 ? output : "failed: " + output;
}

// A new directory for scripts/nats, "" (and a test failure) when none could be made.
std::string MakeDir() {
  char dir[] = "/tmp/outboxd-test-nats.XXXXXX";
  if (mkdtemp(dir) != nullptr) return dir;
  ADD_FAILURE() << "mkdtemp failed";
  return "";
}

// scripts/nats VERB DIR ARGS: the first line of its output, the URL(s) a start prints.
std::string Start(const std::string& verb, const std::string& dir, const std::string& args) {
  const std::string out = RunCommand(std::string(kScript) + " " + verb + " " + dir + " " + args);
  EXPECT_NE(out.find("nats://"), std::string::npos) << out;
  return out.substr(0, out.find('\n'));
}

// RunCommand, and a test failure with its output when it fails.
bool RunChecked(const std::string& command) {
  const std::string out = RunCommand(command);
  const bool ok = out.rfind("failed", 0) != 0;
  EXPECT_TRUE(ok) << out;
  return ok;
}

// scripts/nats VERB DIR: false (and a test failure) when it failed.
bool RunVerb(const std::string& verb, const std::string& dir) {
  return RunChecked(std::string(kScript) + " " + verb + " " + dir);
}

StoredMessage ToStored(natsMsg* m) {
  StoredMessage got{
      natsMsg_GetSubject(m), std::string(natsMsg_GetData(m), natsMsg_GetDataLength(m)), {}};
  const char** keys = nullptr;
  int count = 0;
  if (natsMsgHeader_Keys(m, &keys, &count) == NATS_OK) {
    for (int k = 0; k < count; ++k) {
      const char* value = nullptr;
      if (natsMsgHeader_Get(m, keys[k], &value) == NATS_OK) got.headers[keys[k]] = value;
    }
    free(keys);  // the array only (nats.h, natsMsgHeader_Keys)
  }
  return got;
}

}  // namespace

std::string TestNatsUrl() {
  const char* url = std::getenv("OUTBOXD_TEST_NATS");
  return url == nullptr ? "" : url;
}

PrivateNatsServer::PrivateNatsServer(const std::string& config) : dir_(MakeDir()) {
  if (!dir_.empty()) url_ = Start("start", dir_, config);
}

PrivateNatsServer::~PrivateNatsServer() {
  if (!dir_.empty()) RunCommand(std::string(kScript) + " stop " + dir_);
}

// kill returns once the signal is queued; each thread stops when it next runs, so
// this waits until /proc shows every thread stopped (T).
bool PrivateNatsServer::Freeze() {
  return RunChecked("pid=$(cat " + dir_ +
                    "/server.pid) && kill -STOP $pid && for i in $(seq 500); do "
                    "awk '{print $3}' /proc/$pid/task/*/stat | grep -qv T || exit 0; "
                    "sleep 0.01; done; echo not stopped; exit 1");
}

bool PrivateNatsServer::Script(const char* verb) { return RunVerb(verb, dir_); }

NatsCluster::NatsCluster() : dir_(MakeDir()) {
  if (!dir_.empty()) urls_ = Start("start-cluster", dir_, "");
}

NatsCluster::~NatsCluster() {
  if (!dir_.empty()) RunCommand(std::string(kScript) + " stop-cluster " + dir_);
}

bool NatsCluster::Kill(const std::string& server) {
  // Only the cluster's own: a name from elsewhere must not make a path out of it.
  if (server != "n1" && server != "n2" && server != "n3") {
    ADD_FAILURE() << "no server " << server << " in the cluster";
    return false;
  }
  return RunVerb("kill", dir_ + "/" + server);
}

bool PrivateNatsServer::RestartWith(const std::string& config_line) {
  FILE* config = std::fopen((dir_ + "/nats-server.conf").c_str(), "a");
  if (config == nullptr) {
    ADD_FAILURE() << "cannot append to " << dir_ << "/nats-server.conf";
    return false;
  }
  std::fprintf(config, "%s\n", config_line.c_str());
  std::fclose(config);
  return Restart();
}

absl::Status PutStream(jsCtx* js, const std::string& name, const std::string& subject,
                       StreamLimits limits, StreamCall call) {
  jsStreamConfig config;
  jsStreamConfig_Init(&config);
  const char* subjects[] = {subject.c_str()};
  config.Name = name.c_str();
  config.Subjects = subjects;
  config.SubjectsLen = 1;
  config.Storage = js_FileStorage;
  config.MaxMsgs = limits.max_msgs;
  config.MaxMsgSize = limits.max_msg_size;
  config.MaxMsgsPerSubject = limits.max_msgs_per_subject;
  config.Discard = js_DiscardNew;
  config.Replicas = limits.replicas;
  config.DiscardNewPerSubject = limits.max_msgs_per_subject > 0;
  jsStreamInfo* info = nullptr;
  jsErrCode code{};
  const natsStatus s = call == StreamCall::kAdd
                           ? js_AddStream(&info, js, &config, nullptr, &code)
                           : js_UpdateStream(&info, js, &config, nullptr, &code);
  jsStreamInfo_Destroy(info);
  if (s == NATS_OK) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat("stream ", name, ": ", natsStatus_GetText(s),
                                             " (JetStream error code ", code, ")"));
}

JetStreamClient::JetStreamClient(const std::string& url) {
  absl::StatusOr<std::unique_ptr<nats::Connection>> conn = nats::Connection::Open(
      {.url = url, .name = "outboxd tests", .unreachable = nats::Unreachable::kFail});
  if (!conn.ok()) {
    ADD_FAILURE() << conn.status();
    return;
  }
  conn_ = *std::move(conn);
  EXPECT_EQ(natsConnection_JetStream(&js_, conn_->get(), nullptr), NATS_OK);
}

JetStreamClient::~JetStreamClient() { jsCtx_Destroy(js_); }

void JetStreamClient::AddStream(const std::string& name, const std::string& subject,
                                StreamLimits limits) {
  absl::Status put = PutStream(js_, name, subject, limits, StreamCall::kAdd);
  EXPECT_TRUE(put.ok()) << put;
}

void JetStreamClient::UpdateStream(const std::string& name, const std::string& subject,
                                   StreamLimits limits) {
  absl::Status put = PutStream(js_, name, subject, limits, StreamCall::kUpdate);
  EXPECT_TRUE(put.ok()) << put;
}

std::optional<StreamSummary> JetStreamClient::Stream(const std::string& name) {
  jsStreamInfo* info = nullptr;
  jsErrCode code;
  if (js_GetStreamInfo(&info, js_, name.c_str(), nullptr, &code) != NATS_OK) return std::nullopt;
  StreamSummary summary{.file_storage = info->Config->Storage == js_FileStorage,
                        .duplicate_window = absl::Nanoseconds(info->Config->Duplicates),
                        .messages = info->State.Msgs,
                        .leader = info->Cluster != nullptr && info->Cluster->Leader != nullptr
                                      ? info->Cluster->Leader
                                      : ""};
  jsStreamInfo_Destroy(info);
  return summary;
}

std::vector<StoredMessage> JetStreamClient::ReadAll(const std::string& stream,
                                                    const std::string& subject) {
  std::vector<StoredMessage> out;
  const std::optional<StreamSummary> summary = Stream(stream);
  if (!summary.has_value()) return out;
  jsSubOptions so;
  jsSubOptions_Init(&so);
  so.Stream = stream.c_str();
  // One replica: on a cluster missing a server an R3 consumer may not be placed.
  so.Config.Replicas = 1;
  natsSubscription* sub = nullptr;
  jsErrCode code;
  natsStatus subscribed = NATS_OK;
  // A cluster that just lost a server may time out a consumer's creation a while.
  EXPECT_TRUE(WaitUntil(absl::Seconds(30),
                        [&] {
                          const std::string durable = "reader" + std::to_string(++readers_);
                          subscribed = js_PullSubscribe(&sub, js_, subject.c_str(), durable.c_str(),
                                                        nullptr, &so, &code);
                          return subscribed == NATS_OK;
                        }))
      << natsStatus_GetText(subscribed) << ", error code " << code;
  // Until the stream's count at the start: no waiting out a fetch's timeout at the end.
  while (out.size() < summary->messages) {
    natsMsgList list{};
    const natsStatus s = natsSubscription_Fetch(&list, sub, 256, 5000, &code);
    for (int i = 0; i < list.Count; ++i) {
      out.push_back(ToStored(list.Msgs[i]));
      natsMsg_Ack(list.Msgs[i], nullptr);
    }
    natsMsgList_Destroy(&list);
    if (s != NATS_OK) break;
  }
  natsSubscription_Unsubscribe(sub);
  natsSubscription_Destroy(sub);
  return out;
}

}  // namespace outboxd::test
