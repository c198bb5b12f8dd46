// Secret files (issue 13, point 7): exactly one trailing newline stripped, a size cap
// that names the flag and the path but never the content, and a warning with the fix
// when group or others can read the file.
#include "cli/secrets.h"

#include <sys/stat.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "spdlog/spdlog.h"
#include "support/captured_log.h"

namespace outboxd::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string WriteFile(const std::string& name, const std::string& content, mode_t mode) {
  const std::string path = ::testing::TempDir() + "/secrets_test_" + name;
  ::unlink(path.c_str());
  std::ofstream(path, std::ios::binary) << content;
  ::chmod(path.c_str(), mode);
  return path;
}

TEST(SecretFile, StripsExactlyOneTrailingNewline) {
  const struct {
    const char* content;
    const char* secret;
  } cases[] = {
      {"pw\n", "pw"},           {"pw\r\n", "pw"}, {"pw", "pw"},           {"pw\n\n", "pw\n"},
      {"pw\r\n\r\n", "pw\r\n"}, {"pw\r", "pw\r"}, {" pw \t\n", " pw \t"}, {"\n", ""},
      {"a\nb\n", "a\nb"},
  };
  for (const auto& c : cases) {
    const std::string path = WriteFile("newline", c.content, 0600);
    absl::StatusOr<std::string> secret = ReadSecretFile("pg-password-file", path);
    ASSERT_TRUE(secret.ok()) << secret.status();
    EXPECT_EQ(*secret, c.secret) << "content " << ::testing::PrintToString(c.content);
  }
}

TEST(SecretFile, ALargerThan64KiBFileIsRefusedNamingTheFlagAndPathNotTheContent) {
  const std::string path = WriteFile("big", std::string(64 * 1024 + 1, 'Q'), 0600);
  absl::StatusOr<std::string> secret = ReadSecretFile("kafka-secret-file", path);
  ASSERT_EQ(secret.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(secret.status().message(),
              HasSubstr("--kafka-secret-file " + path + ": larger than 64 KiB"));
  EXPECT_THAT(secret.status().message(), Not(HasSubstr("QQQQ")));

  const std::string fits = WriteFile("fits", std::string(64 * 1024, 'Q'), 0600);
  EXPECT_TRUE(ReadSecretFile("kafka-secret-file", fits).ok());
}

TEST(SecretFile, AGroupOrWorldReadableFileIsReadWithOneWarningNamingChmod) {
  for (mode_t mode : {0644, 0640, 0604, 0620}) {
    const std::string path = WriteFile("readable", "pw-Open-1\n", mode);
    test::CapturedLog log;
    absl::StatusOr<std::string> secret = ReadSecretFile("pg-password-file", path);
    ASSERT_TRUE(secret.ok()) << secret.status();
    EXPECT_EQ(*secret, "pw-Open-1");
    const std::string text = log.Take();
    EXPECT_THAT(text,
                HasSubstr("warning --pg-password-file " + path + " is open to group or others"));
    EXPECT_THAT(text, HasSubstr("chmod 0600"));
    EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
    EXPECT_THAT(text, Not(HasSubstr("pw-Open-1")));
  }
  for (mode_t mode : {0600, 0400}) {
    const std::string path = WriteFile("private", "pw\n", mode);
    test::CapturedLog log;
    ASSERT_TRUE(ReadSecretFile("pg-password-file", path).ok());
    EXPECT_EQ(log.Take(), "") << "mode " << std::oct << mode;
  }
}

}  // namespace
}  // namespace outboxd::cli
