// The --config file (cli/config_file.h) in-process: precedence flag > OUTBOXD_* >
// file > default, per-command tables, and one-line errors naming file, line, key and
// fix. A small command line made with the real Flag/Switch helpers shows the values;
// the real commands (RegisterCommands) show that the flags' types map to TOML types
// and that docs/configuration.md's example file loads for every command it names.
#include "cli/config_file.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/common.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace outboxd::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// `run` with a required --pg and --brokers, `cleanup`, and `dead-letter list|replay`.
struct Commands {
  CLI::App app{"test"};
  std::string pg, brokers, cleanup_pg, retention = "7d", letters_pg, letters_brokers;
  std::vector<std::string> kafka;
  uint64_t max_in_flight = 100;
  size_t max_bytes = 64 << 20;
  bool json = false;

  Commands() {
    app.require_subcommand(1);
    CLI::App* run = app.add_subcommand("run", "relay");
    Flag(run, "pg", pg, "conninfo")->required();
    Flag(run, "brokers", brokers, "brokers")->required();
    Flag(run, "kafka", kafka, "KEY=VALUE");
    Flag(run, "max-in-flight", max_in_flight, "events")->capture_default_str();
    Flag(run, "max-in-flight-bytes", max_bytes, "bytes")->transform(CLI::AsSizeValue(false));
    CLI::App* cleanup = app.add_subcommand("cleanup", "cleanup");
    Flag(cleanup, "pg", cleanup_pg, "conninfo")->required();
    Flag(cleanup, "retention", retention, "age")->capture_default_str();
    Switch(cleanup, "json", json, "as JSON");
    CLI::App* letters = app.add_subcommand("dead-letter", "dead letters");
    for (CLI::App* sub : {letters->add_subcommand("list"), letters->add_subcommand("replay")}) {
      Flag(sub, "pg", letters_pg, "conninfo")->required();
    }
    Flag(letters->get_subcommand("replay"), "brokers", letters_brokers, "brokers");
    AddConfigFlags(app);
  }

  // LoadConfigFile, then the parse; a parse error comes back as its message.
  absl::Status Parse(std::vector<std::string> args) {
    if (absl::Status s = LoadConfigFile(app, args); !s.ok()) return s;
    std::reverse(args.begin(), args.end());  // CLI11 takes them last first
    try {
      app.parse(args);
    } catch (const CLI::ParseError& e) {
      return absl::UnknownError(e.what());
    }
    return absl::OkStatus();
  }
};

class ConfigFileTest : public ::testing::Test {
 protected:
  void SetUp() override { ClearEnvironment(); }
  void TearDown() override {
    ClearEnvironment();
    for (const std::string& path : paths_) std::remove(path.c_str());
  }

  static void ClearEnvironment() {
    for (const char* name : {"OUTBOXD_CONFIG", "OUTBOXD_PG", "OUTBOXD_BROKERS", "OUTBOXD_KAFKA",
                             "OUTBOXD_MAX_IN_FLIGHT", "OUTBOXD_RETENTION"}) {
      ::unsetenv(name);
    }
  }

  // Writes `text` to a fresh file and returns its path.
  std::string File(const std::string& text, const std::string& name = "outboxd.toml") {
    // Unique across the test processes ctest runs side by side.
    std::string path = ::testing::TempDir() + "/" + std::to_string(getpid()) + "-" +
                       std::to_string(files_++) + "-" + name;
    std::ofstream(path) << text;
    paths_.push_back(path);
    return path;
  }

  int files_ = 0;
  std::vector<std::string> paths_;
};

constexpr char kRequired[] = "pg = \"host=file\"\nbrokers = \"file:9092\"\n";

TEST_F(ConfigFileTest, FileBeatsTheBuiltInDefault) {
  Commands c;
  ASSERT_TRUE(
      c.Parse({"run", "--config", File(std::string(kRequired) + "max-in-flight = 1000\n")}).ok());
  EXPECT_EQ(c.max_in_flight, 1000u);
  EXPECT_EQ(c.pg, "host=file");
  Commands without;
  ASSERT_TRUE(without.Parse({"run", "--pg", "p", "--brokers", "b"}).ok());
  EXPECT_EQ(without.max_in_flight, 100u);
}

TEST_F(ConfigFileTest, EnvironmentBeatsFile) {
  Commands c;
  ::setenv("OUTBOXD_MAX_IN_FLIGHT", "2000", 1);
  ::setenv("OUTBOXD_PG", "host=env", 1);
  ASSERT_TRUE(
      c.Parse({"run", "--config", File(std::string(kRequired) + "max-in-flight = 1000\n")}).ok());
  EXPECT_EQ(c.max_in_flight, 2000u);
  EXPECT_EQ(c.pg, "host=env");
  EXPECT_EQ(c.brokers, "file:9092");
}

TEST_F(ConfigFileTest, FlagBeatsEnvironmentAndFile) {
  Commands c;
  ::setenv("OUTBOXD_MAX_IN_FLIGHT", "2000", 1);
  ASSERT_TRUE(c.Parse({"run", "--max-in-flight", "3000", "--config",
                       File(std::string(kRequired) + "max-in-flight = 1000\n")})
                  .ok());
  EXPECT_EQ(c.max_in_flight, 3000u);
}

TEST_F(ConfigFileTest, RequiredFlagsAreStillRequiredWithoutTheFile) {
  Commands c;
  absl::Status s = c.Parse({"run", "--config", File("pg = \"host=file\"\n")});
  EXPECT_THAT(std::string(s.message()), HasSubstr("--brokers is required")) << s;
}

TEST_F(ConfigFileTest, ConfigComesFromTheEnvironmentUnlessTheFlagNamesOne) {
  ::setenv("OUTBOXD_CONFIG", File(std::string(kRequired) + "max-in-flight = 7\n").c_str(), 1);
  Commands from_env;
  ASSERT_TRUE(from_env.Parse({"run"}).ok());
  EXPECT_EQ(from_env.max_in_flight, 7u);
  Commands from_flag;
  ASSERT_TRUE(
      from_flag.Parse({"run", "--config=" + File(std::string(kRequired) + "max-in-flight = 8\n")})
          .ok());
  EXPECT_EQ(from_flag.max_in_flight, 8u);
}

TEST_F(ConfigFileTest, CommandTableOverridesTopLevelForThatCommandOnly) {
  const std::string file = File(std::string(kRequired) +
                                "retention = \"1d\"\n"
                                "[cleanup]\n"
                                "pg = \"host=cleanup\"\n");
  Commands run;
  ASSERT_TRUE(run.Parse({"run", "--config", file}).ok());
  EXPECT_EQ(run.pg, "host=file");  // and retention, which run lacks, is ignored
  Commands cleanup;
  ASSERT_TRUE(cleanup.Parse({"cleanup", "--config", file}).ok());
  EXPECT_EQ(cleanup.cleanup_pg, "host=cleanup");
  EXPECT_EQ(cleanup.retention, "1d");
}

TEST_F(ConfigFileTest, NestedCommandTables) {
  const std::string file = File(
      "[dead-letter]\npg = \"host=letters\"\n[dead-letter.replay]\nbrokers = \"replay:9092\"\n");
  Commands c;
  ASSERT_TRUE(c.Parse({"dead-letter", "replay", "--config", file}).ok());
  EXPECT_EQ(c.letters_pg, "host=letters");
  EXPECT_EQ(c.letters_brokers, "replay:9092");
}

TEST_F(ConfigFileTest, RepeatableFlagTakesAnArrayThatTheFlagReplaces) {
  const std::string file =
      File(std::string(kRequired) + "kafka = [\"linger.ms=5\", \"acks=all\"]\n");
  Commands c;
  ASSERT_TRUE(c.Parse({"run", "--config", file}).ok());
  EXPECT_THAT(c.kafka, ::testing::ElementsAre("linger.ms=5", "acks=all"));
  Commands flag;
  ASSERT_TRUE(flag.Parse({"run", "--config", file, "--kafka", "batch.size=1"}).ok());
  EXPECT_THAT(flag.kafka, ::testing::ElementsAre("batch.size=1"));
}

TEST_F(ConfigFileTest, SizesAndSwitches) {
  Commands size;
  ASSERT_TRUE(size.Parse({"run", "--config",
                          File(std::string(kRequired) + "max-in-flight-bytes = \"1MiB\"\n")})
                  .ok());
  EXPECT_EQ(size.max_bytes, 1u << 20);
  Commands cleanup;
  ASSERT_TRUE(cleanup.Parse({"cleanup", "--config", File("pg = \"p\"\njson = true\n")}).ok());
  EXPECT_TRUE(cleanup.json);
}

// The example, word for word: file, line, key, where to look.
TEST_F(ConfigFileTest, UnknownKeyNamesFileLineKeyAndHelp) {
  const std::string file = File("pg = \"p\"\n\nbrokerz = \"b\"\n");
  Commands c;
  EXPECT_EQ(c.Parse({"run", "--config", file}).message(),
            file + ":3: unknown key \"brokerz\"; see outboxd run --help");
}

TEST_F(ConfigFileTest, KeyTheCommandTableCannotTakeIsAnErrorWhicheverCommandRuns) {
  const std::string file = File(std::string(kRequired) + "[cleanup]\nbrokers = \"b\"\n");
  for (const char* command : {"run", "cleanup"}) {
    Commands c;
    EXPECT_EQ(c.Parse({command, "--config", file}).message(),
              file + ":4: unknown key \"brokers\" in [cleanup]; see outboxd cleanup --help")
        << command;
  }
  Commands c;
  EXPECT_EQ(c.Parse({"run", "--config", File("[rnu]\npg = \"p\"\n")}).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(ConfigFileTest, WrongTypeNamesTheExpectedOneWithAnExample) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"max-in-flight = \"many\"", "max-in-flight must be an integer, e.g. max-in-flight = 100"},
      {"kafka = \"acks=all\"", "kafka must be an array of strings"},
      {"pg = 5", "pg must be a string, e.g. pg = \"...\""},
      {"max-in-flight = -5", "max-in-flight must not be negative, e.g. max-in-flight = 100"},
      {"max-in-flight-bytes = \"lots\"", "max-in-flight-bytes: "},  // CLI11's own check
  };
  for (const auto& [line, message] : cases) {
    Commands c;
    const std::string file = File("brokers = \"b\"\n" + line + "\n");
    absl::Status s = c.Parse({"run", "--config", file});
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << line;
    EXPECT_THAT(std::string(s.message()), HasSubstr(file + ":2: " + message)) << line;
  }
  Commands c;
  EXPECT_THAT(
      std::string(c.Parse({"cleanup", "--config", File("pg = \"p\"\njson = \"yes\"\n")}).message()),
      HasSubstr(":2: json must be a boolean, e.g. json = true"));
}

TEST_F(ConfigFileTest, MissingFileAndBadSyntaxAreOneLine) {
  Commands c;
  EXPECT_EQ(c.Parse({"run", "--config", "/nonexistent/outboxd.toml"}).message(),
            "cannot read config file /nonexistent/outboxd.toml: No such file or directory; check "
            "--config/OUTBOXD_CONFIG");
  EXPECT_EQ(c.Parse({"run", "--config", ::testing::TempDir()}).message(),
            "cannot read config file " + ::testing::TempDir() +
                ": Is a directory; check --config/OUTBOXD_CONFIG");
  const std::string file = File("pg = \"p\"\nbrokers = \n");
  Commands syntax;
  absl::Status s = syntax.Parse({"run", "--config", file});
  EXPECT_THAT(std::string(s.message()), HasSubstr(file + ":2: ")) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("(not valid TOML)")) << s;
  EXPECT_EQ(std::string(s.message()).find('\n'), std::string::npos) << s;
}

TEST_F(ConfigFileTest, HelpDoesNotReadTheFile) {
  Commands c;
  EXPECT_TRUE(LoadConfigFile(c.app, {"run", "--help", "--config", "/nonexistent.toml"}).ok());
}

// The real commands: their flags' types as the file sees them.
TEST_F(ConfigFileTest, RealCommandsTakeTheDocumentedTypes) {
  const std::string file = File(
      "pg = \"host=x\"\nbrokers = \"b:9092\"\nkafka = [\"linger.ms=5\"]\n"
      "max-in-flight = 5\nmax-in-flight-bytes = \"1MiB\"\nfeedback-interval = \"1s\"\n"
      "[status]\njson = true\n[poll]\nbatch = 10\nnotify = true\n");
  for (const char* command : {"run", "status", "poll", "setup", "cleanup"}) {
    CLI::App app;
    std::vector<Command> commands = RegisterCommands(app);  // owns the flags' variables
    EXPECT_TRUE(LoadConfigFile(app, {command, "--config", file}).ok()) << command;
  }
  CLI::App app;
  std::vector<Command> commands = RegisterCommands(app);
  const std::string message(
      LoadConfigFile(app, {"run", "--config", File("max-in-flight = \"1\"\n")}).message());
  EXPECT_THAT(message, HasSubstr("max-in-flight must be an integer, e.g. max-in-flight = 100000"));
  // The default's words are not a value to copy (issue 28 point 12).
  EXPECT_THAT(message, Not(HasSubstr("with --sink"))) << message;
}

// docs/configuration.md's example is a file every command it shows accepts.
TEST_F(ConfigFileTest, DocumentedExampleLoads) {
  std::ifstream in(std::string(OUTBOXD_SOURCE_DIR) + "/docs/configuration.md");
  std::stringstream doc;
  doc << in.rdbuf();
  std::smatch example;
  const std::string text = doc.str();
  ASSERT_TRUE(std::regex_search(text, example, std::regex("```toml\n([^`]*)```")));
  const std::string file = File(example[1], "example.toml");
  for (const char* command : {"setup", "run", "cleanup", "status", "poll"}) {
    CLI::App app;
    std::vector<Command> commands = RegisterCommands(app);
    std::vector<std::string> args = {command, "--config", file};
    EXPECT_TRUE(LoadConfigFile(app, args).ok()) << command << ": " << LoadConfigFile(app, args);
    std::reverse(args.begin(), args.end());
    EXPECT_NO_THROW(app.parse(args)) << command;  // every required flag was in the file
  }
}

}  // namespace
}  // namespace outboxd::cli
