// A PostgreSQL cluster of a test's own (scripts/pg-cluster in a temporary directory),
// for what must not touch the shared test cluster: restarts, other settings,
// password authentication. About 2 s to start.
//
//   PrivateCluster cluster("max_slot_wal_keep_size = 1MB");
//   auto db = TestDatabase::Create(cluster.conninfo());
//   cluster.RestartImmediate();
#ifndef OUTBOXD_TESTS_SUPPORT_PRIVATE_CLUSTER_H_
#define OUTBOXD_TESTS_SUPPORT_PRIVATE_CLUSTER_H_

#include <string>

namespace outboxd::test {

class PrivateCluster {
 public:
  // Extra postgresql.conf lines, e.g. "wal_level = replica".
  explicit PrivateCluster(const std::string& extra_conf = "");
  ~PrivateCluster();  // stops the server and removes the directory

  // The conninfo of the maintenance database, or pg-cluster's error text.
  const std::string& conninfo() const { return conninfo_; }
  const std::string& dir() const { return dir_; }

  // pg_ctl restart -m immediate: a crash and recovery on the same port.
  bool RestartImmediate();
  // Stops the server (immediate) / starts it again on the same port.
  bool Stop();
  bool Start();

 private:
  bool PgCtl(const std::string& args);
  std::string dir_;
  std::string conninfo_;
};

}  // namespace outboxd::test

#endif  // OUTBOXD_TESTS_SUPPORT_PRIVATE_CLUSTER_H_
