// The broker node of a chaos run on RabbitMQ or NATS: one of our scripts
// (scripts/rabbitmq, scripts/nats) started in the run's directory, so that the relays
// and the reader are its only clients, and the faults those scripts give: kill -9 of
// the node, a start again on the same ports and data; and its tools (rabbitmqctl).
//
//   auto node = BrokerNode::Start("rabbitmq", dir, "OUTBOXD_TEST_AMQP");
//   (*node)->Tool("rabbitmqctl", {"close_all_connections", "chaos"});
//   (*node)->Script("restart");
#ifndef OUTBOXD_TESTS_CHAOS_BROKER_NODE_H_
#define OUTBOXD_TESTS_CHAOS_BROKER_NODE_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace outboxd::chaos {

class BrokerNode {
 public:
  // scripts/<script> start DIR/<script> (a RabbitMQ boot takes 5-15 s, a nats-server's
  // well under one); the URL is `url_variable` of the DIR/env it writes.
  static absl::StatusOr<std::unique_ptr<BrokerNode>> Start(const std::string& script,
                                                           const std::string& dir,
                                                           const std::string& url_variable);
  ~BrokerNode();  // scripts/<script> stop

  const std::string& url() const { return url_; }
  // scripts/<script> COMMAND DIR: "kill" (-9), "restart" (kill -9 if running, then a start
  // on the same ports and data); its output on failure.
  absl::Status Script(const std::string& command) const;
  // DIR/TOOL ARGS... (rabbitmqctl); its output on failure.
  absl::Status Tool(const std::string& tool, const std::vector<std::string>& args) const;
  // The server's process id, from DIR/server.pid (scripts/nats).
  absl::StatusOr<pid_t> ServerPid() const;

 private:
  BrokerNode(std::string script, std::string dir, std::string url)
      : script_(std::move(script)), dir_(std::move(dir)), url_(std::move(url)) {}
  const std::string script_;
  const std::string dir_;
  const std::string url_;
};

}  // namespace outboxd::chaos

#endif  // OUTBOXD_TESTS_CHAOS_BROKER_NODE_H_
