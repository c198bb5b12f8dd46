// The binary's own documentation: `outboxd --help`, `outboxd <command> --help` and
// `outboxd --version` exit 0 and print the commands, the flags and the CMake project
// version; `outboxd --help-reference` is exactly the committed docs/configuration.md.
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "support/child_process.h"

namespace outboxd::test {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

struct Output {
  int exit_code;
  std::string text;  // stdout and stderr
};

Output Outboxd(std::vector<std::string> args) {
  args.insert(args.begin(), BinPath("outboxd"));
  std::unique_ptr<ChildProcess> child = ChildProcess::Start(args);
  const int code = child->Wait(absl::Seconds(20)).value_or(-1);
  return {code, child->Log()};
}

TEST(Help, ListsEveryCommand) {
  Output out = Outboxd({"--help"});
  EXPECT_EQ(out.exit_code, 0) << out.text;
  for (const char* command :
       {"setup", "run", "poll", "cleanup", "status", "reconcile", "dead-letter", "--version"}) {
    EXPECT_THAT(out.text, HasSubstr(command)) << out.text;
  }
}

TEST(Help, EachCommandListsItsFlagsWithTheirVariables) {
  const std::vector<std::pair<std::vector<std::string>, std::vector<std::string>>> cases = {
      {{"run"},
       {"--pg", "OUTBOXD_PG", "--brokers", "--max-in-flight", "--kafka", "--metrics", "--nats-url",
        "OUTBOXD_NATS_URL", "--nats-url-file", "--nats-creds-file", "--stream", "OUTBOXD_STREAM",
        "--no-declare"}},
      {{"setup"}, {"--pg", "--slot", "--recreate-slot"}},
      {{"poll"}, {"--brokers", "--batch", "--notify", "--nats-url", "--stream"}},
      {{"cleanup"}, {"--retention", "--inbox-retention", "--batch"}},
      {{"status"}, {"--json", "--max-age"}},
      {{"reconcile"}, {"--expect", "--type", "--since"}},
      {{"dead-letter", "replay"}, {"--pg", "--brokers", "--aggregate", "--nats-url", "--stream"}},
  };
  for (auto [command, flags] : cases) {
    command.push_back("--help");
    Output out = Outboxd(command);
    EXPECT_EQ(out.exit_code, 0) << command[0] << "\n" << out.text;
    flags.insert(flags.end(), {"--config", "OUTBOXD_CONFIG"});
    for (const std::string& flag : flags) {
      EXPECT_THAT(out.text, HasSubstr(flag)) << command[0] << "\n" << out.text;
    }
  }
  // docs/high-availability.md tells users to set it (issue 28 point 12): listed, with its
  // variable.
  EXPECT_THAT(Outboxd({"run", "--help"}).text, HasSubstr("--healthz-stall"));
  EXPECT_THAT(Outboxd({"poll", "--help"}).text, HasSubstr("--healthz-stall"));
  EXPECT_THAT(Outboxd({"--help"}).text, HasSubstr("to Kafka, RabbitMQ or NATS JetStream"));
}

TEST(Help, VersionIsTheProjectVersion) {
  Output out = Outboxd({"--version"});
  EXPECT_EQ(out.exit_code, 0);
  EXPECT_EQ(out.text, "outboxd " OUTBOXD_VERSION "\n");
}

// One source of truth: the reference is generated from the flag definitions, and the
// committed copy must follow every change to them.
TEST(Help, CommittedReferenceIsTheGeneratedOne) {
  Output out = Outboxd({"--help-reference"});
  ASSERT_EQ(out.exit_code, 0) << out.text;
  std::ifstream in(std::string(OUTBOXD_SOURCE_DIR) + "/docs/configuration.md");
  std::stringstream committed;
  committed << in.rdbuf();
  EXPECT_TRUE(out.text == committed.str())
      << "docs/configuration.md differs from the flags' definitions; regenerate it with\n"
         "  build/bin/outboxd --help-reference > docs/configuration.md";
  for (const char* row : {"| `--pg` | `OUTBOXD_PG` | `pg` (string) | *required* |",
                          "| `--max-in-flight` | `OUTBOXD_MAX_IN_FLIGHT` | `max-in-flight` "
                          "(integer) | `100000; 10000 with --sink rabbitmq or nats` |",
                          "| `--kafka` | `OUTBOXD_KAFKA` | `kafka` (array of strings) |",
                          "## outboxd dead-letter replay"}) {
    EXPECT_THAT(out.text, HasSubstr(row));
  }
  EXPECT_THAT(out.text, Not(HasSubstr("test-fatal-error-after")));  // hidden flags stay out
  EXPECT_THAT(out.text, HasSubstr("| `--healthz-stall` | `OUTBOXD_HEALTHZ_STALL` |"));
}

}  // namespace
}  // namespace outboxd::test
