// A fresh test database with `outboxd setup` done in-process (ops::Setup, the
// database's own slot): the outbox, dead-letter, relay-state and inbox tables, the
// publication and the slot, for tests of code that reads or writes them.
//
//   std::unique_ptr<TestDatabase> db = CreateSetUpDatabase();
//   db->Exec("INSERT INTO outbox (aggregate_id, tipo, payload) VALUES ('a', 't', '{}')");
#ifndef OUTBOXD_TESTS_SUPPORT_SET_UP_DATABASE_H_
#define OUTBOXD_TESTS_SUPPORT_SET_UP_DATABASE_H_

#include <memory>

#include "gtest/gtest.h"
#include "ops/setup.h"
#include "support/pg_fixture.h"

namespace outboxd::test {

inline std::unique_ptr<TestDatabase> CreateSetUpDatabase() {
  std::unique_ptr<TestDatabase> db = TestDatabase::Create();
  pg::Connection admin = db->Connect();
  const absl::Status set_up = ops::Setup(admin, {.slot = db->name()});
  EXPECT_TRUE(set_up.ok()) << set_up;
  return db;
}

}  // namespace outboxd::test

#endif  // OUTBOXD_TESTS_SUPPORT_SET_UP_DATABASE_H_
