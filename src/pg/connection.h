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
#include "absl/time/time.h"

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

  // Runs one or more statements; OK for COMMAND_OK / TUPLES_OK / COPY_BOTH. An error
  // carries the server's primary message and SQLSTATE (see SqlStateOf), its code
  // mapped from the SQLSTATE: 42P01/42704/42883/3D000 NotFound, 42501
  // PermissionDenied, 23505/42710/42P07 AlreadyExists, 55006 and class 08/57
  // Unavailable, other 42xxx/22xxx InvalidArgument, 40xxx Aborted, else Internal.
  absl::StatusOr<Result> Exec(std::string_view sql);
  // Runs one parameterised statement ($1, $2 ...); std::nullopt binds NULL.
  absl::StatusOr<Result> ExecParams(std::string_view sql,
                                    const std::vector<std::optional<std::string>>& params);

  // Quoting helpers for identifiers and literals built into SQL text, by the
  // connection's client encoding. InvalidArgument when libpq cannot escape the text
  // (bytes invalid in that encoding): SQL is never built from a failed escape.
  //   OUTBOXD_ASSIGN_OR_RETURN(std::string channel, conn.QuoteIdentifier("outbox_new"));
  absl::StatusOr<std::string> QuoteIdentifier(std::string_view name);
  absl::StatusOr<std::string> QuoteLiteral(std::string_view value);

  // How long Exec/ExecParams and AwaitReply wait for the server's answer before they
  // give the connection up as dead (Unavailable): a half-open connection (a dead host,
  // NAT box or proxy in between) answers nothing, and TCP keepalives cannot tell when
  // something in the path still acknowledges them. Infinite (the default): wait as
  // long as libpq does. Set on the relay's control connection (relay/session.cc).
  //   conn.set_reply_timeout(absl::Seconds(30));
  void set_reply_timeout(absl::Duration timeout) { reply_timeout_ = timeout; }
  absl::Duration reply_timeout() const { return reply_timeout_; }
  // Waits, up to the reply timeout, until the answer to a query sent with libpq's
  // asynchronous API (PQsendQuery) is complete, so PQgetResult will not block.
  absl::Status AwaitReply(std::string_view sql);

  PGconn* get() const { return conn_.get(); }
  // The conninfo this connection was opened with (to open another of another kind).
  const std::string& conninfo() const { return conninfo_; }
  int socket() const { return PQsocket(conn_.get()); }
  // SQLSTATE of the most recent Exec/ExecParams if it failed, else "" (e.g. "42704").
  const std::string& last_sqlstate() const { return last_sqlstate_; }
  // User, host and port of this connection, for messages ("postgres", "127.0.0.1:5432").
  std::string user() const;
  std::string endpoint() const;

 private:
  friend class ReplicationStream;  // maps the results that end a copy stream
  explicit Connection(PGconn* conn) : conn_(conn, &PQfinish) {}
  absl::Status CheckResult(const Result& result, std::string_view sql);
  // Exec's path with a reply timeout: send, wait, collect as PQexec would.
  absl::StatusOr<Result> CollectReply(bool sent, std::string_view sql);
  absl::Status EscapeError(std::string_view what, std::string_view text);

  std::unique_ptr<PGconn, decltype(&PQfinish)> conn_;
  std::string last_sqlstate_;
  std::string conninfo_;
  absl::Duration reply_timeout_ = absl::InfiniteDuration();
};

// Lifts a connection's reply timeout while it lives, for a statement that may take
// long on a healthy server: CREATE_REPLICATION_SLOT waits for every transaction
// running at that moment to end.
//   NoReplyTimeout patient(conn);
class NoReplyTimeout {
 public:
  explicit NoReplyTimeout(Connection& conn) : conn_(conn), saved_(conn.reply_timeout()) {
    conn_.set_reply_timeout(absl::InfiniteDuration());
  }
  ~NoReplyTimeout() { conn_.set_reply_timeout(saved_); }
  NoReplyTimeout(const NoReplyTimeout&) = delete;
  NoReplyTimeout& operator=(const NoReplyTimeout&) = delete;

 private:
  Connection& conn_;
  absl::Duration saved_;
};

// The SQLSTATE an Exec/ExecParams error carries (as a status payload), or "" for
// statuses that did not come from the server.
//
//   if (SqlStateOf(result.status()) == "55006") { /* object in use: retry later */ }
std::string SqlStateOf(const absl::Status& status);
// `error` with the SQLSTATE of `cause` attached (when it has one): for errors that
// reword the server's message but must stay classifiable.
absl::Status WithSqlStateOf(absl::Status error, const absl::Status& cause);
// `error` carrying `sqlstate`, for conditions outboxd detects itself but callers
// classify like the server's (e.g. "55006": in use by another process).
absl::Status WithSqlState(absl::Status error, std::string_view sqlstate);

// A name for SQL shown to users in a fix ("ALTER ROLE app REPLICATION"): bare when
// it is a plain lower-case name, double-quoted otherwise. SQL that runs uses
// Connection::QuoteIdentifier, which always quotes.
std::string SqlIdentifier(std::string_view name);

// A conninfo string or URI with any password (password, sslpassword) removed, safe
// to print:
//   RedactConninfo("host=db password=secret") == "host=db"
//   RedactConninfo("postgresql://app:secret@db/app") == "postgresql://app@db/app"
std::string RedactConninfo(std::string_view conninfo);

// The CloudEvents `source` outboxd gives an event of `table` when --ce-source is not
// set: "/outboxd/<database>/<table>" with the conninfo's database (or "/outboxd/<table>"
// when it names none), each percent-encoded (a URI-reference, as the attribute wants).
std::string DefaultCloudEventSource(std::string_view conninfo, std::string_view table);

// The conninfo (key=value string, URI or bare database name) as a key=value string
// with `password` set, for a password read from a file (--pg-password-file): it goes
// to libpq in memory, never through argv or the environment. Replaces any password
// the conninfo had.
//   ConninfoWithPassword("postgresql://app@db/app", "s3cr'et")
//     == "dbname='app' host='db' password='s3cr\\'et' user='app'"
absl::StatusOr<std::string> ConninfoWithPassword(const std::string& conninfo,
                                                 std::string_view password);

}  // namespace outboxd::pg

#endif  // OUTBOXD_PG_CONNECTION_H_
