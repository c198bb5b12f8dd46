// The fixture the NATS tests share (tests/nats): the URL of the shared nats-server
// (OUTBOXD_TEST_NATS, from scripts/test or DIR/env of scripts/nats), and a stream and
// subject prefix of the test's own, since the tests run in parallel on that server.
// Without the variable the test fails, saying how to start one, before SetUpWithServer()
// (a skipped test would let a run without NATS pass).
//
//   class NatsRelayTest : public test::NatsTest {
//     void SetUpWithServer() override { db_ = ...; }
//   };
//   TEST_F(NatsRelayTest, ...) { ... url_ ... stream_ ... prefix_ + ".order.created" ... }
#ifndef OUTBOXD_TESTS_SUPPORT_NATS_TEST_H_
#define OUTBOXD_TESTS_SUPPORT_NATS_TEST_H_

#include <unistd.h>

#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "support/jetstream_client.h"

namespace outboxd::test {

class NatsTest : public ::testing::Test {
 protected:
  void SetUp() final {
    url_ = TestNatsUrl();
    if (url_.empty()) GTEST_FAIL() << kNoTestNats;
    const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
    prefix_ =
        absl::StrCat("t", getpid(), "_", absl::Hex(std::random_device{}()), "_", test->name());
    stream_ = "S_" + prefix_;
    SetUpWithServer();
  }

  // The test's own set-up, once the server is known.
  virtual void SetUpWithServer() {}

  std::string url_;
  // Unique to this test and run (a stream outlives its test on the shared server): its
  // subjects start with it (no dot in it).
  std::string prefix_;
  std::string stream_;  // S_<prefix>
};

}  // namespace outboxd::test

#endif  // OUTBOXD_TESTS_SUPPORT_NATS_TEST_H_
