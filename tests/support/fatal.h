// How a test helper gives up on an environment it cannot work in (OUTBOXD_TEST_PG
// unset, a broker node that will not start): a test failure that says why, on stderr
// too, then abort, since nothing after it could run.
//
//   if (base == nullptr) Fatal("OUTBOXD_TEST_PG not set: run scripts/test");
#ifndef OUTBOXD_TESTS_SUPPORT_FATAL_H_
#define OUTBOXD_TESTS_SUPPORT_FATAL_H_

#include <cstdio>
#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

namespace outboxd::test {

[[noreturn]] inline void Fatal(const std::string& message) {
  ADD_FAILURE() << message;
  std::fprintf(stderr, "FATAL: %s\n", message.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace outboxd::test

#endif  // OUTBOXD_TESTS_SUPPORT_FATAL_H_
