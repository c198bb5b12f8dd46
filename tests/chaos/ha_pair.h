// The PostgreSQL side of a chaos run with --replica: scripts/pg-ha's primary and
// streaming standby in the run's directory, and the two failover faults. Each ends
// with the standby promoted; the driver then rebuilds the old primary as the new
// one's standby (pg_basebackup over the physical slot node_<old>).
//
//   auto ha = HaPair::Start(dir);
//   absl::StatusOr<std::string> old = (*ha)->Failover(HaPair::Exit::kKill);
//   (*ha)->Rebuild(*old);
#ifndef OUTBOXD_TESTS_CHAOS_HA_PAIR_H_
#define OUTBOXD_TESTS_CHAOS_HA_PAIR_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace outboxd::chaos {

class HaPair {
 public:
  // How the primary goes before its standby is promoted.
  enum class Exit {
    kKill,  // kill -9 of its processes: a crash, whatever the standby had not flushed is lost
    kStop,  // fast shutdown: the standby receives everything first (a switchover)
  };

  // Nodes a and b under `dir`/pg-ha (about 10 s: initdb, a base backup).
  static absl::StatusOr<std::unique_ptr<HaPair>> Start(const std::string& dir);
  ~HaPair();  // scripts/pg-ha stop

  // Both hosts, target_session_attrs=read-write: whichever is primary.
  const std::string& conninfo() const { return conninfo_; }
  const std::string& dir() const { return dir_; }
  // "a" or "b".
  absl::StatusOr<std::string> Primary() const;
  static std::string Other(const std::string& node) { return node == "a" ? "b" : "a"; }
  // The physical slot the primary keeps for `node` as its standby.
  static std::string SlotOf(const std::string& node) { return "node_" + node; }
  // The primary goes (`how`) and its standby is promoted; returns the old primary.
  absl::StatusOr<std::string> Failover(Exit how) const;
  // `node` wiped and made the primary's streaming standby.
  absl::Status Rebuild(const std::string& node) const;

 private:
  HaPair(std::string dir, std::string conninfo)
      : dir_(std::move(dir)), conninfo_(std::move(conninfo)) {}
  // scripts/pg-ha COMMAND DIR ARGS...; its output.
  absl::StatusOr<std::string> Run(const std::string& command,
                                  const std::vector<std::string>& args = {}) const;

  const std::string dir_;
  const std::string conninfo_;
};

}  // namespace outboxd::chaos

#endif  // OUTBOXD_TESTS_CHAOS_HA_PAIR_H_
