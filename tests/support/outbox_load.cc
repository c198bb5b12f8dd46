#include "support/outbox_load.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "pg/connection.h"
#include "support/wait_until.h"

namespace outboxd::test {

Load::Load(std::string conninfo) : conninfo_(std::move(conninfo)) {
  thread_ = std::thread([this] { Run(); });
}

void Load::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

bool Load::WaitForMore(int n, absl::Duration timeout) {
  const int target = transactions_ + n;
  return WaitUntil(
      timeout, [&] { return transactions_ >= target; }, absl::Milliseconds(10));
}

void Load::Run() {
  std::optional<pg::Connection> conn;
  for (int i = 0; !stop_; ++i) {
    if (!conn) {
      auto c = pg::Connection::Open(conninfo_);
      if (!c.ok()) {
        absl::SleepFor(absl::Milliseconds(100));
        continue;
      }
      conn.emplace(std::move(*c));
    }
    int rows = i % 5 == 0 ? 4 : 1;
    std::string sql = "INSERT INTO outbox (aggregate_id, tipo, payload) VALUES ";
    for (int r = 0; r < rows; ++r) {
      absl::StrAppend(&sql, r ? "," : "", "('agg-", (i + r) % 13,
                      "', 'pedido.confirmado', '{\"i\": ", i, ", \"r\": ", r, "}')");
    }
    if (conn->Exec(sql).ok()) {
      ++transactions_;
    } else {
      conn.reset();
    }
    absl::SleepFor(absl::Milliseconds(3));
  }
}

}  // namespace outboxd::test
