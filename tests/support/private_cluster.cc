#include "support/private_cluster.h"

#include <stdlib.h>

#include <array>
#include <cstdio>

#include "gtest/gtest.h"

namespace outboxd::test {
namespace {

std::string Script() { return std::string(OUTBOXD_SOURCE_DIR) + "/scripts/pg-cluster"; }

}  // namespace

PrivateCluster::PrivateCluster(const std::string& extra_conf) {
  char dir[] = "/tmp/outboxd-pgtest-XXXXXX";
  dir_ = ::mkdtemp(dir);
  std::string command = Script() + " start " + dir_ + " '" + extra_conf + "' 2>&1";
  FILE* out = ::popen(command.c_str(), "r");
  std::array<char, 512> line{};
  while (out != nullptr && std::fgets(line.data(), line.size(), out)) conninfo_ = line.data();
  if (out != nullptr) ::pclose(out);
  while (!conninfo_.empty() && conninfo_.back() == '\n') conninfo_.pop_back();
}

PrivateCluster::~PrivateCluster() {
  EXPECT_EQ(std::system((Script() + " stop " + dir_).c_str()), 0);
}

bool PrivateCluster::RestartImmediate() {
  return std::system((Script() + " restart " + dir_ + " >/dev/null").c_str()) == 0;
}

bool PrivateCluster::PgCtl(const std::string& args) {
  std::string command =
      "bindir=${OUTBOXD_PG_BINDIR:-$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)}; "
      "runuser -u postgres -- \"$bindir/pg_ctl\" -D " +
      dir_ + "/data -l " + dir_ + "/server.log -w -t 60 " + args + " >/dev/null";
  if (::geteuid() != 0)
    command =
        "bindir=${OUTBOXD_PG_BINDIR:-$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)}; "
        "\"$bindir/pg_ctl\" -D " +
        dir_ + "/data -l " + dir_ + "/server.log -w -t 60 " + args + " >/dev/null";
  return std::system(command.c_str()) == 0;
}

bool PrivateCluster::Stop() { return PgCtl("-m immediate stop"); }
bool PrivateCluster::Start() { return PgCtl("start"); }

}  // namespace outboxd::test
