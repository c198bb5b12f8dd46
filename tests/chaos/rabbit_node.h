// The RabbitMQ node of a chaos run: scripts/rabbitmq start in the run's directory, so
// that the relays and the reader are the only clients, and the node's faults: a kill
// -9 and restart on the same data, `rabbitmqctl close_all_connections`, a memory alarm.
//
//   auto node = RabbitNode::Start(dir);
//   (*node)->Ctl({"close_all_connections", "chaos"});
//   (*node)->KillAndRestart();
#ifndef OUTBOXD_TESTS_CHAOS_RABBIT_NODE_H_
#define OUTBOXD_TESTS_CHAOS_RABBIT_NODE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace outboxd::chaos {

class RabbitNode {
 public:
  // A node under `dir`/rabbitmq (5-15 s to boot).
  static absl::StatusOr<std::unique_ptr<RabbitNode>> Start(const std::string& dir);
  ~RabbitNode();  // scripts/rabbitmq stop

  const std::string& url() const { return url_; }
  // DIR/rabbitmqctl ARGS...; its output on failure.
  absl::Status Ctl(const std::vector<std::string>& args) const;
  // kill -9 of the node, then a start on the same ports and data.
  absl::Status KillAndRestart() const;

 private:
  RabbitNode(std::string dir, std::string url) : dir_(std::move(dir)), url_(std::move(url)) {}
  const std::string dir_;
  const std::string url_;
};

}  // namespace outboxd::chaos

#endif  // OUTBOXD_TESTS_CHAOS_RABBIT_NODE_H_
