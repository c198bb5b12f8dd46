// RAII over libpq: a connection and its results. Every PGconn and PGresult is owned
// from the line that creates it; results cannot be copied (no double PQclear).
//
//   OUTBOXD_ASSIGN_OR_RETURN(Connection conn, Connection::Open("host=... dbname=app"));
//   OUTBOXD_ASSIGN_OR_RETURN(Result r, conn.Exec("SELECT count(*) FROM outbox"));
//   int64_t n = std::stoll(std::string(r.Get(0, 0)));
#ifndef OUTBOXD_PG_CONNECTION_H_
#define OUTBOXD_PG_CONNECTION_H_

#include <libpq-fe.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace outboxd::pg {

// One query result. Move-only; PQclear on destruction.
class Result {
 public:
  explicit Result(PGresult* res) : res_(res, &PQclear) {}
  Result(Result&&) = default;
  Result& operator=(Result&&) = default;
  Result(const Result&) = delete;
  Result& operator=(const Result&) = delete;

  int rows() const { return PQntuples(res_.get()); }
  int columns() const { return PQnfields(res_.get()); }
  bool IsNull(int row, int col) const { return PQgetisnull(res_.get(), row, col); }
  // Text of one field; empty for NULL. Valid as long as this Result lives.
  std::string_view Get(int row, int col) const;
  // Number of rows an INSERT/UPDATE/DELETE touched.
  int64_t AffectedRows() const;
  PGresult* get() const { return res_.get(); }

 private:
  std::unique_ptr<PGresult, decltype(&PQclear)> res_;
};

enum class ConnectionKind {
  kRegular,
  kReplication,  // replication=database: walsender commands and SQL
};

// One libpq connection. Move-only; PQfinish on destruction.
class Connection {
 public:
  // Connects; errors name the problem and the fix in one line (e.g. unreachable
  // server, bad password, no REPLICATION privilege).
  static absl::StatusOr<Connection> Open(const std::string& conninfo,
                                         ConnectionKind kind = ConnectionKind::kRegular);

  Connection(Connection&&) = default;
  Connection& operator=(Connection&&) = default;

  // Runs one or more statements; OK for COMMAND_OK / TUPLES_OK / COPY_BOTH, an
  // Internal/FailedPrecondition status carrying the server's message otherwise.
  absl::StatusOr<Result> Exec(std::string_view sql);
  // Runs one parameterised statement ($1, $2 ...); std::nullopt binds NULL.
  absl::StatusOr<Result> ExecParams(std::string_view sql,
                                    const std::vector<std::optional<std::string>>& params);

  // Quoting helpers for identifiers and literals built into SQL text.
  std::string QuoteIdentifier(std::string_view name);
  std::string QuoteLiteral(std::string_view value);

  PGconn* get() const { return conn_.get(); }
  int socket() const { return PQsocket(conn_.get()); }
  // SQLSTATE of the last failed Exec, or "" (e.g. "42704", "55006").
  const std::string& last_sqlstate() const { return last_sqlstate_; }

 private:
  explicit Connection(PGconn* conn) : conn_(conn, &PQfinish) {}
  absl::Status CheckResult(const Result& result, std::string_view sql);

  std::unique_ptr<PGconn, decltype(&PQfinish)> conn_;
  std::string last_sqlstate_;
};

}  // namespace outboxd::pg

#endif  // OUTBOXD_PG_CONNECTION_H_
