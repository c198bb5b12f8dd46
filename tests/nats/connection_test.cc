// nats::Connection (the one NATS connection set-up) against real nats-servers: a
// tls:// URL to a server with a certificate of the test's own (openssl, trusted
// through SSL_CERT_FILE), refused when the certificate is not trusted or the server
// offers no TLS; an unreachable server refused at once or connected to later, as the
// caller chose. The logins (user and password, refused, never logged) are the sink's
// tests (sink_test.cc), which open their connection here too.
#include "nats/connection.h"

#include <nats/nats.h>
#include <stdlib.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "support/jetstream_client.h"
#include "support/wait_until.h"

namespace outboxd::nats {
namespace {

using ::outboxd::test::PrivateNatsServer;
using ::testing::HasSubstr;

// A self-signed certificate for 127.0.0.1 and localhost in a directory of its own.
class TlsFiles {
 public:
  TlsFiles() {
    char dir[] = "/tmp/outboxd-nats-tls.XXXXXX";
    if (mkdtemp(dir) == nullptr) return;
    dir_ = dir;
    const std::string command = absl::StrCat(
        "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 "
        "-subj /CN=localhost -addext subjectAltName=IP:127.0.0.1,DNS:localhost -keyout ",
        key(), " -out ", cert(), " >/dev/null 2>&1");
    ok_ = std::system(command.c_str()) == 0;
  }
  ~TlsFiles() {
    if (!dir_.empty()) std::system(("rm -rf " + dir_).c_str());
  }
  bool ok() const { return ok_; }
  std::string cert() const { return dir_ + "/cert.pem"; }
  std::string key() const { return dir_ + "/key.pem"; }

 private:
  std::string dir_;
  bool ok_ = false;
};

class NatsConnectionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (test::TestNatsUrl().empty()) GTEST_FAIL() << test::kNoTestNats;
  }
  void TearDown() override { unsetenv("SSL_CERT_FILE"); }
};

TEST_F(NatsConnectionTest, ATlsUrlConnectsOverTlsAndChecksTheCertificate) {
  TlsFiles tls;
  ASSERT_TRUE(tls.ok()) << "openssl could not make a certificate";
  PrivateNatsServer server(
      absl::StrCat("'tls { cert_file: \"", tls.cert(), "\", key_file: \"", tls.key(), "\" }'"));
  const std::string url = "tls://" + server.url().substr(std::string("nats://").size());

  // Not trusted (the system's CA store): refused, with OpenSSL's reason.
  auto untrusted = Connection::Open({.url = url, .unreachable = Unreachable::kFail});
  ASSERT_FALSE(untrusted.ok());
  EXPECT_EQ(untrusted.status().code(), absl::StatusCode::kInvalidArgument) << untrusted.status();
  EXPECT_THAT(std::string(untrusted.status().message()), HasSubstr("SSL"));

  setenv("SSL_CERT_FILE", tls.cert().c_str(), 1);
  auto trusted = Connection::Open({.url = url, .unreachable = Unreachable::kFail});
  ASSERT_TRUE(trusted.ok()) << trusted.status();
  EXPECT_TRUE((*trusted)->connected());
  EXPECT_EQ((*trusted)->where(), url);
  EXPECT_EQ(natsConnection_Flush((*trusted)->get()), NATS_OK);
}

TEST_F(NatsConnectionTest, ATlsUrlRefusesAServerWithoutTls) {
  const std::string url = "tls://" + test::TestNatsUrl().substr(std::string("nats://").size());
  auto refused = Connection::Open({.url = url, .unreachable = Unreachable::kFail});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("does not offer TLS"));
}

// The inbox needs its consumer bound at start: an unreachable server fails Open. The
// sink starts disconnected instead and is connected once the server is up.
TEST_F(NatsConnectionTest, AnUnreachableServerFailsOrIsConnectedToLaterAsAsked) {
  auto refused =
      Connection::Open({.url = "nats://u:p4ss@127.0.0.1:1", .unreachable = Unreachable::kFail});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(refused.status().message(),
            "NATS not reachable at nats://***@127.0.0.1:1; check the URL and that "
            "nats-server runs there");

  PrivateNatsServer server;
  ASSERT_TRUE(server.Kill());
  auto later = Connection::Open({.url = server.url()});
  ASSERT_TRUE(later.ok()) << later.status();
  EXPECT_FALSE((*later)->connected());
  ASSERT_TRUE(server.Restart());
  EXPECT_TRUE(test::WaitUntil(absl::Seconds(30), [&] { return (*later)->connected(); }));
}

}  // namespace
}  // namespace outboxd::nats
