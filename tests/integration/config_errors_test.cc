// Clear failure (README Guarantees; issue 3, point 8): bad input and configuration end
// `outboxd run` and `outboxd setup` with exit code 2 and exactly one log line that
// names the problem and the fix; never a crash or a hang (each run gets 20 s). Each case
// runs the real binary. Preflight, which `run` calls before the relay streams, is
// also checked in-process for the status codes the CLI maps to exit 2.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pg/connection.h"
#include "relay/preflight.h"
#include "support/child_process.h"
#include "support/pg_fixture.h"
#include "support/private_cluster.h"

namespace outboxd::test {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

struct Outcome {
  std::optional<int> exit_code;  // nullopt: still running after the timeout (a hang)
  std::string output;            // stdout and stderr
};

Outcome RunOutboxd(std::vector<std::string> args, absl::Duration timeout = absl::Seconds(20)) {
  args.insert(args.begin(), BinPath("outboxd"));
  std::unique_ptr<ChildProcess> child = ChildProcess::Start(args);
  Outcome outcome;
  outcome.exit_code = child->Wait(timeout);
  outcome.output = child->Log();
  return outcome;
}

// Exit code 2 (not a hang), and the output is one line, "<timestamp> error
// <message>", whose message contains every one of `mentions`.
::testing::AssertionResult FailsCleanly(const Outcome& outcome,
                                        const std::vector<std::string>& mentions) {
  auto failure = [&outcome]() {
    return ::testing::AssertionFailure() << "\n--- output ---\n" << outcome.output << "--- ";
  };
  if (!outcome.exit_code) return failure() << "still running: a hang";
  if (*outcome.exit_code != 2) return failure() << "exit code " << *outcome.exit_code;
  static const std::regex kErrorLine(
      R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}[+-]\d\d:?\d\d error ([^\n]+)\n)");
  std::smatch line;
  if (!std::regex_match(outcome.output, line, kErrorLine)) {
    return failure() << "not exactly one error line";
  }
  const std::string message = line[1];
  for (const std::string& mention : mentions) {
    if (message.find(mention) == std::string::npos) return failure() << "no \"" << mention << "\"";
  }
  return ::testing::AssertionSuccess();
}

// `outboxd <command> --pg <pg>`, with a broker address when the command takes one.
Outcome RunWithPg(const std::string& command, const std::string& pg) {
  std::vector<std::string> args = {command, "--pg", pg};
  if (command == "run") args.insert(args.end(), {"--brokers", "127.0.0.1:9"});
  return RunOutboxd(args);
}

// A local TCP port nothing listens on: connecting is refused at once.
int ClosedPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

// The shared test cluster, one database with `outboxd setup` done, plus what the
// cases need: a Debezium-style table without the default columns and a publication
// of another table.
class ConfigErrorsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ::unsetenv("OUTBOXD_BROKERS");
    ::unsetenv("OUTBOXD_NATS_URL");
    db_ = TestDatabase::Create().release();
    Outcome setup = RunOutboxd({"setup", "--pg", db_->conninfo(), "--slot", db_->name()});
    ASSERT_EQ(setup.exit_code, 0) << setup.output;
    db_->Exec(
        "CREATE TABLE debezium (id uuid, aggregateid text, type text, payload jsonb, "
        "criado_em timestamptz);"
        "CREATE PUBLICATION other FOR TABLE inbox");
  }
  static void TearDownTestSuite() {
    delete db_;
    db_ = nullptr;
  }

  // `outboxd run` on the set-up database (or `pg`, `slot`) with `extra` flags.
  static Outcome Run(const std::vector<std::string>& extra, const std::string& pg = "",
                     const std::string& slot = "") {
    std::vector<std::string> args = {"run",
                                     "--pg",
                                     pg.empty() ? db_->conninfo() : pg,
                                     "--slot",
                                     slot.empty() ? db_->name() : slot,
                                     "--brokers",
                                     "127.0.0.1:9",
                                     "--metrics",
                                     "127.0.0.1:0"};
    args.insert(args.end(), extra.begin(), extra.end());
    return RunOutboxd(args);
  }

  static relay::RelayOptions Options() {
    relay::RelayOptions options;
    options.conninfo = db_->conninfo();
    options.slot = db_->name();
    return options;
  }

  static TestDatabase* db_;
};

TestDatabase* ConfigErrorsTest::db_ = nullptr;

TEST_F(ConfigErrorsTest, MissingBrokersNamesTheFlagAndItsVariable) {
  EXPECT_TRUE(FailsCleanly(RunOutboxd({"run", "--pg", db_->conninfo()}),
                           {"--brokers is required", "OUTBOXD_BROKERS", "outboxd run --help"}));
  EXPECT_TRUE(FailsCleanly(RunOutboxd({"setup"}), {"--pg is required", "OUTBOXD_PG"}));
}

// --sink nats without --nats-url, in each command that publishes.
TEST_F(ConfigErrorsTest, MissingNatsUrlNamesTheFlagAndItsVariable) {
  EXPECT_TRUE(FailsCleanly(Run({"--sink", "nats"}), {"--sink nats needs --nats-url",
                                                     "OUTBOXD_NATS_URL", "outboxd run --help"}));
  EXPECT_TRUE(FailsCleanly(RunOutboxd({"poll", "--pg", db_->conninfo(), "--sink", "nats"}),
                           {"--nats-url", "OUTBOXD_NATS_URL", "outboxd poll --help"}));
  EXPECT_TRUE(
      FailsCleanly(RunOutboxd({"dead-letter", "replay", "--pg", db_->conninfo(), "--sink", "nats"}),
                   {"--nats-url", "OUTBOXD_NATS_URL", "outboxd dead-letter replay --help"}));
}

// --no-declare with --sink nats only checks the stream: a missing one ends the start
// with exit code 2, named (after the start line: the sink is made as the relay
// starts), and is not created.
TEST_F(ConfigErrorsTest, NoDeclareWithAMissingNatsStreamNamesItAndCreatesNothing) {
  const char* url = std::getenv("OUTBOXD_TEST_NATS");
  if (url == nullptr) GTEST_FAIL() << "OUTBOXD_TEST_NATS not set: run scripts/nats start DIR";
  const std::string stream = "MISSING_" + db_->name();
  for (int i = 0; i < 2; ++i) {  // the second start meets no stream left by the first
    // Its own subjects: were the stream created, it would take no other test's.
    Outcome outcome = Run({"--sink", "nats", "--nats-url", url, "--stream", stream, "--topic",
                           db_->name() + ".{type}", "--no-declare"});
    EXPECT_EQ(outcome.exit_code, 2) << outcome.output;
    EXPECT_THAT(outcome.output, HasSubstr("error JetStream stream " + stream + " does not exist"));
  }
}

TEST_F(ConfigErrorsTest, UnknownFlagOrCommandIsNamed) {
  EXPECT_TRUE(FailsCleanly(Run({"--bogus"}), {"--bogus", "outboxd run --help"}));
  EXPECT_TRUE(FailsCleanly(RunOutboxd({"setup", "--pg", db_->conninfo(), "--bogus"}),
                           {"--bogus", "outboxd setup --help"}));
  EXPECT_TRUE(FailsCleanly(RunOutboxd({"rnu"}), {"unknown command \"rnu\"", "outboxd --help"}));
}

// --format, --header and --key-pointer are checked before anything connects, with
// the same wording in run, poll and dead-letter replay (cli/common.h ResolveFormat).
TEST_F(ConfigErrorsTest, BadMessageFormatFlagsAreNamedWithTheFix) {
  EXPECT_TRUE(FailsCleanly(Run({"--format", "xml"}), {"--format \"xml\"",
                                                      "json (the payload), envelope, protobuf, "
                                                      "cloudevents or cloudevents-json"}));
  EXPECT_TRUE(FailsCleanly(Run({"--header", "traceparent"}),
                           {"--header \"traceparent\"", "NAME=/json/pointer"}));
  EXPECT_TRUE(FailsCleanly(Run({"--header", "t=trace/id"}), {"--header t", "must start with /"}));
  EXPECT_TRUE(FailsCleanly(Run({"--header", "id=/x"}), {"outboxd's own headers"}));
  EXPECT_TRUE(FailsCleanly(Run({"--header", "a=/x", "--header", "a=/y"}), {"given twice"}));
  EXPECT_TRUE(FailsCleanly(Run({"--key-pointer", "/a~2"}), {"--key-pointer", "~0"}));
  EXPECT_TRUE(FailsCleanly(
      RunOutboxd({"poll", "--pg", db_->conninfo(), "--brokers", "127.0.0.1:9", "--format", "avro"}),
      {"--format \"avro\""}));
  EXPECT_TRUE(FailsCleanly(RunOutboxd({"dead-letter", "replay", "--pg", db_->conninfo(),
                                       "--brokers", "127.0.0.1:9", "--key-pointer", "customer"}),
                           {"--key-pointer", "must start with /"}));
}

// A one-shot command fails at once; the relays wait for the server instead (below).
TEST_F(ConfigErrorsTest, UnreachablePostgresEndsSetupAtOnce) {
  const std::string pg = "host=127.0.0.1 port=" + std::to_string(ClosedPort());
  EXPECT_TRUE(FailsCleanly(RunWithPg("setup", pg),
                           {"cannot connect to PostgreSQL at 127.0.0.1:", "Connection refused",
                            "check --pg/OUTBOXD_PG"}));
}

// Issue 20 point 6: a server that is not up is not a configuration error for the
// relays: they retry with backoff, logging each attempt, and a SIGTERM meanwhile
// ends them with exit code 0.
TEST_F(ConfigErrorsTest, UnreachablePostgresIsWaitedForByTheRelays) {
  const std::string pg = "host=127.0.0.1 port=" + std::to_string(ClosedPort());
  for (const std::string command : {"run", "poll"}) {
    std::unique_ptr<ChildProcess> relay =
        ChildProcess::Start({BinPath("outboxd"), command, "--pg", pg, "--brokers", "127.0.0.1:9"});
    EXPECT_TRUE(relay->WaitForLog("(attempt 3)", absl::Seconds(30))) << relay->Log();
    EXPECT_TRUE(relay->Running()) << relay->Log();
    EXPECT_THAT(relay->Log(), HasSubstr("PostgreSQL is not available yet: cannot connect to "
                                        "PostgreSQL at 127.0.0.1:"));
    EXPECT_THAT(relay->Log(), HasSubstr("Connection refused"));
    relay->Signal(SIGTERM);
    EXPECT_EQ(relay->Wait(absl::Seconds(30)), 0) << relay->Log();
    EXPECT_THAT(relay->Log(), HasSubstr("stopped before PostgreSQL was available"));
  }
}

// A server that accepts TCP connections and never answers must not hang outboxd: the
// connect_timeout (10 s unless the conninfo sets one) ends the attempt (for the
// relays, that attempt; they retry).
TEST_F(ConfigErrorsTest, SilentServerEndsAtTheConnectTimeout) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(fd, 8), 0);  // the kernel completes handshakes; nobody ever replies
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const std::string pg =
      "host=127.0.0.1 connect_timeout=2 port=" + std::to_string(ntohs(addr.sin_port));
  Outcome outcome = RunOutboxd({"setup", "--pg", pg});
  close(fd);
  // libpq's "timeout expired": the connect_timeout, not something else, ended it.
  EXPECT_TRUE(FailsCleanly(outcome, {"cannot connect to PostgreSQL", "timeout expired"}));
}

TEST_F(ConfigErrorsTest, RoleWithoutReplicationGetsTheAlterRole) {
  const std::string role = db_->CreateRole("NOREPLICATION");
  const std::string pg = db_->ConninfoWith("user=" + role);
  const std::string fix = "ALTER ROLE " + role + " REPLICATION";
  EXPECT_TRUE(FailsCleanly(Run({}, pg), {"role " + role + " lacks REPLICATION", fix}));
  // Before setup creates anything (it would otherwise leave tables behind).
  EXPECT_TRUE(FailsCleanly(RunOutboxd({"setup", "--pg", pg, "--table", "other_outbox"}), {fix}));
  EXPECT_EQ(db_->Scalar("SELECT to_regclass('other_outbox') IS NULL"), "t");
}

TEST_F(ConfigErrorsTest, MissingTableSuggestsSetupOrTable) {
  EXPECT_TRUE(FailsCleanly(
      Run({"--table", "nosuch"}),
      {"table nosuch not found in database " + db_->name(), "outboxd setup", "--table"}));
  EXPECT_TRUE(FailsCleanly(Run({"--table", "nosuch.outbox"}), {"table nosuch.outbox not found"}));
}

TEST_F(ConfigErrorsTest, MissingColumnNamesTheFlagThatRenamesIt) {
  // The Debezium-style table has aggregateid and type, not aggregate_id and tipo.
  EXPECT_TRUE(
      FailsCleanly(Run({"--table", "debezium"}),
                   {"table public.debezium has no column \"aggregate_id\"", "--aggregate-column"}));
  EXPECT_TRUE(FailsCleanly(Run({"--table", "debezium", "--aggregate-column", "aggregateid"}),
                           {"has no column \"tipo\"", "--type-column"}));
  EXPECT_TRUE(FailsCleanly(Run({"--payload-column", "body"}),
                           {"table public.outbox has no column \"body\"", "--payload-column"}));
}

TEST_F(ConfigErrorsTest, MissingPublicationOrSlotSuggestsSetup) {
  EXPECT_TRUE(FailsCleanly(Run({"--publication", "nope"}),
                           {"publication nope does not exist", "outboxd setup"}));
  EXPECT_TRUE(
      FailsCleanly(Run({}, "", "nope_" + db_->name()),
                   {"replication slot nope_" + db_->name() + " does not exist", "outboxd setup"}));
}

TEST_F(ConfigErrorsTest, PublicationOfAnotherTableGetsTheAlterPublication) {
  EXPECT_TRUE(FailsCleanly(Run({"--publication", "other"}),
                           {"publication other does not publish table public.outbox",
                            "ALTER PUBLICATION other ADD TABLE public.outbox"}));
}

TEST_F(ConfigErrorsTest, BadKafkaPropertyIsNamed) {
  EXPECT_TRUE(FailsCleanly(Run({"--kafka", "no.such.property=1"}),
                           {"no.such.property", "No such configuration property", "--kafka"}));
  EXPECT_TRUE(FailsCleanly(Run({"--kafka", "acks=maybe"}),
                           {"acks=[redacted]", "Invalid value", "--kafka"}));
  // Conflicts only the producer's construction catches.
  EXPECT_TRUE(
      FailsCleanly(Run({"--kafka", "max.in.flight=10"}), {"enable.idempotence", "--kafka"}));
  EXPECT_TRUE(FailsCleanly(Run({"--kafka", "linger.ms"}), {"\"linger.ms\"", "KEY=VALUE"}));
}

TEST_F(ConfigErrorsTest, BadDurationTopicOrNumberIsNamed) {
  EXPECT_TRUE(FailsCleanly(Run({"--feedback-interval", "10parsecs"}),
                           {"--feedback-interval", "\"10parsecs\"", "e.g. 500ms, 10s"}));
  EXPECT_TRUE(FailsCleanly(Run({"--shutdown-timeout", "-1s"}), {"--shutdown-timeout"}));
  EXPECT_TRUE(FailsCleanly(Run({"--topic", "orders.{nope}"}),
                           {"--topic", "unknown placeholder {nope}", "{type}"}));
  EXPECT_TRUE(FailsCleanly(Run({"--max-in-flight", "many"}), {"--max-in-flight"}));
  // Zero would never read the stream: a relay that hangs doing nothing.
  EXPECT_TRUE(FailsCleanly(Run({"--max-in-flight", "0"}), {"--max-in-flight must be at least 1"}));
  // Under a second a healthy stream would look dead: a relay reconnecting for ever.
  EXPECT_TRUE(FailsCleanly(Run({"--pg-receive-timeout", "500ms"}),
                           {"--pg-receive-timeout must be 0s (never) or at least 1s"}));
}

// The codes Preflight returns are those the CLI maps to exit code 2.
TEST_F(ConfigErrorsTest, PreflightPassesASetUpDatabaseAndClassifiesEachProblem) {
  pg::Connection conn = db_->Connect();
  EXPECT_TRUE(relay::Preflight(conn, Options()).ok()) << relay::Preflight(conn, Options());

  struct Case {
    void (*change)(relay::RelayOptions&);
    absl::StatusCode code;
  };
  const Case cases[] = {
      {[](relay::RelayOptions& o) { o.table = "nosuch"; }, absl::StatusCode::kNotFound},
      {[](relay::RelayOptions& o) { o.columns.type = "kind"; },
       absl::StatusCode::kFailedPrecondition},
      {[](relay::RelayOptions& o) { o.publication = "nope"; }, absl::StatusCode::kNotFound},
      {[](relay::RelayOptions& o) { o.publication = "other"; },
       absl::StatusCode::kFailedPrecondition},
      {[](relay::RelayOptions& o) { o.slot = "nope"; }, absl::StatusCode::kNotFound},
  };
  for (const Case& c : cases) {
    relay::RelayOptions options = Options();
    c.change(options);
    absl::Status status = relay::Preflight(conn, options);
    EXPECT_EQ(status.code(), c.code) << status;
    EXPECT_THAT(std::string(status.message()), Not(HasSubstr("\n")));
  }

  const std::string role = db_->CreateRole("NOREPLICATION");
  pg::Connection unprivileged = *pg::Connection::Open(db_->ConninfoWith("user=" + role));
  EXPECT_EQ(relay::Preflight(unprivileged, Options()).code(), absl::StatusCode::kPermissionDenied);
}

// A cluster of its own with wal_level = replica and password authentication over TCP.
// One test: ctest runs each test in its own process, each starting the cluster (~2 s).
TEST(ConfigErrorsPrivateClusterTest, WalLevelAndWrongPasswordAreReportedWithTheFix) {
  PrivateCluster cluster("wal_level = replica");
  {
    absl::StatusOr<pg::Connection> admin = pg::Connection::Open(cluster.conninfo());
    ASSERT_TRUE(admin.ok()) << admin.status() << " (pg-cluster: " << cluster.conninfo() << ")";
    ASSERT_TRUE(admin->Exec("ALTER ROLE postgres PASSWORD 'right'").ok());
    FILE* hba = std::fopen((cluster.dir() + "/data/pg_hba.conf").c_str(), "w");
    ASSERT_NE(hba, nullptr);
    std::fputs(
        "host all all 127.0.0.1/32 scram-sha-256\n"
        "host replication all 127.0.0.1/32 scram-sha-256\n"
        "local all all trust\n",
        hba);
    std::fclose(hba);
    ASSERT_TRUE(admin->Exec("SELECT pg_reload_conf()").ok());
  }
  const std::string right = cluster.conninfo() + " password=right";
  const std::string wrong = cluster.conninfo() + " password=sekret-wrong";
  for (const std::string command : {"run", "setup"}) {
    Outcome wal = RunWithPg(command, right);
    EXPECT_TRUE(FailsCleanly(
        wal, {"wal_level is replica", "set wal_level = logical", "restart PostgreSQL"}))
        << command;
    Outcome password = RunWithPg(command, wrong);
    EXPECT_TRUE(FailsCleanly(
        password, {"password authentication failed for user \"postgres\"", "fix the password"}))
        << command;
    EXPECT_THAT(password.output, Not(HasSubstr("sekret")));
  }
}

}  // namespace
}  // namespace outboxd::test
