// Secret files (issue 13, point 7): exactly one trailing newline stripped, a size cap
// that names the flag and the path but never the content, and a warning with the fix
// when others can read the file, or its group unless root owns it (issue 27, point 11).
#include "cli/secrets.h"

#include <sys/stat.h>
#include <unistd.h>

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

// The uid that owns the files the next tests write: root's, or (chown) another's. Only
// root can give a file away or write one as root: run as anyone else, the tests that
// need it are skipped.
constexpr uid_t kRoot = 0;
constexpr uid_t kNotRoot = 10001;  // the image's outboxd user

std::string WriteOwnedFile(const std::string& name, mode_t mode, uid_t owner) {
  const std::string path = WriteFile(name, "pw-Open-1\n", mode);
  EXPECT_EQ(::chown(path.c_str(), owner, static_cast<gid_t>(-1)), 0) << path;
  return path;
}

// Anything for others, group write, or group access to a file root does not own: one
// warning line naming the file and chmod 0400, never the content; the secret is read.
TEST(SecretFile, AFileOpenToOthersOrANonRootOwnersGroupIsReadWithOneWarningNamingChmod) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to set the files' owner";
  const struct {
    uid_t owner;
    mode_t mode;
  } cases[] = {{kRoot, 0644},    {kRoot, 0604},    {kRoot, 0444},    {kRoot, 0460},
               {kRoot, 0620},    {kRoot, 0641},    {kNotRoot, 0640}, {kNotRoot, 0440},
               {kNotRoot, 0644}, {kNotRoot, 0604}, {kNotRoot, 0620}};
  for (const auto& c : cases) {
    const std::string path = WriteOwnedFile("open", c.mode, c.owner);
    test::CapturedLog log;
    absl::StatusOr<std::string> secret = ReadSecretFile("pg-password-file", path);
    ASSERT_TRUE(secret.ok()) << secret.status();
    EXPECT_EQ(*secret, "pw-Open-1");
    const std::string text = log.Take();
    SCOPED_TRACE(::testing::Message() << "owner " << c.owner << " mode " << std::oct << c.mode);
    EXPECT_THAT(text,
                HasSubstr("warning --pg-password-file " + path + " is open to group or others"));
    EXPECT_THAT(text, HasSubstr("chmod 0400"));
    EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
    EXPECT_THAT(text, Not(HasSubstr("pw-Open-1")));
  }
}

// Issue 27, point 11: deploy/kubernetes mounts its Secret with defaultMode 0440 under
// fsGroup, so the kubelet makes each file root's, group fsGroup, 0440 (0400 would end up
// the same: it adds 0440), and every start warned "chmod 0600". A root-owned file its
// group may read (and not write), nothing for others, is quiet; so is a file only its
// owner may read, whoever owns it.
TEST(SecretFile, ARootOwnedFileOnlyItsGroupMayReadAlsoIsQuietAsKubernetesMountsASecret) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to set the files' owner";
  const struct {
    uid_t owner;
    mode_t mode;
  } cases[] = {{kRoot, 0440},    {kRoot, 0640},    {kRoot, 0400},
               {kRoot, 0600},    {kNotRoot, 0400}, {kNotRoot, 0600}};
  for (const auto& c : cases) {
    const std::string path = WriteOwnedFile("private", c.mode, c.owner);
    test::CapturedLog log;
    ASSERT_TRUE(ReadSecretFile("pg-password-file", path).ok());
    EXPECT_EQ(log.Take(), "") << "owner " << c.owner << " mode " << std::oct << c.mode;
  }
}

}  // namespace
}  // namespace outboxd::cli
