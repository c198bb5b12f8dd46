#include "chaos/broker_node.h"

#include <csignal>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "support/child_process.h"

namespace outboxd::chaos {
namespace {

std::string ScriptPath(const std::string& script) {
  return absl::StrCat(OUTBOXD_SOURCE_DIR, "/scripts/", script);
}

// Runs argv to its end (at most two minutes: a node boot under load).
absl::Status Run(const std::vector<std::string>& argv) {
  auto child = test::ChildProcess::Start(argv);
  std::optional<int> code = child->Wait(absl::Seconds(120));
  if (code == 0) return absl::OkStatus();
  if (!code) child->Signal(SIGKILL);
  return absl::InternalError(absl::StrCat(absl::StrJoin(argv, " "), " failed: ", child->Log()));
}

}  // namespace

absl::StatusOr<std::unique_ptr<BrokerNode>> BrokerNode::Start(const std::string& script,
                                                              const std::string& dir,
                                                              const std::string& url_variable) {
  const std::string node_dir = absl::StrCat(dir, "/", script);
  if (absl::Status s = Run({ScriptPath(script), "start", node_dir}); !s.ok()) {
    Run({ScriptPath(script), "stop", node_dir}).IgnoreError();
    return s;
  }
  // DIR/env: export VARIABLE='url'
  std::ifstream env(absl::StrCat(node_dir, "/env"));
  const std::string prefix = absl::StrCat("export ", url_variable, "='");
  for (std::string line; std::getline(env, line);) {
    if (line.rfind(prefix, 0) == 0) {
      return std::unique_ptr<BrokerNode>(new BrokerNode(
          script, node_dir, line.substr(prefix.size(), line.size() - prefix.size() - 1)));
    }
  }
  return absl::InternalError(absl::StrCat("no ", url_variable, " in ", node_dir, "/env"));
}

BrokerNode::~BrokerNode() { Script("stop").IgnoreError(); }

absl::Status BrokerNode::Script(const std::string& command) const {
  return Run({ScriptPath(script_), command, dir_});
}

absl::Status BrokerNode::Tool(const std::string& tool, const std::vector<std::string>& args) const {
  std::vector<std::string> argv = {absl::StrCat(dir_, "/", tool)};
  argv.insert(argv.end(), args.begin(), args.end());
  return Run(argv);
}

absl::StatusOr<pid_t> BrokerNode::ServerPid() const {
  std::ifstream file(absl::StrCat(dir_, "/server.pid"));
  std::string text;
  pid_t pid = 0;
  if (!std::getline(file, text) || !absl::SimpleAtoi(text, &pid) || pid <= 0) {
    return absl::NotFoundError(absl::StrCat("no server pid in ", dir_, "/server.pid"));
  }
  return pid;
}

}  // namespace outboxd::chaos
