// The tests' own NATS JetStream client (connected by nats::Connection, then plain
// libnats, no outboxd code): makes the streams a test needs the sink to meet, and reads a stream
// back through a durable pull consumer, as an independent reader of what nats::Sink stored.
//
//   test::JetStreamClient client(url);
//   client.AddStream("FULL", "full.>", {.max_msgs = 2});
//   for (const test::StoredMessage& m : client.ReadAll("OUTBOXD", "order.>")) ...
#ifndef OUTBOXD_TESTS_SUPPORT_JETSTREAM_CLIENT_H_
#define OUTBOXD_TESTS_SUPPORT_JETSTREAM_CLIENT_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "nats/connection.h"

typedef struct __jsCtx jsCtx;

namespace outboxd::test {

// The shared server's URL (OUTBOXD_TEST_NATS, from scripts/test or DIR/env of
// scripts/nats), or "" when unset: the NATS tests then fail, saying why, as the
// PostgreSQL and RabbitMQ ones do (a skip would read "Passed" in ctest).
std::string TestNatsUrl();
inline constexpr char kNoTestNats[] =
    "OUTBOXD_TEST_NATS not set: run scripts/test, or scripts/nats start DIR and source DIR/env";

struct StoredMessage {
  std::string subject;
  std::string value;
  std::map<std::string, std::string> headers;

  // A header's value, "<missing>" when it has none (a mismatch, not an exception).
  std::string Header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "<missing>" : it->second;
  }
};

struct StreamLimits {
  int64_t max_msgs = -1;      // with discard new: a full stream refuses
  int32_t max_msg_size = -1;  // larger messages are refused
  int64_t replicas = 1;       // 3 on a NatsCluster: an R3 stream
  // With discard new per subject: a subject at its limit refuses, the others take more.
  int64_t max_msgs_per_subject = -1;
};

enum class StreamCall { kAdd, kUpdate };

// Adds (or changes) a file-storage stream taking `subject`, discarding new messages at
// its limits; for the tools that are not tests (the chaos reader) as for the client.
absl::Status PutStream(jsCtx* js, const std::string& name, const std::string& subject,
                       StreamLimits limits, StreamCall call = StreamCall::kAdd);

struct StreamSummary {
  bool file_storage = false;
  absl::Duration duplicate_window;
  uint64_t messages = 0;
  std::string leader;  // on a cluster, the server_name of the stream's leader
};

// A nats-server of the test's own (scripts/nats start), for faults that would disturb
// the shared one; stopped and its directory removed at the end.
//
//   test::PrivateNatsServer server;
//   server.Kill();     // kill -9
//   server.Restart();  // same ports and file store
//   server.Freeze();   // SIGSTOP: what clients send stays unread in its sockets
class PrivateNatsServer {
 public:
  // `config`: extra nats-server.conf lines, each one shell word.
  explicit PrivateNatsServer(const std::string& config = "");
  ~PrivateNatsServer();
  PrivateNatsServer(const PrivateNatsServer&) = delete;
  PrivateNatsServer& operator=(const PrivateNatsServer&) = delete;

  const std::string& url() const { return url_; }
  // False (and a test failure) when the script failed.
  bool Kill() { return Script("kill"); }
  bool Restart() { return Script("restart"); }
  // SIGSTOP: connections stay open and what clients write is left unread, so a Kill()
  // or Restart() after it loses that for sure (a request sent now gets no answer).
  bool Freeze();
  // Restarted (kill -9, same ports and store) with one more nats-server.conf line,
  // which wins over an earlier one of the same key: `max_payload: 1048576`.
  bool RestartWith(const std::string& config_line);

 private:
  bool Script(const char* verb);

  std::string dir_;
  std::string url_;
};

// Three nats-servers in one JetStream cluster of the test's own (scripts/nats
// start-cluster), named n1, n2 and n3 (what StreamSummary::leader names); stopped and
// their directory removed at the end.
//
//   test::NatsCluster cluster;
//   client.AddStream("S", "s.>", {.replicas = 3});
//   cluster.Kill(client.Stream("S")->leader);  // kill -9 of the leader's server
class NatsCluster {
 public:
  NatsCluster();
  ~NatsCluster();
  NatsCluster(const NatsCluster&) = delete;
  NatsCluster& operator=(const NatsCluster&) = delete;

  // The three URLs, comma-separated.
  const std::string& urls() const { return urls_; }
  // kill -9 of one server (n1, n2, n3); false (and a test failure) when the script failed.
  bool Kill(const std::string& server);

 private:
  std::string dir_;
  std::string urls_;
};

class JetStreamClient {
 public:
  // Connects through nats::Connection (src/nats/connection.h), then talks plain
  // libnats JetStream; a failure fails the test.
  explicit JetStreamClient(const std::string& url);
  ~JetStreamClient();
  JetStreamClient(const JetStreamClient&) = delete;
  JetStreamClient& operator=(const JetStreamClient&) = delete;

  // libnats' handles, for a test's own calls (a plain subscription, a publish).
  natsConnection* nc() const { return conn_ == nullptr ? nullptr : conn_->get(); }
  jsCtx* js() const { return js_; }

  // A file-storage stream taking `subject`, discarding new messages at its limits.
  void AddStream(const std::string& name, const std::string& subject, StreamLimits limits = {});
  // The same stream with new limits (js_UpdateStream): a stream made full, raised.
  void UpdateStream(const std::string& name, const std::string& subject, StreamLimits limits);
  // nullopt when the stream does not exist.
  std::optional<StreamSummary> Stream(const std::string& name);
  // Every message of the stream on `subject`, in stream order, through a new durable
  // pull consumer (each call reads from the start).
  std::vector<StoredMessage> ReadAll(const std::string& stream, const std::string& subject);

 private:
  std::unique_ptr<nats::Connection> conn_;
  jsCtx* js_ = nullptr;
  int readers_ = 0;
};

}  // namespace outboxd::test

#endif  // OUTBOXD_TESTS_SUPPORT_JETSTREAM_CLIENT_H_
