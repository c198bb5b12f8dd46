// Duration flags and exit codes (cli/common.h): a duration is parsed by CLI11 as it
// reads the flag, so no command can forget to and run with a zero.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "cli/common.h"

namespace outboxd::cli {
namespace {

// Parses `args` (without the program name) into one --since flag.
void Parse(DurationFlag& since, std::vector<std::string> args) {
  CLI::App app;
  Flag(&app, "since", since, "Window")->capture_default_str();
  std::reverse(args.begin(), args.end());  // CLI11 takes them last first
  app.parse(args);
}

TEST(DurationFlag, HoldsItsDefaultWithoutAnyCall) {
  DurationFlag since{"24h"};
  Parse(since, {});
  EXPECT_EQ(since.value, absl::Hours(24));
  EXPECT_EQ(since.text, "24h");
  EXPECT_EQ(DurationFlag{""}.value, absl::ZeroDuration());  // "not given"
}

TEST(DurationFlag, HoldsTheGivenValueAsSoonAsTheFlagIsParsed) {
  DurationFlag since{"24h"};
  Parse(since, {"--since", "90s"});
  EXPECT_EQ(since.value, absl::Seconds(90));
  EXPECT_EQ(since.text, "90s");
}

TEST(DurationFlag, ABadDurationIsAParseErrorNamingTheFlagAndTheFix) {
  DurationFlag since{"24h"};
  try {
    Parse(since, {"--since", "1x"});
    FAIL() << "parsed";
  } catch (const CLI::ValidationError& e) {
    EXPECT_EQ(std::string(e.what()),
              "--since: bad duration \"1x\": write a whole number and a unit, e.g. 500ms, 10s, "
              "5m, 2h, 7d");
  }
}

TEST(Fail, AnUnreachableServerNeedsAPersonOnlyWhileStarting) {
  const absl::Status down = absl::UnavailableError("cannot connect");
  EXPECT_EQ(Fail(down, Phase::kStarting), kExitConfig);
  EXPECT_EQ(Fail(down, Phase::kRunning), kExitFailure);
  EXPECT_EQ(Fail(absl::InvalidArgumentError("bad --table"), Phase::kRunning), kExitConfig);
}

}  // namespace
}  // namespace outboxd::cli
