#include "support/server_script.h"

#include <unistd.h>

#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "support/child_process.h"

namespace outboxd::test {

ServerScript::ServerScript(std::string name)
    : script_(std::string(OUTBOXD_SOURCE_DIR) + "/scripts/" + name),
      dir_(::testing::TempDir() + name + "-" + std::to_string(getpid())) {
  EXPECT_EQ(Run({"start"}, absl::Minutes(3)), 0);
  std::ifstream env(dir_ + "/env");
  for (std::string line; std::getline(env, line);) {
    // export NAME='value'
    std::vector<std::string> parts = absl::StrSplit(line, absl::MaxSplits('=', 1));
    if (parts.size() == 2) vars_[parts[0].substr(7)] = parts[1].substr(1, parts[1].size() - 2);
  }
}

ServerScript::~ServerScript() { Run({"stop"}, absl::Minutes(1)); }

std::vector<std::string> ServerScript::Command(std::vector<std::string> args) const {
  args.insert(args.begin() + 1, dir_);
  args.insert(args.begin(), script_);
  return args;
}

int ServerScript::Run(std::vector<std::string> args, absl::Duration timeout) {
  args = Command(std::move(args));
  auto script = ChildProcess::Start(args);
  const int code = script->Wait(timeout).value_or(-1);
  if (code != 0) ADD_FAILURE() << absl::StrJoin(args, " ") << ":\n" << script->Log();
  return code;
}

std::string ServerScript::Output(std::vector<std::string> args) {
  auto script = ChildProcess::Start(Command(std::move(args)));
  script->Wait(absl::Seconds(30));
  return std::string(absl::StripAsciiWhitespace(script->Log()));
}

std::string ServerScript::Var(const std::string& name) const {
  auto it = vars_.find(name);
  return it == vars_.end() ? "" : it->second;
}

}  // namespace outboxd::test
