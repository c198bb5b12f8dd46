// Issue 7, security and logging: secrets given as files never appear in the
// output (at trace level, in JSON, in error lines), in /proc/<pid>/cmdline or in
// /proc/<pid>/environ; and docs/security.md's least-privilege guide works as written:
// its SQL is read from the page and run on a private cluster with scram-sha-256
// password authentication, then `setup` runs as the owner, `run` and `status` as the
// relay role and `cleanup` as the cleanup role, each with its password in a file.
// Kafka: librdkafka 2.0.2's mock broker has no SASL (it answers "SASL Handshake not
// supported"), so a --kafka-secret-file sasl.password is shown applied (librdkafka
// attempts SASL PLAIN with it; without it the producer is refused) and never logged,
// with librdkafka's debug logging on.
#include <fcntl.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kafka/mock_cluster.h"
#include "pg/connection.h"
#include "simdjson.h"
#include "support/child_process.h"
#include "support/doc_commands.h"
#include "support/kafka_collector.h"
#include "support/private_cluster.h"
#include "support/wait_until.h"

namespace outboxd::test {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kTopic[] = "pedido.confirmado";
// Quotes, a backslash and a space: they must survive the conninfo merge.
const std::string kOwnerPassword = "owner pw 'Q9x\\z";
const std::string kRelayPassword = "relay-'S3cret\\pw";
const std::string kCleanupPassword = "cleanup-Pw-55k1";
const std::string kKafkaPassword = "kafka-Sasl-Pw-91";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The contents of /proc/<pid>/<what> (NUL separators kept).
std::string Proc(pid_t pid, const std::string& what) {
  return ReadFile("/proc/" + std::to_string(pid) + "/" + what);
}

// Every line of `output` is one JSON object with string ts, level and msg.
::testing::AssertionResult AllJsonLines(const std::string& output) {
  simdjson::dom::parser parser;
  std::istringstream lines(output);
  std::string line;
  int count = 0;
  while (std::getline(lines, line)) {
    simdjson::dom::element doc;
    if (parser.parse(line).get(doc) != simdjson::SUCCESS || !doc.is_object()) {
      return ::testing::AssertionFailure() << "not JSON: " << line;
    }
    for (const char* key : {"ts", "level", "msg"}) {
      if (!doc[key].is_string())
        return ::testing::AssertionFailure() << "no " << key << ": " << line;
    }
    ++count;
  }
  if (count == 0) return ::testing::AssertionFailure() << "no lines";
  return ::testing::AssertionSuccess();
}

class SecurityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cluster_ = new PrivateCluster();
    std::smatch port;
    ASSERT_TRUE(std::regex_search(cluster_->conninfo(), port, std::regex("port=(\\d+)")))
        << cluster_->conninfo();
    port_ = port[1];
    char dir[] = "/tmp/outboxd-secrets-XXXXXX";
    secrets_dir_ = ::mkdtemp(dir);
    {
      // Over the Unix socket, which stays trusted: the superuser's setup work.
      pg::Connection admin = Socket("postgres", "postgres");
      ASSERT_TRUE(admin.Exec("CREATE DATABASE app").ok());
    }
    pg::Connection admin = Socket("postgres", "app");
    std::vector<std::string> roles =
        DocBlocks("docs/security.md", "sql", "-- least-privilege step 1");
    ASSERT_EQ(roles.size(), 1u);
    absl::StatusOr<pg::Result> created = admin.Exec(roles[0]);
    ASSERT_TRUE(created.ok()) << created.status();
    for (const auto& [role, password] :
         {std::pair{"outboxd_owner", kOwnerPassword}, std::pair{"outboxd_relay", kRelayPassword},
          std::pair{"outboxd_cleanup", kCleanupPassword}}) {
      ASSERT_TRUE(admin
                      .Exec(std::string("ALTER ROLE ") + role + " PASSWORD " +
                            *admin.QuoteLiteral(password))
                      .ok());
      WriteSecret(role, password + "\n");  // as `echo pw > file` leaves it
    }
    WriteSecret("kafka", kKafkaPassword + "\n");
    WriteSecret("wrong", "not-the-Password-77\n");
    // TCP needs a password from here on.
    std::ofstream(cluster_->dir() + "/data/pg_hba.conf")
        << "host all all 127.0.0.1/32 scram-sha-256\n"
        << "host replication all 127.0.0.1/32 scram-sha-256\n"
        << "local all all trust\n";
    ASSERT_TRUE(admin.Exec("SELECT pg_reload_conf()").ok());

    auto kafka = kafka::MockCluster::Create(1);
    ASSERT_TRUE(kafka.ok()) << kafka.status();
    kafka_ = kafka->release();
    ASSERT_TRUE(kafka_->CreateTopic(kTopic, 1, 1).ok());

    // Step 2 and 3 of the guide: setup as the owner, then the owner's grants.
    std::string output;
    ASSERT_EQ(Outboxd({"setup", "--pg", Tcp("outboxd_owner"), "--pg-password-file",
                       SecretPath("outboxd_owner")},
                      &output),
              0)
        << output;
    EXPECT_THAT(output, Not(HasSubstr(kOwnerPassword)));
    std::vector<std::string> grants =
        DocBlocks("docs/security.md", "sql", "-- least-privilege step 3");
    ASSERT_EQ(grants.size(), 1u);
    pg::Connection owner = Socket("outboxd_owner", "app");
    absl::StatusOr<pg::Result> granted = owner.Exec(grants[0]);
    ASSERT_TRUE(granted.ok()) << granted.status();
  }

  static void TearDownTestSuite() {
    delete kafka_;
    delete cluster_;
    std::system(("rm -rf " + secrets_dir_).c_str());
  }

  static pg::Connection Socket(const std::string& user, const std::string& db) {
    absl::StatusOr<pg::Connection> conn = pg::Connection::Open(
        "host=" + cluster_->dir() + " port=" + port_ + " dbname=" + db + " user=" + user);
    EXPECT_TRUE(conn.ok()) << conn.status();
    if (!conn.ok()) std::abort();
    return std::move(*conn);
  }
  // A TCP conninfo without a password: it comes from a file.
  static std::string Tcp(const std::string& user) {
    return "host=127.0.0.1 port=" + port_ + " dbname=app user=" + user;
  }
  static std::string SecretPath(const std::string& name) { return secrets_dir_ + "/" + name; }
  static void WriteSecret(const std::string& name, const std::string& content) {
    std::ofstream(SecretPath(name)) << content;
    ::chmod(SecretPath(name).c_str(), 0400);
  }

  // Runs outboxd to completion; returns its exit code.
  static int Outboxd(std::vector<std::string> args, std::string* output,
                     const std::vector<std::string>& env = {}) {
    args.insert(args.begin(), BinPath("outboxd"));
    auto child = ChildProcess::Start(args, env);
    std::optional<int> code = child->Wait(absl::Seconds(30));
    *output = child->Log();
    return code.value_or(-1);
  }

  static void ExpectNoSecret(const std::string& text, const std::string& where) {
    for (const std::string& secret :
         {kOwnerPassword, kRelayPassword, kCleanupPassword, kKafkaPassword}) {
      EXPECT_THAT(text, Not(HasSubstr(secret))) << "in " << where;
    }
  }

  static PrivateCluster* cluster_;
  static kafka::MockCluster* kafka_;
  static std::string port_;
  static std::string secrets_dir_;
};

PrivateCluster* SecurityTest::cluster_ = nullptr;
kafka::MockCluster* SecurityTest::kafka_ = nullptr;
std::string SecurityTest::port_;
std::string SecurityTest::secrets_dir_;

TEST_F(SecurityTest, TheLeastPrivilegeGuideRelaysAndCleansUpWithPasswordsOnlyInFiles) {
  auto collector = KafkaCollector::Start(kafka_->bootstraps(), {kTopic});
  ASSERT_TRUE(collector.ok()) << collector.status();
  auto relay = ChildProcess::Start({BinPath("outboxd"), "run", "--pg", Tcp("outboxd_relay"),
                                    "--pg-password-file", SecretPath("outboxd_relay"), "--brokers",
                                    kafka_->bootstraps(), "--cleanup-interval", "0s", "--metrics",
                                    "", "--log-format", "json", "--log-level", "trace"});
  ASSERT_TRUE(relay->WaitForLog("streaming slot", absl::Seconds(30))) << relay->Log();

  pg::Connection app = Socket("postgres", "app");
  ASSERT_TRUE(app.Exec("INSERT INTO outbox (aggregate_id, tipo, payload) SELECT 'p' || i, "
                       "'pedido.confirmado', '{\"n\": 1}' FROM generate_series(1, 3) i")
                  .ok());
  ASSERT_TRUE((*collector)->WaitForCount(3, absl::Seconds(20)));

  // `status` as the relay role: its grants cover what status reads.
  std::string status;
  ASSERT_EQ(Outboxd({"status", "--pg", Tcp("outboxd_relay"), "--log-level", "trace"}, &status,
                    {"OUTBOXD_PG_PASSWORD_FILE=" + SecretPath("outboxd_relay")}),
            0)
      << status;
  EXPECT_THAT(status, HasSubstr("mode                  cdc"));
  ExpectNoSecret(status, "status output");

  // `cleanup` as the cleanup role deletes the three rows once the relay has recorded
  // them acknowledged (within about a second).
  int deleted = 0;
  std::string cleanup;
  bool failed = false;
  WaitUntil(absl::Seconds(20), [&] {
    const int code =
        Outboxd({"cleanup", "--pg", Tcp("outboxd_cleanup"), "--pg-password-file",
                 SecretPath("outboxd_cleanup"), "--retention", "0s", "--log-level", "debug"},
                &cleanup);
    EXPECT_EQ(code, 0) << cleanup;
    ExpectNoSecret(cleanup, "cleanup output");
    std::smatch n;
    failed = code != 0 || !std::regex_search(cleanup, n, std::regex("deleted (\\d+) acknowledged"));
    if (!failed) deleted += std::stoi(n[1]);
    return failed || deleted >= 3;
  });
  ASSERT_FALSE(failed) << cleanup;
  EXPECT_EQ(deleted, 3) << cleanup;

  ExpectNoSecret(Proc(relay->pid(), "cmdline"), "/proc/<pid>/cmdline");
  ExpectNoSecret(Proc(relay->pid(), "environ"), "/proc/<pid>/environ");
  EXPECT_THAT(Proc(relay->pid(), "cmdline"), HasSubstr(SecretPath("outboxd_relay")));
  relay->Signal(SIGTERM);
  EXPECT_EQ(relay->Wait(absl::Seconds(30)), 0);

  const std::string log = relay->Log();
  EXPECT_TRUE(AllJsonLines(log)) << log;
  ExpectNoSecret(log, "the relay's log");
  for (const char* line : {"starting outboxd", "connected to PostgreSQL at 127.0.0.1:",
                           "as outboxd_relay", "streaming slot", "stopped cleanly",
                           "\"level\":\"debug\",\"msg\":\"connecting to PostgreSQL: "}) {
    EXPECT_THAT(log, HasSubstr(line));
  }
  // Nothing the guide's grants forgot.
  EXPECT_THAT(log, Not(HasSubstr("permission denied")));
  EXPECT_THAT(log, Not(HasSubstr("cannot record the acknowledged position")));
}

TEST_F(SecurityTest, AWrongPasswordOrADownServerIsNamedWithoutThePassword) {
  std::string output;
  // Wrong password, JSON at trace level: one JSON error line with the user quoted.
  EXPECT_EQ(Outboxd({"status", "--pg", Tcp("outboxd_relay"), "--pg-password-file",
                     SecretPath("wrong"), "--log-format", "json", "--log-level", "trace"},
                    &output),
            2);
  EXPECT_TRUE(AllJsonLines(output)) << output;
  EXPECT_THAT(output, HasSubstr("password authentication failed for user \\\"outboxd_relay\\\""));
  EXPECT_THAT(output, Not(HasSubstr("not-the-Password-77")));

  // The right password inline in --pg is redacted from every line too. (A one-shot
  // command: `run` waits for a server that is down instead of exiting.)
  EXPECT_EQ(
      Outboxd({"status", "--pg", Tcp("outboxd_relay") + " port=1 password=" + kCleanupPassword,
               "--log-level", "trace"},
              &output),
      2);
  EXPECT_THAT(output, HasSubstr("cannot connect to PostgreSQL at 127.0.0.1:1"));
  ExpectNoSecret(output, "the output with the server down");

  // A server that is down, the password from a file.
  EXPECT_EQ(Outboxd({"status", "--pg", "host=127.0.0.1 port=1 dbname=app user=outboxd_relay",
                     "--pg-password-file", SecretPath("outboxd_relay"), "--log-level", "trace",
                     "--log-format", "json"},
                    &output),
            2);
  EXPECT_TRUE(AllJsonLines(output)) << output;
  EXPECT_THAT(output, HasSubstr("cannot connect to PostgreSQL at 127.0.0.1:1"));
  ExpectNoSecret(output, "the output with the server down");
}

TEST_F(SecurityTest, AnUnreadableSecretFileEndsWithOneLineNamingTheFlagAndThePath) {
  for (const std::string& path : {secrets_dir_ + "/missing", secrets_dir_}) {
    std::string output;
    EXPECT_EQ(
        Outboxd({"cleanup", "--pg", Tcp("outboxd_cleanup"), "--pg-password-file", path}, &output),
        2);
    EXPECT_THAT(output, HasSubstr("error --pg-password-file " + path + ": cannot read it ("));
    EXPECT_EQ(std::count(output.begin(), output.end(), '\n'), 1) << output;

    EXPECT_EQ(Outboxd({"run", "--pg", Tcp("outboxd_relay"), "--brokers", kafka_->bootstraps(),
                       "--kafka-secret-file", "sasl.password=" + path},
                      &output),
              2);
    EXPECT_THAT(output, HasSubstr("error --kafka-secret-file " + path + ": cannot read it ("));
    EXPECT_EQ(std::count(output.begin(), output.end(), '\n'), 1) << output;
  }
}

TEST_F(SecurityTest, AKafkaSecretFileIsAppliedAndNeverLoggedEvenAtLibrdkafkaDebug) {
  const std::vector<std::string> sasl = {"--kafka", "security.protocol=SASL_PLAINTEXT",
                                         "--kafka", "sasl.mechanism=PLAIN",
                                         "--kafka", "sasl.username=outboxd",
                                         "--kafka", "debug=all"};
  std::vector<std::string> args = {"run",
                                   "--pg",
                                   Tcp("outboxd_relay"),
                                   "--pg-password-file",
                                   SecretPath("outboxd_relay"),
                                   "--brokers",
                                   kafka_->bootstraps(),
                                   "--metrics",
                                   "",
                                   "--log-level",
                                   "trace"};
  args.insert(args.end(), sasl.begin(), sasl.end());

  // Without the file librdkafka refuses SASL PLAIN: the file is what supplies it.
  std::string output;
  EXPECT_EQ(Outboxd(args, &output), 2);
  EXPECT_THAT(output, HasSubstr("sasl.username and sasl.password must be set"));

  args.insert(args.end(), {"--kafka-secret-file", "sasl.password=" + SecretPath("kafka")});
  args.insert(args.begin(), BinPath("outboxd"));
  auto relay = ChildProcess::Start(args);
  // librdkafka attempts SASL PLAIN with the password; the mock has no SASL.
  ASSERT_TRUE(relay->WaitForLog(
      "SASL Handshake not supported by broker (required by mechanism PLAIN)", absl::Seconds(30)))
      << relay->Log();
  ExpectNoSecret(Proc(relay->pid(), "cmdline"), "/proc/<pid>/cmdline");
  ExpectNoSecret(Proc(relay->pid(), "environ"), "/proc/<pid>/environ");
  relay->Signal(SIGTERM);
  EXPECT_EQ(relay->Wait(absl::Seconds(30)), 0);
  const std::string log = relay->Log();
  EXPECT_THAT(log, HasSubstr("debug kafka "));  // librdkafka's debug lines, through our log
  ExpectNoSecret(log, "the relay's log");

  // A file value on a property librdkafka refuses is redacted from the error.
  WriteSecret("acks", "banana-Secret-3\n");
  EXPECT_EQ(Outboxd({"run", "--pg", Tcp("outboxd_relay"), "--pg-password-file",
                     SecretPath("outboxd_relay"), "--brokers", kafka_->bootstraps(),
                     "--kafka-secret-file", "acks=" + SecretPath("acks")},
                    &output),
            2);
  EXPECT_THAT(output, HasSubstr("Kafka property acks=[redacted]"));
  EXPECT_THAT(output, Not(HasSubstr("banana-Secret-3")));
}

// Issue 13, point 1: the guide's owner could run setup once only. The second run (and
// --recreate-slot, the documented recovery for a lost slot) failed with "permission
// denied for schema pg_toast": the publication check cast every pg_class row's name
// to regclass. Its own slot, so the suite's relay keeps "outboxd".
TEST_F(SecurityTest, TheOwnerRunsSetupAgainAndRecreatesTheSlot) {
  const std::vector<std::string> setup = {"setup",
                                          "--pg",
                                          Tcp("outboxd_owner"),
                                          "--pg-password-file",
                                          SecretPath("outboxd_owner"),
                                          "--slot",
                                          "owner_again"};
  std::string output;
  for (int run = 1; run <= 2; ++run) {
    ASSERT_EQ(Outboxd(setup, &output), 0) << "setup run " << run << ": " << output;
  }
  std::vector<std::string> recreate = setup;
  recreate.push_back("--recreate-slot");
  EXPECT_EQ(Outboxd(recreate, &output), 0) << output;
  ExpectNoSecret(output, "setup output");

  pg::Connection admin = Socket("postgres", "app");
  ASSERT_TRUE(admin.Exec("DELETE FROM outbox_relay_state WHERE slot_name = 'owner_again'").ok());
  ASSERT_TRUE(admin
                  .Exec("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                        "WHERE slot_name = 'owner_again'")
                  .ok());
}

// The WAL-only source under the guide's roles: only a role the owner granted EXECUTE
// on outboxd_emit publishes; one with nothing but CONNECT can neither call it, nor read
// the key, nor (step 1's REVOKE) write a logical message at all; the relay reads the
// key with step 3's grant.
TEST_F(SecurityTest, OnlyTheGrantedRoleCanPublishThroughTheWalOnlySource) {
  pg::Connection admin = Socket("postgres", "app");
  ASSERT_TRUE(admin.Exec("CREATE ROLE wal_writer LOGIN; CREATE ROLE wal_mallory LOGIN").ok());
  pg::Connection owner = Socket("outboxd_owner", "app");
  ASSERT_TRUE(
      owner.Exec("GRANT EXECUTE ON FUNCTION outboxd_emit(text, text, jsonb) TO wal_writer").ok());
  auto collector = KafkaCollector::Start(kafka_->bootstraps(), {kTopic});
  ASSERT_TRUE(collector.ok()) << collector.status();
  auto relay = ChildProcess::Start({BinPath("outboxd"), "run", "--pg", Tcp("outboxd_relay"),
                                    "--pg-password-file", SecretPath("outboxd_relay"), "--brokers",
                                    kafka_->bootstraps(), "--source", "both", "--cleanup-interval",
                                    "0s", "--metrics", ""});
  ASSERT_TRUE(relay->WaitForLog("streaming slot", absl::Seconds(30))) << relay->Log();

  pg::Connection mallory = Socket("wal_mallory", "app");
  for (const char* sql :
       {"SELECT pg_logical_emit_message(true, 'outboxd', 'x'::bytea)",
        "SELECT pg_logical_emit_message(true, 'other', 'x')", "SELECT * FROM outboxd_emit_key",
        "SELECT outboxd_emit('p-1', 'pedido.confirmado', '{}')"}) {
    EXPECT_EQ(pg::SqlStateOf(mallory.Exec(sql).status()), "42501") << sql;
  }
  pg::Connection writer = Socket("wal_writer", "app");
  absl::StatusOr<pg::Result> emitted =
      writer.Exec("SELECT outboxd_emit('p-1', 'pedido.confirmado', '{\"n\": 1}')::text");
  ASSERT_TRUE(emitted.ok()) << emitted.status();
  const std::string id(emitted->Get(0, 0));
  EXPECT_TRUE(WaitUntil(absl::Seconds(20), [&] {
    for (const CollectedMessage& m : (*collector)->Messages()) {
      if (m.Header("id") == id) return true;
    }
    return false;
  })) << relay->Log();
  relay->Signal(SIGTERM);
  EXPECT_EQ(relay->Wait(absl::Seconds(30)), 0);
  EXPECT_THAT(relay->Log(), Not(HasSubstr("permission denied")));
  EXPECT_THAT(relay->Log(), Not(HasSubstr("rejected")));
  // Step 1 took pg_logical_emit_message from PUBLIC: no warning about it.
  EXPECT_THAT(relay->Log(), Not(HasSubstr("every role may call pg_logical_emit_message")));

  // Without step 3's SELECT on the key the relay cannot check a signature: exit 2
  // naming the grant, before it streams.
  ASSERT_TRUE(owner.Exec("REVOKE SELECT ON outboxd_emit_key FROM outboxd_relay").ok());
  std::string output;
  EXPECT_EQ(Outboxd({"run", "--pg", Tcp("outboxd_relay"), "--pg-password-file",
                     SecretPath("outboxd_relay"), "--brokers", kafka_->bootstraps(), "--source",
                     "messages", "--cleanup-interval", "0s", "--metrics", ""},
                    &output),
            2)
      << output;
  EXPECT_THAT(output,
              HasSubstr("GRANT SELECT ON \"public\".\"outboxd_emit_key\" TO the relay's role"));
  ASSERT_TRUE(owner.Exec("GRANT SELECT ON outboxd_emit_key TO outboxd_relay").ok());
}

}  // namespace
}  // namespace outboxd::test
