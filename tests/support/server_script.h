// ServerScript: one of our scripts that start a throwaway server group on loopback
// (scripts/pg-ha, scripts/patroni): `start DIR` in the constructor, `stop DIR` in the
// destructor, the variables its DIR/env exports, and any other command run on DIR.
//   ServerScript ha("pg-ha");
//   ha.Run({"kill", "a"});  std::string pg = ha.Var("OUTBOXD_HA_PG");
#ifndef OUTBOXD_TESTS_SUPPORT_SERVER_SCRIPT_H_
#define OUTBOXD_TESTS_SUPPORT_SERVER_SCRIPT_H_

#include <map>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace outboxd::test {

class ServerScript {
 public:
  // scripts/<name> start DIR (a test failure if it does not exit 0).
  explicit ServerScript(std::string name);
  ~ServerScript();
  ServerScript(const ServerScript&) = delete;
  ServerScript& operator=(const ServerScript&) = delete;

  // scripts/<name> COMMAND DIR ARGS...: its exit code (a test failure if not 0).
  int Run(std::vector<std::string> args, absl::Duration timeout = absl::Minutes(2));
  // The same, for its output (whitespace stripped).
  std::string Output(std::vector<std::string> args);
  // A variable of DIR/env ("" if absent).
  std::string Var(const std::string& name) const;
  const std::string& dir() const { return dir_; }

 private:
  std::vector<std::string> Command(std::vector<std::string> args) const;

  std::string script_;
  std::string dir_;
  std::map<std::string, std::string> vars_;
};

}  // namespace outboxd::test

#endif  // OUTBOXD_TESTS_SUPPORT_SERVER_SCRIPT_H_
