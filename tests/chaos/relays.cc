#include "chaos/relays.h"

#include <csignal>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "pg/connection.h"

namespace outboxd::chaos {
namespace {

std::string LastLine(const std::string& log) {
  size_t end = log.find_last_not_of('\n');
  if (end == std::string::npos) return "";
  size_t start = log.rfind('\n', end);
  start = start == std::string::npos ? 0 : start + 1;
  return log.substr(start, end - start + 1);
}

}  // namespace

RelayPair::RelayPair(RelayConfig config) : config_(std::move(config)), pg_args_(config_.pg_args) {
  instances_[0].name = "relay-a";
  instances_[1].name = "relay-b";
}

RelayPair::~RelayPair() {
  stop_ = true;
  if (supervisor_.joinable()) supervisor_.join();
  std::lock_guard lock(mu_);
  for (Instance& in : instances_) {
    if (in.process != nullptr) {
      in.process->Signal(SIGKILL);
      ReapLocked(in, in.process->Wait(absl::Seconds(10)).value_or(-1));
    }
  }
}

void RelayPair::StartLocked(Instance& in) {
  // application_name tells pg_stat_replication which instance holds the slot.
  std::vector<std::string> argv = {
      test::BinPath("outboxd"),
      "run",
      "--pg",
      absl::StrCat(config_.relay_conninfo.empty() ? config_.conninfo : config_.relay_conninfo,
                   " application_name=", in.name),
      "--slot",
      config_.slot,
      "--metrics",
      "127.0.0.1:0"};
  argv.insert(argv.end(), config_.sink_args.begin(), config_.sink_args.end());
  argv.insert(argv.end(), pg_args_.begin(), pg_args_.end());
  if (single_in_flight_) {
    argv.insert(argv.end(), {"--kafka", "max.in.flight.requests.per.connection=1"});
  }
  in.process = test::ChildProcess::Start(argv);
  in.expect_exit = false;
  ++starts_;
  std::ofstream(absl::StrCat(config_.log_dir, "/", in.name, ".log"), std::ios::app)
      << "=== chaos: started pid " << in.process->pid()
      << (single_in_flight_ ? " (one request in flight)" : "") << " at "
      << absl::FormatTime("%H:%M:%E3S", absl::Now(), absl::UTCTimeZone()) << "\n";
}

void RelayPair::ReapLocked(Instance& in, int code) {
  std::ofstream(absl::StrCat(config_.log_dir, "/", in.name, ".log"), std::ios::app)
      << in.process->Log() << "=== chaos: exit code " << code
      << (in.expect_exit ? " (ours)" : " (unexpected)") << "\n";
  in.restart_at = absl::Now();
  if (!in.expect_exit) {
    const std::string log = in.process->Log();
    const bool reached_slot = log.find("standing by") != std::string::npos ||
                              test::ContainsAny(log, test::kRelayReadsSlot);
    unexpected_.push_back({in.name, code, reached_slot, LastLine(log)});
    in.restart_at += absl::Seconds(1);
  }
  in.process.reset();
}

void RelayPair::SetPgArgs(std::vector<std::string> pg_args) {
  std::lock_guard lock(mu_);
  pg_args_ = std::move(pg_args);
}

void RelayPair::StartBoth(bool single_in_flight) {
  std::lock_guard lock(mu_);
  single_in_flight_ = single_in_flight;
  for (Instance& in : instances_) {
    if (in.process == nullptr) StartLocked(in);
  }
  supervising_ = true;
  if (!supervisor_.joinable()) supervisor_ = std::thread([this] { Supervise(); });
}

bool RelayPair::StopBoth(absl::Duration timeout) {
  std::lock_guard lock(mu_);
  supervising_ = false;
  bool clean = true;
  for (Instance& in : instances_) {
    if (in.process == nullptr) continue;
    in.expect_exit = true;
    in.process->Signal(SIGTERM);
  }
  for (Instance& in : instances_) {
    if (in.process == nullptr) continue;
    std::optional<int> code = in.process->Wait(timeout);
    if (!code) {
      in.process->Signal(SIGKILL);
      code = in.process->Wait(absl::Seconds(10));
    }
    if (code != 0) {
      clean = false;
      in.expect_exit = false;  // a SIGTERM must end in exit 0: report it
    }
    ReapLocked(in, code.value_or(-1));
  }
  return clean;
}

std::string RelayPair::Active() {
  absl::StatusOr<pg::Connection> conn = pg::Connection::Open(config_.conninfo);
  if (!conn.ok()) return "";
  absl::StatusOr<pg::Result> r = conn->ExecParams(
      "SELECT r.application_name FROM pg_replication_slots s "
      "JOIN pg_stat_replication r ON r.pid = s.active_pid WHERE s.slot_name = $1",
      {config_.slot});
  if (!r.ok() || r->rows() != 1) return "";
  return std::string(r->Get(0, 0));
}

bool RelayPair::WaitForActive(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (!Active().empty()) return true;
    absl::SleepFor(absl::Milliseconds(100));
  }
  return false;
}

std::string RelayPair::Kill(bool standby) {
  const std::string active = Active();
  std::lock_guard lock(mu_);
  Instance* victim = nullptr;
  for (Instance& in : instances_) {
    if (in.process == nullptr) continue;
    const bool is_active = in.name == active;
    // With nobody streaming (both reconnecting), either will do.
    if (victim == nullptr || (is_active != standby)) victim = &in;
  }
  if (victim == nullptr) return "";
  victim->expect_exit = true;
  victim->process->Signal(SIGKILL);
  return victim->name;  // the supervisor reaps and restarts it
}

std::vector<UnexpectedExit> RelayPair::UnexpectedExits() const {
  std::lock_guard lock(mu_);
  return unexpected_;
}

void RelayPair::Supervise() {
  while (!stop_) {
    absl::SleepFor(absl::Milliseconds(100));
    std::lock_guard lock(mu_);
    for (Instance& in : instances_) {
      if (in.process != nullptr && !in.process->Running()) {
        ReapLocked(in, in.process->Wait(absl::ZeroDuration()).value_or(-1));
      }
      if (in.process == nullptr && supervising_ && absl::Now() >= in.restart_at) StartLocked(in);
    }
  }
}

}  // namespace outboxd::chaos
