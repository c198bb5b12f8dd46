// StandbyHold: the --standby-slot rule; the held transaction's messages in memory up
// to a budget, then in a file.
#include "relay/standby_hold.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "pg/copy_data.h"

namespace outboxd::relay {
namespace {

absl::Status FileError(const char* what) {
  return absl::InternalError(absl::StrCat("cannot ", what,
                                          " the temporary file holding a "
                                          "transaction for the standbys: ",
                                          std::strerror(errno), " (check TMPDIR's space)"));
}

}  // namespace

std::vector<std::string> StandbysBehind(const StandbyFlushes& standbys, pg::Lsn end) {
  std::vector<std::string> behind;
  if (end == 0) return behind;
  for (const StandbyFlush& standby : standbys) {
    if (standby.flush < end) behind.push_back(standby.slot);
  }
  return behind;
}

pg::Lsn SlowestFlush(const StandbyFlushes& standbys) {
  if (standbys.empty()) return 0;
  pg::Lsn slowest = UINT64_MAX;
  for (const StandbyFlush& standby : standbys) slowest = std::min(slowest, standby.flush);
  return slowest;
}

void StandbyHold::SetStandbys(const StandbyFlushes& standbys) {
  if (standbys == standbys_) return;  // most turns: read every standby_interval
  standbys_ = standbys;
  flush_ = SlowestFlush(standbys_);
}

absl::StatusOr<std::optional<std::string_view>> StandbyHold::Released() {
  if (!committed() || waiting()) return std::nullopt;
  return Next();
}

absl::Status StandbyHold::Add(std::string_view message) {
  // Begin: 'B', final_lsn (8), commit_time (8), xid (4); Commit: 'C', flags (1),
  // commit_lsn (8), end_lsn (8), commit_time (8) (PostgreSQL's "Logical Replication
  // Message Formats"). The publication carries the outbox's inserts only; a logical
  // message may be an event too.
  if (!message.empty() && message[0] == 'B' && message.size() >= 17) {
    commit_pg_us_ = static_cast<int64_t>(pg::ReadU64(message, 9));
  }
  if (!message.empty() && (message[0] == 'I' || message[0] == 'M')) ++events_;
  if (!message.empty() && message[0] == 'C') {
    if (message.size() < 18) return absl::DataLossError("pgoutput Commit message too short");
    end_ = pg::ReadU64(message, 10);
  }
  ++count_;
  // Once spilling, always: the file's messages come after the memory's.
  if (file_ == nullptr && memory_bytes_ + message.size() <= budget_) {
    memory_bytes_ += message.size();
    memory_.emplace_back(message);
    return absl::OkStatus();
  }
  return Spill(message);
}

absl::Status StandbyHold::Spill(std::string_view message) {
  if (file_ == nullptr) {
    file_.reset(std::tmpfile());  // unlinked: nothing is left behind by a crash
    if (file_ == nullptr) return FileError("create");
  }
  const uint32_t size = static_cast<uint32_t>(message.size());
  if (std::fwrite(&size, sizeof(size), 1, file_.get()) != 1 ||
      std::fwrite(message.data(), 1, message.size(), file_.get()) != message.size()) {
    return FileError("write");
  }
  spilled_bytes_ += sizeof(size) + message.size();
  return absl::OkStatus();
}

absl::StatusOr<std::optional<std::string_view>> StandbyHold::Next() {
  if (taken_ == count_) {
    Clear();
    return std::nullopt;
  }
  std::string_view message;
  if (taken_ < memory_.size()) {
    message = memory_[taken_];
  } else {
    if (taken_ == memory_.size() && std::fseek(file_.get(), 0, SEEK_SET) != 0) {
      return FileError("rewind");
    }
    absl::StatusOr<std::string_view> read = ReadSpilled();
    if (!read.ok()) return read.status();
    message = *read;
  }
  ++taken_;
  if (!message.empty() && (message[0] == 'I' || message[0] == 'M')) --events_;
  return message;
}

absl::StatusOr<std::string_view> StandbyHold::ReadSpilled() {
  uint32_t size = 0;
  if (std::fread(&size, sizeof(size), 1, file_.get()) != 1) return FileError("read");
  buffer_.resize(size);
  if (std::fread(buffer_.data(), 1, size, file_.get()) != size) return FileError("read");
  return std::string_view(buffer_);
}

void StandbyHold::Clear() {
  memory_.clear();
  memory_.shrink_to_fit();
  memory_bytes_ = 0;
  file_.reset();
  spilled_bytes_ = 0;
  count_ = taken_ = 0;
  buffer_.clear();
  buffer_.shrink_to_fit();
  end_ = 0;
  commit_pg_us_ = 0;
  events_ = 0;
}

}  // namespace outboxd::relay
