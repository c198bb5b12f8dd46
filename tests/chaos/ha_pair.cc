#include "chaos/ha_pair.h"

#include <csignal>
#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "support/child_process.h"

namespace outboxd::chaos {
namespace {

const std::string kScript = std::string(OUTBOXD_SOURCE_DIR) + "/scripts/pg-ha";

// Runs argv to its end (at most three minutes: a base backup under load); its output.
absl::StatusOr<std::string> RunScript(const std::vector<std::string>& argv) {
  auto child = test::ChildProcess::Start(argv);
  std::optional<int> code = child->Wait(absl::Minutes(3));
  if (code == 0) return std::string(absl::StripAsciiWhitespace(child->Log()));
  if (!code) child->Signal(SIGKILL);
  return absl::InternalError(absl::StrCat(absl::StrJoin(argv, " "), " failed: ", child->Log()));
}

}  // namespace

absl::StatusOr<std::unique_ptr<HaPair>> HaPair::Start(const std::string& dir) {
  const std::string ha_dir = absl::StrCat(dir, "/pg-ha");
  if (absl::StatusOr<std::string> s = RunScript({kScript, "start", ha_dir}); !s.ok()) {
    RunScript({kScript, "stop", ha_dir}).IgnoreError();
    return s.status();
  }
  // DIR/env: export OUTBOXD_HA_PG='host=...,... port=...,... ... target_session_attrs=read-write'
  std::ifstream env(absl::StrCat(ha_dir, "/env"));
  const std::string prefix = "export OUTBOXD_HA_PG='";
  for (std::string line; std::getline(env, line);) {
    if (line.rfind(prefix, 0) == 0) {
      return std::unique_ptr<HaPair>(
          new HaPair(ha_dir, line.substr(prefix.size(), line.size() - prefix.size() - 1)));
    }
  }
  return absl::InternalError(absl::StrCat("no OUTBOXD_HA_PG in ", ha_dir, "/env"));
}

HaPair::~HaPair() { Run("stop").IgnoreError(); }

absl::StatusOr<std::string> HaPair::Run(const std::string& command,
                                        const std::vector<std::string>& args) const {
  std::vector<std::string> argv = {kScript, command, dir_};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunScript(argv);
}

absl::StatusOr<std::string> HaPair::Primary() const { return Run("primary"); }

absl::StatusOr<std::string> HaPair::Failover(Exit how) const {
  absl::StatusOr<std::string> old = Primary();
  if (!old.ok()) return old.status();
  if (absl::StatusOr<std::string> s = Run(how == Exit::kKill ? "kill" : "stop-node", {*old});
      !s.ok()) {
    return s.status();
  }
  if (absl::StatusOr<std::string> s = Run("promote", {Other(*old)}); !s.ok()) return s.status();
  return old;
}

absl::Status HaPair::Rebuild(const std::string& node) const {
  return Run("rebuild", {node}).status();
}

}  // namespace outboxd::chaos
