#include "chaos/rabbit_node.h"

#include <csignal>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "support/child_process.h"

namespace outboxd::chaos {
namespace {

const std::string kScript = std::string(OUTBOXD_SOURCE_DIR) + "/scripts/rabbitmq";

// Runs argv to its end (at most two minutes: a node boot under load).
absl::Status Run(const std::vector<std::string>& argv) {
  auto child = test::ChildProcess::Start(argv);
  std::optional<int> code = child->Wait(absl::Seconds(120));
  if (code == 0) return absl::OkStatus();
  if (!code) child->Signal(SIGKILL);
  return absl::InternalError(absl::StrCat(argv[0], " ", argv[1], " failed: ", child->Log()));
}

}  // namespace

absl::StatusOr<std::unique_ptr<RabbitNode>> RabbitNode::Start(const std::string& dir) {
  const std::string node_dir = absl::StrCat(dir, "/rabbitmq");
  if (absl::Status s = Run({kScript, "start", node_dir}); !s.ok()) {
    Run({kScript, "stop", node_dir}).IgnoreError();
    return s;
  }
  // DIR/env: export OUTBOXD_TEST_AMQP='amqp://...'
  std::ifstream env(absl::StrCat(node_dir, "/env"));
  const std::string prefix = "export OUTBOXD_TEST_AMQP='";
  for (std::string line; std::getline(env, line);) {
    if (line.rfind(prefix, 0) == 0) {
      return std::unique_ptr<RabbitNode>(
          new RabbitNode(node_dir, line.substr(prefix.size(), line.size() - prefix.size() - 1)));
    }
  }
  return absl::InternalError(absl::StrCat("no OUTBOXD_TEST_AMQP in ", node_dir, "/env"));
}

RabbitNode::~RabbitNode() { Run({kScript, "stop", dir_}).IgnoreError(); }

absl::Status RabbitNode::Ctl(const std::vector<std::string>& args) const {
  std::vector<std::string> argv = {absl::StrCat(dir_, "/rabbitmqctl")};
  argv.insert(argv.end(), args.begin(), args.end());
  return Run(argv);
}

absl::Status RabbitNode::KillAndRestart() const { return Run({kScript, "restart", dir_}); }

}  // namespace outboxd::chaos
