// outbox/trace_context.h against the W3C Trace Context grammar: the valid forms,
// and one malformed case per rule, each with the reason it is dropped for.
#include "outbox/trace_context.h"

#include <string>
#include <utility>

#include "gtest/gtest.h"

namespace outboxd::outbox {
namespace {

constexpr char kValid[] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

std::string Reason(std::optional<std::string_view> defect) {
  return defect ? std::string(*defect) : "valid";
}

TEST(Traceparent, TheSpecsExamplesAndAFutureVersionAreValid) {
  EXPECT_EQ(Reason(TraceparentDefect(kValid)), "valid");
  EXPECT_EQ(Reason(TraceparentDefect("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00")),
            "valid");
  EXPECT_EQ(Reason(TraceparentDefect("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09")),
            "valid");
  EXPECT_EQ(Reason(TraceparentDefect(
                "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-comes-next")),
            "valid");
}

TEST(Traceparent, EachMalformedCaseIsRefusedWithItsReason) {
  const std::pair<std::string, std::string> cases[] = {
      {"", "malformed"},
      {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7", "malformed"},      // no flags
      {"00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01", "malformed"},    // 31 digits
      {"00-4bf92f3577b34da6a3ce929d0e0e47366-00f067aa0ba902b7-01", "malformed"},  // 33
      {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b-01", "malformed"},    // 15
      {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1", "malformed"},
      {"0-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "malformed"},
      {"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", "malformed"},  // upper case
      {"00-4bf92f3577b34da6a3ce929d0e0e4736-00F067AA0BA902B7-01", "malformed"},
      {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g", "malformed"},
      {"0x-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "malformed"},
      {"00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01", "malformed"},
      {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-", "malformed"},  // 00 is 55
      {"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x", "malformed"},
      {" 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "malformed"},
      {"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "bad_version"},
      {"00-00000000000000000000000000000000-00f067aa0ba902b7-01", "zero_trace_id"},
      {"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", "zero_parent_id"},
  };
  for (const auto& [value, reason] : cases) {
    EXPECT_EQ(Reason(TraceparentDefect(value)), reason) << value;
  }
}

TEST(Tracestate, ListsPerTheGrammarAreValid) {
  const std::string cases[] = {
      "",
      "congo=t61rcWkgMzE",
      "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE",
      "rojo=00f067aa0ba902b7 ,\t congo=t61rcWkgMzE",
      "rojo=1,,congo=2",   // empty members are allowed
      "tenant1@vendor=x",  // multi-tenant key, tenant starts with a digit
      "0tenant@v-1*/_=x",
      "a_b-c*d/e=va lue!~",          // a space inside a value
      "k=" + std::string(256, 'v'),  // the longest value
      std::string(256, 'k') + "=v",  // the longest simple key
  };
  for (const std::string& value : cases) {
    EXPECT_EQ(Reason(TracestateDefect(value)), "valid") << value;
  }
  std::string members;
  for (int i = 0; i < 32; ++i) members += "k" + std::to_string(i) + "=v,";
  EXPECT_EQ(Reason(TracestateDefect(members)), "valid") << "32 members";
}

TEST(Tracestate, EachMalformedCaseIsRefusedWithItsReason) {
  std::string members;
  for (int i = 0; i < 33; ++i) members += "k" + std::to_string(i) + "=v,";
  const std::pair<std::string, std::string> cases[] = {
      {"congo", "malformed"},      // no "="
      {"=v", "malformed"},         // no key
      {"k=", "malformed"},         // no value
      {"Congo=t61", "malformed"},  // upper-case key
      {"1abc=v", "malformed"},     // a simple key starts with lcalpha
      {"k.x=v", "malformed"},
      {"t@1vendor=v", "malformed"},          // a system id starts with lcalpha
      {"t@abcdefghijklmno=v", "malformed"},  // system id of 15
      {"@v=x", "malformed"},
      {"k=a=b", "malformed"},   // "=" in a value
      {"k=a\tb", "malformed"},  // a tab inside a value
      {"k=v\x7f", "malformed"},
      {"k=caf\xc3\xa9", "malformed"},  // not ASCII
      {"k=" + std::string(257, 'v'), "malformed"},
      {std::string(257, 'k') + "=v", "malformed"},
      {members, "too_many_members"},
      {"k=1,j=2,k=3", "duplicate_key"},
  };
  for (const auto& [value, reason] : cases) {
    EXPECT_EQ(Reason(TracestateDefect(value)), reason) << value;
  }
}

}  // namespace
}  // namespace outboxd::outbox
