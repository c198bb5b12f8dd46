// A fresh PostgreSQL database per test on the throwaway cluster named by
// OUTBOXD_TEST_PG (scripts/test starts it). Tests run as parallel processes on one
// cluster, so everything here is scoped to a uniquely named database (and roles
// made through CreateRole); the destructor drops the database's replication slots,
// the database and those roles.
//
//   auto db = test::TestDatabase::Create();
//   db->Exec("CREATE TABLE t (a int)");
//   pg::Connection conn = db->Connect(pg::ConnectionKind::kReplication);
//   ops::Setup(conn_regular, {.slot = db->name()});   // name() is a valid slot name
#ifndef OUTBOXD_TESTS_SUPPORT_PG_FIXTURE_H_
#define OUTBOXD_TESTS_SUPPORT_PG_FIXTURE_H_

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/time/time.h"
#include "pg/connection.h"

namespace outboxd::test {

class TestDatabase {
 public:
  // Creates the database. Without OUTBOXD_TEST_PG, or when the cluster cannot be
  // reached, the test fails and the process aborts: integration tests never skip.
  static std::unique_ptr<TestDatabase> Create();
  // The same on another cluster (e.g. a PrivateCluster a fault test restarts).
  static std::unique_ptr<TestDatabase> Create(const std::string& base_conninfo);

  TestDatabase(const TestDatabase&) = delete;
  TestDatabase& operator=(const TestDatabase&) = delete;
  ~TestDatabase();

  // Lower-case, unique across processes and runs; usable as a slot name too.
  const std::string& name() const { return name_; }
  // OUTBOXD_TEST_PG with dbname replaced by name().
  const std::string& conninfo() const { return conninfo_; }
  // conninfo() plus `key=value` settings, e.g. ConninfoWith("user=bob").
  std::string ConninfoWith(std::string_view settings) const;

  // A new connection to this database; a failure fails the test and aborts.
  pg::Connection Connect(pg::ConnectionKind kind = pg::ConnectionKind::kRegular) const;

  // Runs SQL on a connection the fixture keeps; an error fails the test (the
  // returned Result is then empty: rows() == 0).
  pg::Result Exec(std::string_view sql);
  // The first field of the first row of `sql` ("" when there is none).
  std::string Scalar(std::string_view sql);
  // Waits until Scalar(sql) is `value` (a job ran: "SELECT count(*) FROM outbox", "0");
  // false, with the last value in `last` when given, if it is not after `timeout`.
  bool WaitForScalar(std::string_view sql, std::string_view value,
                     absl::Duration timeout = absl::Seconds(30), std::string* last = nullptr);

  // Creates a login role with `attributes` (e.g. "NOREPLICATION"), named after this
  // database, and drops it in the destructor. Returns its name.
  std::string CreateRole(std::string_view attributes);

 private:
  TestDatabase(std::string base_conninfo, std::string name);
  void DropSlots(pg::Connection& admin);

  std::string base_conninfo_;  // OUTBOXD_TEST_PG as given (the maintenance database)
  std::string name_;
  std::string conninfo_;
  std::optional<pg::Connection> conn_;
  std::vector<std::string> roles_;
};

}  // namespace outboxd::test

#endif  // OUTBOXD_TESTS_SUPPORT_PG_FIXTURE_H_
