// Connection and Result against the real PostgreSQL: queries, errors with their
// SQLSTATE, and the one-line connection errors users see (Guarantee 7).
#include "pg/connection.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "support/fault_proxy.h"
#include "support/pg_fixture.h"

namespace outboxd::pg {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

static_assert(!std::is_copy_constructible_v<Result> && !std::is_copy_assignable_v<Result>);
static_assert(std::is_move_constructible_v<Result> && std::is_move_assignable_v<Result>);
static_assert(!std::is_copy_constructible_v<Connection>);
static_assert(std::is_move_constructible_v<Connection>);

// A TCP socket bound to a free loopback port; the port in `port`.
int BoundLoopbackSocket(int* port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  *port = ntohs(addr.sin_port);
  return fd;
}

// A loopback port nobody listens on (bound, then closed).
int ClosedPort() {
  int port = 0;
  ::close(BoundLoopbackSocket(&port));
  return port;
}

std::string Message(const absl::Status& status) { return std::string(status.message()); }

TEST(Connection, ExecReturnsRowsAsText) {
  auto db = test::TestDatabase::Create();
  Connection conn = db->Connect();
  absl::StatusOr<Result> result = conn.Exec("SELECT 42, 'héllo', NULL::text");
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->rows(), 1);
  ASSERT_EQ(result->columns(), 3);
  EXPECT_EQ(result->Get(0, 0), "42");
  EXPECT_EQ(result->Get(0, 1), "héllo");
  EXPECT_TRUE(result->IsNull(0, 2));
  EXPECT_EQ(result->Get(0, 2), "");
}

TEST(Connection, ExecParamsBindsNullForNullopt) {
  auto db = test::TestDatabase::Create();
  Connection conn = db->Connect();
  absl::StatusOr<Result> result =
      conn.ExecParams("SELECT $1::text IS NULL, $2::text, $3::int + 1",
                      {std::nullopt, std::string("it's \"quoted\""), std::string("41")});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->Get(0, 0), "t");
  EXPECT_EQ(result->Get(0, 1), "it's \"quoted\"");
  EXPECT_EQ(result->Get(0, 2), "42");
}

TEST(Connection, ExecParamsReportsAffectedRows) {
  auto db = test::TestDatabase::Create();
  Connection conn = db->Connect();
  ASSERT_TRUE(conn.Exec("CREATE TABLE t (a int)").ok());
  absl::StatusOr<Result> inserted =
      conn.ExecParams("INSERT INTO t SELECT generate_series(1, $1::int)", {std::string("3")});
  ASSERT_TRUE(inserted.ok()) << inserted.status();
  EXPECT_EQ(inserted->AffectedRows(), 3);
}

TEST(Connection, SqlErrorCarriesPrimaryMessageAndSqlState) {
  auto db = test::TestDatabase::Create();
  Connection conn = db->Connect();
  absl::StatusOr<Result> result = conn.Exec("SELECT * FROM nope");
  EXPECT_EQ(result.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Message(result.status()), StartsWith("relation \"nope\" does not exist"));
  EXPECT_THAT(Message(result.status()), HasSubstr("SQLSTATE 42P01"));
  EXPECT_THAT(Message(result.status()), Not(HasSubstr("\n")));
  EXPECT_EQ(conn.last_sqlstate(), "42P01");
  EXPECT_EQ(SqlStateOf(result.status()), "42P01");

  ASSERT_TRUE(conn.Exec("SELECT 1").ok());
  EXPECT_EQ(conn.last_sqlstate(), "") << "a successful Exec clears the last SQLSTATE";
}

TEST(Connection, MapsSqlStateClassesToStatusCodes) {
  auto db = test::TestDatabase::Create();
  Connection conn = db->Connect();
  ASSERT_TRUE(conn.Exec("CREATE TABLE u (a int PRIMARY KEY); INSERT INTO u VALUES (1)").ok());
  struct Case {
    const char* sql;
    const char* sqlstate;
    absl::StatusCode code;
  };
  for (const Case& c : {
           Case{"SELEC 1", "42601", absl::StatusCode::kInvalidArgument},
           Case{"INSERT INTO u VALUES (1)", "23505", absl::StatusCode::kAlreadyExists},
           Case{"SELECT 1/0", "22012", absl::StatusCode::kInvalidArgument},
           Case{"SELECT nope()", "42883", absl::StatusCode::kNotFound},
           Case{"SELECT pg_drop_replication_slot('nope')", "42704", absl::StatusCode::kNotFound},
       }) {
    absl::StatusOr<Result> result = conn.ExecParams(c.sql, {});
    EXPECT_EQ(result.status().code(), c.code) << c.sql << ": " << result.status();
    EXPECT_EQ(conn.last_sqlstate(), c.sqlstate) << c.sql;
  }
}

TEST(Connection, InsufficientPrivilegeIsPermissionDenied) {
  auto db = test::TestDatabase::Create();
  std::string role = db->CreateRole("NOREPLICATION");
  db->Exec("CREATE TABLE secret (a int)");
  absl::StatusOr<Connection> conn = Connection::Open(db->ConninfoWith("user=" + role));
  ASSERT_TRUE(conn.ok()) << conn.status();
  absl::StatusOr<Result> result = conn->Exec("SELECT * FROM secret");
  EXPECT_EQ(result.status().code(), absl::StatusCode::kPermissionDenied) << result.status();
  EXPECT_EQ(conn->last_sqlstate(), "42501");
}

TEST(Result, MovesOwnershipOfTheResult) {
  auto db = test::TestDatabase::Create();
  Connection conn = db->Connect();
  Result first = std::move(conn.Exec("SELECT 'kept'")).value();
  Result second = std::move(first);
  EXPECT_EQ(first.get(), nullptr);
  EXPECT_EQ(second.Get(0, 0), "kept");
  Result third = std::move(conn.Exec("SELECT 'other'")).value();
  third = std::move(second);  // frees 'other', takes 'kept'
  EXPECT_EQ(third.Get(0, 0), "kept");
}

TEST(Connection, QuotesIdentifiersAndLiterals) {
  auto db = test::TestDatabase::Create();
  Connection conn = db->Connect();
  const std::string weird = "we\"ird 'name";
  absl::StatusOr<Result> result =
      conn.Exec("SELECT " + *conn.QuoteLiteral(weird) + " AS " + *conn.QuoteIdentifier(weird));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->Get(0, 0), weird);
  EXPECT_EQ(PQfname(result->get(), 0), weird);
}

// Issue 13: a failed escape was "", and callers built SQL from it (a NOTIFY trigger
// installed without its channel). It is an error now.
TEST(Connection, RefusesToQuoteTextItCannotEscape) {
  auto db = test::TestDatabase::Create();
  Connection conn = db->Connect();
  ASSERT_TRUE(conn.Exec("SET client_encoding = 'UTF8'").ok());
  const std::string truncated = "ok\xe2\x82";  // the first two bytes of the euro sign
  absl::StatusOr<std::string> identifier = conn.QuoteIdentifier(truncated);
  EXPECT_EQ(identifier.status().code(), absl::StatusCode::kInvalidArgument) << identifier.status();
  absl::StatusOr<std::string> literal = conn.QuoteLiteral(truncated);
  EXPECT_EQ(literal.status().code(), absl::StatusCode::kInvalidArgument) << literal.status();
  EXPECT_THAT(std::string(literal.status().message()), ::testing::HasSubstr("\\xe2\\x82"));
}

// The value libpq used for one connection option.
std::string Option(const Connection& conn, std::string_view keyword) {
  std::unique_ptr<PQconninfoOption, decltype(&PQconninfoFree)> options(PQconninfo(conn.get()),
                                                                       &PQconninfoFree);
  for (PQconninfoOption* o = options.get(); o->keyword != nullptr; ++o) {
    if (keyword == o->keyword) return o->val ? o->val : "";
  }
  return "";
}

TEST(Connection, SetsApplicationNameAndConnectTimeoutUnlessTheUserDid) {
  auto db = test::TestDatabase::Create();
  Connection ours = db->Connect();
  EXPECT_EQ(std::move(ours.Exec("SHOW application_name")).value().Get(0, 0), "outboxd");
  EXPECT_EQ(Option(ours, "connect_timeout"), "10");
  Connection patient = std::move(Connection::Open(db->ConninfoWith("connect_timeout=30"))).value();
  EXPECT_EQ(Option(patient, "connect_timeout"), "30");
  Connection theirs =
      std::move(Connection::Open(db->ConninfoWith("application_name=mine"))).value();
  EXPECT_EQ(std::move(theirs.Exec("SHOW application_name")).value().Get(0, 0), "mine");
}

TEST(Connection, SetsTcpKeepalivesAndUserTimeoutUnlessTheUserDid) {
  auto db = test::TestDatabase::Create();
  Connection ours = db->Connect();
  EXPECT_EQ(Option(ours, "keepalives_idle"), "15");
  EXPECT_EQ(Option(ours, "keepalives_interval"), "5");
  EXPECT_EQ(Option(ours, "keepalives_count"), "3");
  EXPECT_EQ(Option(ours, "tcp_user_timeout"), "30000");
  Connection theirs =
      std::move(Connection::Open(db->ConninfoWith("tcp_user_timeout=5000 keepalives_idle=60")))
          .value();
  EXPECT_EQ(Option(theirs, "tcp_user_timeout"), "5000");
  EXPECT_EQ(Option(theirs, "keepalives_idle"), "60");
}

// A blackhole between us and the server (test::FaultProxy): the query's answer never
// comes, and the reply timeout gives the connection up instead of waiting forever.
TEST(Connection, ReplyTimeoutGivesUpAHalfOpenConnection) {
  auto db = test::TestDatabase::Create();
  test::FaultProxy proxy("127.0.0.1", std::stoi(db->Scalar("SELECT current_setting('port')")));
  ASSERT_TRUE(proxy.Start().ok());
  Connection conn =
      std::move(
          Connection::Open(db->ConninfoWith(absl::StrCat("host=127.0.0.1 port=", proxy.port()))))
          .value();
  conn.set_reply_timeout(absl::Seconds(1));
  ASSERT_TRUE(conn.Exec("SELECT 1").ok());
  ASSERT_TRUE(conn.ExecParams("SELECT $1::int", {"2"}).ok());
  proxy.Blackhole();
  absl::StatusOr<Result> hung = conn.Exec("SELECT 1");
  EXPECT_EQ(hung.status().code(), absl::StatusCode::kUnavailable) << hung.status();
  EXPECT_THAT(std::string(hung.status().message()), HasSubstr("sent no answer within 1s"));
}

TEST(Connection, AcceptsUris) {
  auto db = test::TestDatabase::Create();
  const std::string port = db->Scalar("SELECT current_setting('port')");
  absl::StatusOr<Connection> conn =
      Connection::Open("postgresql://postgres@127.0.0.1:" + port + "/" + db->name());
  ASSERT_TRUE(conn.ok()) << conn.status();
  EXPECT_EQ(std::move(conn->Exec("SELECT current_database()")).value().Get(0, 0), db->name());
}

// pgoutput renders timestamptz in the walsender's DateStyle and TimeZone; the relay
// expects "YYYY-MM-DD HH:MM:SS[.ffffff]+00" whatever the user's settings.
TEST(Connection, ReplicationConnectionForcesIsoDatesInUtc) {
  auto db = test::TestDatabase::Create();
  Connection repl = db->Connect(ConnectionKind::kReplication);
  EXPECT_EQ(std::move(repl.Exec("SHOW TimeZone")).value().Get(0, 0), "UTC");
  EXPECT_THAT(std::string(std::move(repl.Exec("SHOW DateStyle")).value().Get(0, 0)),
              StartsWith("ISO"));
  absl::StatusOr<Result> system = repl.Exec("IDENTIFY_SYSTEM");
  ASSERT_TRUE(system.ok()) << system.status();
  EXPECT_EQ(system->Get(0, 3), db->name()) << "replication=database keeps the dbname";
}

TEST(Connection, ReplicationConnectionKeepsUserOptionsAndBeatsPgtz) {
  auto db = test::TestDatabase::Create();
  ::setenv("PGTZ", "America/Sao_Paulo", 1);
  absl::StatusOr<Connection> repl =
      Connection::Open(db->ConninfoWith("options='-c search_path=custom -c TimeZone=Asia/Tokyo'"),
                       ConnectionKind::kReplication);
  ::unsetenv("PGTZ");
  ASSERT_TRUE(repl.ok()) << repl.status();
  EXPECT_EQ(std::move(repl->Exec("SHOW search_path")).value().Get(0, 0), "custom");
  EXPECT_EQ(std::move(repl->Exec("SHOW TimeZone")).value().Get(0, 0), "UTC");
}

TEST(ConnectionOpen, UnreachableServerIsUnavailableWithoutPassword) {
  const std::string port = std::to_string(ClosedPort());
  for (const std::string& conninfo :
       {"host=127.0.0.1 port=" + port + " user=app password=sekret dbname=app",
        "postgresql://app:sekret@127.0.0.1:" + port + "/app"}) {
    absl::StatusOr<Connection> conn = Connection::Open(conninfo, ConnectionKind::kReplication);
    EXPECT_EQ(conn.status().code(), absl::StatusCode::kUnavailable);
    const std::string message = Message(conn.status());
    EXPECT_THAT(message, StartsWith("cannot connect to PostgreSQL at 127.0.0.1:" + port + ": "));
    EXPECT_THAT(message, HasSubstr("Connection refused"));
    EXPECT_THAT(message, HasSubstr("; check --pg/OUTBOXD_PG and that the server is running"));
    EXPECT_THAT(message, Not(HasSubstr("sekret")));
    EXPECT_THAT(message, Not(HasSubstr("\n")));
  }
}

// Issue 28 point 12: with several hosts (a failover's conninfo) each reason names its
// server; "Connection refused; session is read-only" read as one server's two errors.
TEST(ConnectionOpen, SeveralHostsEachReasonNamesItsServer) {
  std::string a = std::to_string(ClosedPort());
  std::string b = std::to_string(ClosedPort());
  while (b == a) b = std::to_string(ClosedPort());
  absl::StatusOr<Connection> conn =
      Connection::Open("host=127.0.0.1,127.0.0.1 port=" + a + "," + b + " user=app dbname=app");
  const std::string message = Message(conn.status());
  EXPECT_THAT(message, HasSubstr(": 127.0.0.1:" + a + ": Connection refused; 127.0.0.1:" + b +
                                 ": Connection refused"))
      << message;
}

TEST(ConnectionOpen, SilentServerTimesOutAfterTheUsersConnectTimeout) {
  // A listening socket nobody accepts on: TCP connects, the startup reply never comes.
  int listening_port = 0;
  const int fd = BoundLoopbackSocket(&listening_port);
  ASSERT_EQ(::listen(fd, 4), 0);
  const std::string port = std::to_string(listening_port);
  absl::StatusOr<Connection> conn = Connection::Open(
      "host=127.0.0.1 port=" + port + " connect_timeout=2 sslmode=disable dbname=app");
  ::close(fd);
  // libpq's own word that the user's timeout, not something else, ended the attempt.
  EXPECT_EQ(conn.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(Message(conn.status()), HasSubstr("timeout expired"));
}

TEST(ConnectionOpen, RoleWithoutReplicationIsPermissionDenied) {
  auto db = test::TestDatabase::Create();
  std::string role = db->CreateRole("NOREPLICATION");
  absl::StatusOr<Connection> conn =
      Connection::Open(db->ConninfoWith("user=" + role), ConnectionKind::kReplication);
  EXPECT_EQ(conn.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Message(conn.status()),
            "role " + role + " lacks REPLICATION: ALTER ROLE " + role + " REPLICATION");
  // The same role may still open a regular connection.
  EXPECT_TRUE(Connection::Open(db->ConninfoWith("user=" + role)).ok());
}

TEST(ConnectionOpen, MissingDatabaseIsNotFound) {
  auto db = test::TestDatabase::Create();
  const std::string missing = db->name() + "_missing";
  absl::StatusOr<Connection> conn = Connection::Open(db->ConninfoWith("dbname=" + missing));
  EXPECT_EQ(conn.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Message(conn.status()), StartsWith("database " + missing + " does not exist on "));
  EXPECT_THAT(Message(conn.status()), HasSubstr("fix dbname in --pg/OUTBOXD_PG"));
}

TEST(ConnectionOpen, MissingRoleIsUnauthenticated) {
  auto db = test::TestDatabase::Create();
  absl::StatusOr<Connection> conn =
      Connection::Open(db->ConninfoWith("user=" + db->name() + "_nobody password=sekret"));
  EXPECT_EQ(conn.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(Message(conn.status()), HasSubstr("does not exist"));
  EXPECT_THAT(Message(conn.status()), Not(HasSubstr("sekret")));
}

TEST(ConnectionOpen, InvalidConninfoIsInvalidArgumentWithoutPassword) {
  absl::StatusOr<Connection> conn = Connection::Open("host=127.0.0.1 bogus=1 password=sekret");
  EXPECT_EQ(conn.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(conn.status()), StartsWith("invalid connection string: "));
  EXPECT_THAT(Message(conn.status()), Not(HasSubstr("sekret")));
}

}  // namespace
}  // namespace outboxd::pg
