#include "ops/query_sampler.h"

#include "absl/strings/numbers.h"
#include "base/log.h"
#include "pg/connection.h"

namespace outboxd::ops {
namespace {

// A sample that takes longer than this is abandoned: the figure is stale, not wrong.
constexpr char kStatementTimeout[] = "SET statement_timeout = '5s'";

}  // namespace

QuerySampler::QuerySampler(std::string conninfo, std::string sql, std::vector<std::string> params,
                           absl::Duration interval, Callback on_value)
    : conninfo_(std::move(conninfo)),
      sql_(std::move(sql)),
      params_(std::move(params)),
      interval_(interval),
      on_value_(std::move(on_value)) {}

QuerySampler::~QuerySampler() { Stop(); }

void QuerySampler::Start() {
  thread_ = std::thread([this] { Run(); });
}

void QuerySampler::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void QuerySampler::Run() {
  std::optional<pg::Connection> conn;
  std::vector<std::optional<std::string>> params(params_.begin(), params_.end());
  bool warned = false;
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    lock.unlock();
    absl::Status status = absl::OkStatus();
    if (!conn) {
      absl::StatusOr<pg::Connection> opened = pg::Connection::Open(conninfo_);
      if (opened.ok() && opened->Exec(kStatementTimeout).ok()) conn.emplace(std::move(*opened));
      if (!opened.ok()) status = opened.status();
    }
    if (conn) {
      absl::StatusOr<pg::Result> result = conn->ExecParams(sql_, params);
      if (result.ok()) {
        double value = 0;
        bool has = result->rows() > 0 && !result->IsNull(0, 0) &&
                   absl::SimpleAtod(std::string(result->Get(0, 0)), &value);
        on_value_(has ? std::optional(value) : std::nullopt);
        warned = false;
      } else {
        status = result.status();
        conn.reset();  // a lost connection is reopened next time
      }
    }
    if (!status.ok() && !warned) {
      // The relay reports the outage itself; one line here is enough.
      spdlog::warn("metrics sample failed (retrying quietly): {}", status);
      warned = true;
    }
    lock.lock();
    wake_.wait_for(lock, absl::ToChronoNanoseconds(interval_), [this] { return stopping_; });
  }
}

}  // namespace outboxd::ops
