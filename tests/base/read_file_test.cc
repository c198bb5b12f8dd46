// ReadFile: every byte of a file, or the system's reason it cannot be read (the CLI's
// --config and secret-file messages quote that reason; tests/cli checks them whole).
#include "base/read_file.h"

#include <fstream>
#include <string>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace outboxd {
namespace {

TEST(ReadFile, ReturnsEveryByteOfAFileLargerThanOneRead) {
  std::string content(10000, 'x');
  content[0] = '\0';
  content[5000] = '\n';
  content.back() = '\r';
  const std::string path = ::testing::TempDir() + "/read_file_test.bin";
  std::ofstream(path, std::ios::binary) << content;
  absl::StatusOr<std::string> read = ReadFile(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, content);

  std::ofstream(path, std::ios::binary | std::ios::trunc).flush();
  read = ReadFile(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, "");
}

TEST(ReadFile, SaysWhyAFileCannotBeRead) {
  absl::StatusOr<std::string> missing = ReadFile("/nonexistent/read_file_test");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(), "No such file or directory");

  absl::StatusOr<std::string> directory = ReadFile(::testing::TempDir());
  EXPECT_FALSE(directory.ok());
  EXPECT_EQ(directory.status().message(), "Is a directory");
}

TEST(ReadFile, RefusesAFileLargerThanTheLimitWithoutReturningItsContent) {
  const std::string path = ::testing::TempDir() + "/read_file_limit_test.bin";
  std::ofstream(path, std::ios::binary) << std::string(10000, 's');
  absl::StatusOr<std::string> read = ReadFile(path, 9999);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(read.status().message(), "larger than 9999 bytes");

  read = ReadFile(path, 10000);  // exactly the limit is fine
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->size(), 10000u);
}

}  // namespace
}  // namespace outboxd
