#include "observe/query_sampler.h"

#include <memory>

#include "absl/strings/numbers.h"
#include "base/log.h"
#include "pg/connection.h"

namespace outboxd::observe {
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

struct QuerySampler::Session {
  std::optional<pg::Connection> conn;
  std::vector<std::optional<std::string>> params;
  bool warned = false;
};

void QuerySampler::Start() {
  auto session = std::make_shared<Session>();
  session->params.assign(params_.begin(), params_.end());
  thread_.Start(interval_, [this, session] { Sample(*session); });
}

void QuerySampler::Stop() { thread_.Stop(); }

void QuerySampler::Sample(Session& session) {
  absl::Status status = absl::OkStatus();
  if (!session.conn) {
    absl::StatusOr<pg::Connection> opened = pg::Connection::Open(conninfo_);
    if (opened.ok() && opened->Exec(kStatementTimeout).ok()) {
      session.conn.emplace(std::move(*opened));
    }
    if (!opened.ok()) status = opened.status();
  }
  if (session.conn) {
    absl::StatusOr<pg::Result> result = session.conn->ExecParams(sql_, session.params);
    if (result.ok()) {
      double value = 0;
      bool has = result->rows() > 0 && !result->IsNull(0, 0) &&
                 absl::SimpleAtod(std::string(result->Get(0, 0)), &value);
      on_value_(has ? std::optional(value) : std::nullopt);
      session.warned = false;
    } else {
      status = result.status();
      session.conn.reset();  // a lost connection is reopened next time
    }
  }
  if (!status.ok() && !session.warned) {
    // The relay reports the outage itself; one line here is enough.
    spdlog::warn("metrics sample failed (retrying quietly): {}", status);
    session.warned = true;
  }
}

}  // namespace outboxd::observe
