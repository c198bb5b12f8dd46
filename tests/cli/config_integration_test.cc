// Issue 7's "a test starts outboxd with env-only and file-only configuration": the real
// `outboxd run` against the test PostgreSQL and the mock broker, configured with no
// flag at all (only OUTBOXD_* variables) and with nothing but `--config FILE`, relays
// the outbox rows to Kafka. The same setting (--topic) given by file, environment and
// flag shows the precedence end to end; setup and status read the file too.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "support/relay_harness.h"

extern char** environ;

namespace outboxd::test {
namespace {

const std::string kType = "pedido.confirmado";

// Removes every OUTBOXD_* variable but the test cluster's (OUTBOXD_TEST_*), so the
// children see only the configuration a test gives them.
void ClearOutboxdEnvironment() {
  std::vector<std::string> names;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry = *e;
    if (absl::StartsWith(entry, "OUTBOXD_") && !absl::StartsWith(entry, "OUTBOXD_TEST_")) {
      names.push_back(entry.substr(0, entry.find('=')));
    }
  }
  for (const std::string& name : names) ::unsetenv(name.c_str());
}

// Runs `outboxd <args>` to completion: its exit code, its output in `out`.
int Outboxd(std::vector<std::string> args, std::string* out) {
  args.insert(args.begin(), BinPath("outboxd"));
  std::unique_ptr<ChildProcess> child = ChildProcess::Start(args);
  const int code = child->Wait(absl::Seconds(60)).value_or(-1);
  *out = child->Log();
  return code;
}

std::string TomlString(const std::string& s) {
  return absl::StrCat("\"", absl::StrReplaceAll(s, {{"\\", "\\\\"}, {"\"", "\\\""}}), "\"");
}

class ConfigIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override { ClearOutboxdEnvironment(); }
  void TearDown() override {
    for (const std::string& path : paths_) std::remove(path.c_str());
  }

  // Writes `text` to a file in the test's temp dir.
  std::string WriteFile(const std::string& name, const std::string& text) {
    std::string path = absl::StrCat(::testing::TempDir(), "/", getpid(), "-", name);
    std::ofstream(path) << text;
    paths_.push_back(path);
    return path;
  }

  // pg, brokers, slot and metrics of the harness as TOML lines.
  static std::string ConnectionToml(RelayHarness& h) {
    return absl::StrCat("pg = ", TomlString(h.db().conninfo()),
                        "\nbrokers = ", TomlString(h.cluster().bootstraps()),
                        "\nslot = ", TomlString(h.slot()), "\nmetrics = \"127.0.0.1:0\"\n");
  }

  std::vector<std::string> paths_;

  // Starts `outboxd <args>` with `env` as the harness's relay, waits until it streams.
  static void StartRelay(RelayHarness& h, std::vector<std::string> args,
                         const std::vector<std::string>& env) {
    args.insert(args.begin(), BinPath("outboxd"));
    h.set_relay(ChildProcess::Start(args, env));
    ASSERT_TRUE(h.relay().WaitForAnyLog(kRelayReadsSlot, absl::Seconds(30))) << h.relay().Log();
  }

  // Inserts n events and waits until the collector holds `total`; returns the topics
  // of the last n messages.
  static std::vector<std::string> RelayEvents(RelayHarness& h, int n, size_t total) {
    auto conn = h.db().Connect();
    for (int i = 0; i < n; ++i) {
      auto r =
          conn.Exec(absl::StrCat("INSERT INTO outbox (aggregate_id, tipo, payload) VALUES ('a-", i,
                                 "', '", kType, "', '{\"i\": ", i, "}')"));
      EXPECT_TRUE(r.ok()) << r.status();
    }
    EXPECT_TRUE(h.collector().WaitForCount(total, absl::Seconds(30)))
        << h.collector().Count() << " of " << total << "\n"
        << h.relay().Log();
    std::vector<std::string> topics;
    std::vector<CollectedMessage> messages = h.collector().Messages();
    for (size_t i = messages.size() >= static_cast<size_t>(n) ? messages.size() - n : 0;
         i < messages.size(); ++i) {
      topics.push_back(messages[i].topic);
    }
    return topics;
  }
};

TEST_F(ConfigIntegrationTest, RunConfiguredOnlyByEnvironmentRelaysEvents) {
  RelayHarness h({kType});
  StartRelay(h, {"run"},
             {"OUTBOXD_PG=" + h.db().conninfo(), "OUTBOXD_BROKERS=" + h.cluster().bootstraps(),
              "OUTBOXD_SLOT=" + h.slot(), "OUTBOXD_METRICS=127.0.0.1:0"});
  std::vector<std::string> topics = RelayEvents(h, 5, 5);
  EXPECT_EQ(topics, std::vector<std::string>(5, kType));
  std::vector<CollectedMessage> messages = h.collector().Messages();
  std::vector<OutboxRow> rows = h.OutboxRows();
  ASSERT_EQ(rows.size(), 5u);
  for (const OutboxRow& row : rows) {
    EXPECT_TRUE(std::any_of(messages.begin(), messages.end(), [&](const CollectedMessage& m) {
      return m.Header("id") == row.id && m.key == row.aggregate_id;
    })) << row.id;
  }
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

// Issue 20: a repeatable flag's variable takes one value per line (the trailing newline
// a YAML block scalar leaves is skipped). Unsplit, OUTBOXD_KAFKA would set linger.ms to
// "1\nacks=all", which librdkafka refuses, and OUTBOXD_HEADER would be one bad pointer.
TEST_F(ConfigIntegrationTest, ARepeatableFlagsVariableTakesOneValuePerLine) {
  RelayHarness h({kType});
  StartRelay(h, {"run"},
             {"OUTBOXD_PG=" + h.db().conninfo(), "OUTBOXD_BROKERS=" + h.cluster().bootstraps(),
              "OUTBOXD_SLOT=" + h.slot(), "OUTBOXD_METRICS=127.0.0.1:0",
              "OUTBOXD_KAFKA=linger.ms=1\nacks=all\n", "OUTBOXD_HEADER=first=/i\n\nsecond=/i\n"});
  RelayEvents(h, 3, 3);
  for (const CollectedMessage& m : h.collector().Messages()) {
    EXPECT_TRUE(m.Header("first").has_value()) << m.value;
    EXPECT_EQ(m.Header("first"), m.Header("second")) << m.value;
  }
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

TEST_F(ConfigIntegrationTest, RunConfiguredOnlyByFileRelaysEvents) {
  RelayHarness h({kType});
  // With a table for another command, which run ignores.
  const std::string file = WriteFile(
      "file-only.toml", ConnectionToml(h) + "kafka = [\"linger.ms=1\"]\n[cleanup]\nbatch = 10\n");
  StartRelay(h, {"run", "--config", file}, {});
  EXPECT_EQ(RelayEvents(h, 5, 5), std::vector<std::string>(5, kType));
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

// --topic from all three places: the flag wins; without it the variable; without
// both the file. Each relay publishes its own events to the topic it was given.
TEST_F(ConfigIntegrationTest, FlagBeatsEnvironmentBeatsFile) {
  const std::vector<std::string> topics = {"flag." + kType, "env." + kType, "file." + kType};
  RelayHarness h(topics);
  const std::string file =
      WriteFile("precedence.toml", ConnectionToml(h) + "topic = \"file.{type}\"\n");
  const std::vector<std::string> env = {"OUTBOXD_TOPIC=env.{type}"};

  StartRelay(h, {"run", "--config", file, "--topic", "flag.{type}"}, env);
  EXPECT_EQ(RelayEvents(h, 3, 3), std::vector<std::string>(3, topics[0]));
  ASSERT_EQ(h.StopRelay(), 0) << h.relay().Log();

  StartRelay(h, {"run", "--config", file}, env);
  EXPECT_EQ(RelayEvents(h, 3, 6), std::vector<std::string>(3, topics[1]));
  ASSERT_EQ(h.StopRelay(), 0) << h.relay().Log();

  StartRelay(h, {"run", "--config", file}, {});
  EXPECT_EQ(RelayEvents(h, 3, 9), std::vector<std::string>(3, topics[2]));
  ASSERT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

TEST_F(ConfigIntegrationTest, SetupAndStatusReadTheFile) {
  RelayHarness h({kType});
  const std::string slot = h.slot() + "_cfg";
  const std::string file =
      WriteFile("ops.toml",
                absl::StrCat("pg = ", TomlString(h.db().conninfo()), "\nslot = ", TomlString(slot),
                             "\nbrokers = \"ignored:9092\"\n[status]\njson = true\n"));
  std::string out;
  ASSERT_EQ(h.RunOutboxd({"setup", "--config", file}, &out), 0) << out;
  EXPECT_EQ(h.db().Scalar(absl::StrCat(
                "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '", slot, "'")),
            "1");
  ASSERT_EQ(h.RunOutboxd({"status", "--config", file}, &out), 0) << out;
  EXPECT_TRUE(absl::StrContains(out, "\"mode\":\"cdc\",\"slot_active\":false")) << out;
}

// main's wiring: a bad file ends the command with exit 2 and one line.
TEST_F(ConfigIntegrationTest, UnknownKeyExitsTwoWithOneLine) {
  const std::string file = WriteFile("bad.toml", "pg = \"x\"\nbrokerz = \"b\"\n");
  std::string out;
  EXPECT_EQ(Outboxd({"run", "--config", file}, &out), 2) << out;
  EXPECT_TRUE(absl::StrContains(out, file + ":2: unknown key \"brokerz\"; see outboxd run --help"))
      << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  EXPECT_EQ(Outboxd({"cleanup", "--config", file + ".missing"}, &out), 2) << out;
  EXPECT_TRUE(absl::StrContains(out, "cannot read config file")) << out;
}

}  // namespace
}  // namespace outboxd::test
