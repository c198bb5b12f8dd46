// What needs a cluster of its own (started per test process, about 2 s): a server
// with wal_level = replica, and password authentication (the shared test cluster
// trusts everyone and must stay logical).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include "ops/setup.h"
#include "pg/connection.h"
#include "support/private_cluster.h"

namespace outboxd {
namespace {

using ops::SetupReport;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

using test::PrivateCluster;

class PrivateClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cluster_ = new PrivateCluster("wal_level = replica");
    absl::StatusOr<pg::Connection> conn = pg::Connection::Open(cluster_->conninfo());
    ASSERT_TRUE(conn.ok()) << conn.status() << " (pg-cluster: " << cluster_->conninfo() << ")";
    // TCP needs a password from here on; the Unix socket stays trusted.
    ASSERT_TRUE(conn->Exec("ALTER ROLE postgres PASSWORD 'right'").ok());
    std::ofstream(cluster_->dir() + "/data/pg_hba.conf")
        << "host all all 127.0.0.1/32 scram-sha-256\n"
        << "host replication all 127.0.0.1/32 scram-sha-256\n"
        << "local all all trust\n";
    ASSERT_TRUE(conn->Exec("SELECT pg_reload_conf()").ok());
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  static std::string Conninfo(const std::string& extra) {
    return cluster_->conninfo() + " " + extra;
  }

  static PrivateCluster* cluster_;
};

PrivateCluster* PrivateClusterTest::cluster_ = nullptr;

TEST_F(PrivateClusterTest, SetupFailsClearlyWhenWalLevelIsNotLogical) {
  absl::StatusOr<pg::Connection> conn = pg::Connection::Open(Conninfo("password=right"));
  ASSERT_TRUE(conn.ok()) << conn.status();
  absl::Status status = ops::Setup(*conn, {});
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(status.message(),
            "wal_level is replica; set wal_level = logical in postgresql.conf and restart "
            "PostgreSQL, or use outboxd setup --poll-only for the polling relay");
  EXPECT_EQ(std::move(conn->Exec("SELECT to_regclass('outbox') IS NULL")).value().Get(0, 0), "t")
      << "nothing is created before the check";

  // What the message offers works on this server: the tables, no publication or slot.
  SetupReport report;
  status = ops::Setup(*conn, {.poll_only = true}, &report);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(report.created.size(), 5u);
  EXPECT_EQ(std::move(conn->Exec("SELECT to_regclass('outbox_pendentes') IS NOT NULL AND NOT "
                                 "EXISTS (SELECT 1 FROM pg_publication)"))
                .value()
                .Get(0, 0),
            "t");
}

// One test (ctest runs each test in its own process, each starting the cluster).
TEST_F(PrivateClusterTest, PasswordFailuresAreUnauthenticatedAndNeverPrinted) {
  for (auto kind : {pg::ConnectionKind::kRegular, pg::ConnectionKind::kReplication}) {
    absl::StatusOr<pg::Connection> conn =
        pg::Connection::Open(Conninfo("password=sekret-wrong"), kind);
    EXPECT_EQ(conn.status().code(), absl::StatusCode::kUnauthenticated);
    const std::string message(conn.status().message());
    EXPECT_THAT(message, StartsWith("cannot connect to PostgreSQL at 127.0.0.1:"));
    EXPECT_THAT(message, HasSubstr("password authentication failed for user \"postgres\""));
    EXPECT_THAT(message, HasSubstr("fix the password"));
    EXPECT_THAT(message, Not(HasSubstr("sekret")));
    EXPECT_THAT(message, Not(HasSubstr("\n")));
  }

  ::setenv("PGPASSFILE", "/nonexistent", 1);
  const char* saved = std::getenv("PGPASSWORD");
  const std::string saved_password = saved ? saved : "";
  ::unsetenv("PGPASSWORD");
  absl::StatusOr<pg::Connection> missing = pg::Connection::Open(Conninfo(""));
  ::unsetenv("PGPASSFILE");
  if (saved) ::setenv("PGPASSWORD", saved_password.c_str(), 1);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kUnauthenticated) << missing.status();
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("no password supplied"));

  EXPECT_TRUE(pg::Connection::Open(Conninfo("password=right")).ok());
  EXPECT_TRUE(
      pg::Connection::Open(Conninfo("password=right"), pg::ConnectionKind::kReplication).ok());
}

}  // namespace
}  // namespace outboxd
