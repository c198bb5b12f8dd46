// cli::StreamSubjects: the subject a NATS stream created by run or poll takes for a
// --topic template (cli/sink_flags.h).
#include "cli/sink_flags.h"

#include "gtest/gtest.h"

namespace outboxd::cli {
namespace {

TEST(StreamSubjects, LiteralTokensBeforeTheFirstPlaceholderThenTheFullWildcard) {
  EXPECT_EQ(StreamSubjects("{type}"), ">");
  EXPECT_EQ(StreamSubjects("orders.{type}"), "orders.>");
  EXPECT_EQ(StreamSubjects("cdc.{table}.{type}"), "cdc.>");
  // A token with a placeholder inside it becomes ">" whole: "*" or a partial token is no
  // NATS wildcard, and a {type} value may hold dots.
  EXPECT_EQ(StreamSubjects("cdc.x{type}.events"), "cdc.>");
}

TEST(StreamSubjects, ATemplateWithoutPlaceholdersIsItsOwnSubject) {
  EXPECT_EQ(StreamSubjects("audit.events"), "audit.events");
}

}  // namespace
}  // namespace outboxd::cli
