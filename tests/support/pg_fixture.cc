// TestDatabase: CREATE DATABASE with a unique name on setup; on teardown terminate
// the walsenders holding its slots, drop the slots, DROP DATABASE ... WITH (FORCE).
#include "support/pg_fixture.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <thread>

#include "support/fatal.h"
#include "support/wait_until.h"

namespace outboxd::test {
namespace {

std::string UniqueName() {
  static std::atomic<int> counter{0};
  static constexpr char kAlphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  std::random_device device;
  std::uniform_int_distribution<int> pick(0, sizeof(kAlphabet) - 2);
  std::string suffix;
  for (int i = 0; i < 6; ++i) suffix += kAlphabet[pick(device)];
  return "outboxd_t" + std::to_string(getpid()) + "_" + std::to_string(++counter) + "_" + suffix;
}

std::string QuoteConninfoValue(std::string_view value) {
  std::string out = "'";
  for (char c : value) {
    if (c == '\'' || c == '\\') out += '\\';
    out += c;
  }
  return out + "'";
}

// `base` (key=value or URI) rewritten as key=value with dbname replaced.
std::string WithDbname(const std::string& base, const std::string& dbname) {
  char* error = nullptr;
  std::unique_ptr<PQconninfoOption, decltype(&PQconninfoFree)> options(
      PQconninfoParse(base.c_str(), &error), &PQconninfoFree);
  std::unique_ptr<char, decltype(&PQfreemem)> error_owner(error, &PQfreemem);
  if (options == nullptr) Fatal("OUTBOXD_TEST_PG is not a valid conninfo: " + base);
  std::string out;
  for (PQconninfoOption* o = options.get(); o->keyword != nullptr; ++o) {
    if (o->val == nullptr || std::string_view(o->keyword) == "dbname") continue;
    out += std::string(o->keyword) + "=" + QuoteConninfoValue(o->val) + " ";
  }
  return out + "dbname=" + QuoteConninfoValue(dbname);
}

pg::Connection ConnectOrDie(const std::string& conninfo, pg::ConnectionKind kind) {
  absl::StatusOr<pg::Connection> conn = pg::Connection::Open(conninfo, kind);
  if (!conn.ok()) Fatal("test database: " + std::string(conn.status().message()));
  return std::move(conn).value();
}

}  // namespace

std::unique_ptr<TestDatabase> TestDatabase::Create() {
  const char* base = std::getenv("OUTBOXD_TEST_PG");
  if (base == nullptr || *base == '\0') Fatal("OUTBOXD_TEST_PG not set: run scripts/test");
  return Create(std::string(base));
}

std::unique_ptr<TestDatabase> TestDatabase::Create(const std::string& base) {
  std::string name = UniqueName();
  pg::Connection admin = ConnectOrDie(base, pg::ConnectionKind::kRegular);
  absl::StatusOr<pg::Result> created =
      admin.Exec("CREATE DATABASE " + *admin.QuoteIdentifier(name));
  if (!created.ok()) Fatal("CREATE DATABASE failed: " + std::string(created.status().message()));
  return std::unique_ptr<TestDatabase>(new TestDatabase(base, std::move(name)));
}

TestDatabase::TestDatabase(std::string base_conninfo, std::string name)
    : base_conninfo_(std::move(base_conninfo)),
      name_(std::move(name)),
      conninfo_(WithDbname(base_conninfo_, name_)) {}

TestDatabase::~TestDatabase() {
  conn_.reset();
  absl::StatusOr<pg::Connection> admin = pg::Connection::Open(base_conninfo_);
  if (!admin.ok()) {
    ADD_FAILURE() << "cannot drop test database " << name_ << ": " << admin.status();
    return;
  }
  DropSlots(*admin);
  absl::StatusOr<pg::Result> dropped =
      admin->Exec("DROP DATABASE IF EXISTS " + *admin->QuoteIdentifier(name_) + " WITH (FORCE)");
  EXPECT_TRUE(dropped.ok()) << dropped.status();
  for (const std::string& role : roles_) {
    absl::StatusOr<pg::Result> r =
        admin->Exec("DROP ROLE IF EXISTS " + *admin->QuoteIdentifier(role));
    EXPECT_TRUE(r.ok()) << r.status();
  }
}

// A slot held by a walsender cannot be dropped, and a database with slots cannot be
// dropped: terminate the holders (waiting up to 5 s each), then drop, and retry in
// case a walsender grabbed a slot in between.
void TestDatabase::DropSlots(pg::Connection& admin) {
  const std::string db = *admin.QuoteLiteral(name_);
  for (int attempt = 0; attempt < 50; ++attempt) {
    (void)admin.Exec(
        "SELECT pg_terminate_backend(active_pid, 5000) FROM pg_replication_slots "
        "WHERE database = " +
        db + " AND active_pid IS NOT NULL");
    absl::StatusOr<pg::Result> dropped = admin.Exec(
        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
        "WHERE database = " +
        db);
    if (dropped.ok()) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ADD_FAILURE() << "cannot drop the replication slots of test database " << name_;
}

std::string TestDatabase::ConninfoWith(std::string_view settings) const {
  return conninfo_ + " " + std::string(settings);
}

pg::Connection TestDatabase::Connect(pg::ConnectionKind kind) const {
  return ConnectOrDie(conninfo_, kind);
}

pg::Result TestDatabase::Exec(std::string_view sql) {
  if (!conn_) conn_.emplace(Connect());
  absl::StatusOr<pg::Result> result = conn_->Exec(sql);
  if (!result.ok()) {
    ADD_FAILURE() << "SQL failed: " << result.status();
    return pg::Result(nullptr);
  }
  return std::move(result).value();
}

std::string TestDatabase::Scalar(std::string_view sql) {
  pg::Result result = Exec(sql);
  if (result.rows() == 0 || result.columns() == 0) return "";
  return std::string(result.Get(0, 0));
}

bool TestDatabase::WaitForScalar(std::string_view sql, std::string_view value,
                                 absl::Duration timeout, std::string* last) {
  std::string got;
  const bool reached = WaitUntil(timeout, [&] {
    got = Scalar(sql);
    return got == value;
  });
  if (last != nullptr) *last = got;
  return reached;
}

std::string TestDatabase::CreateRole(std::string_view attributes) {
  std::string role = name_ + "_r" + std::to_string(roles_.size());
  Exec("CREATE ROLE " + std::string(role) + " LOGIN " + std::string(attributes));
  roles_.push_back(role);
  return role;
}

}  // namespace outboxd::test
