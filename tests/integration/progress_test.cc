// Progress a person can watch (issue 18 point 5, base/progress.h): `cleanup`,
// `dead-letter replay`, the backfill after `setup --recreate-slot` and the catch-up
// of `run` after an outage draw a line rewritten in place ("\r") with done/total and
// a rate when stderr is a terminal (tests/support/on_terminal.py gives them one);
// with stderr a pipe, or --log-format json, only the summary is logged. The catch-up
// also shows as outboxd_catchup_eta_seconds, 0 once the backlog is drained.
#include <csignal>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "support/metrics_text.h"
#include "support/relay_harness.h"
#include "support/wait_until.h"

namespace outboxd::test {
namespace {

using ::testing::Contains;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;

const std::vector<std::string> kTopics = {"pedido.confirmado"};
const std::string kOnTerminal = std::string(OUTBOXD_SOURCE_DIR) + "/tests/support/on_terminal.py";

enum class Stderr { kTerminal, kPipe };

std::unique_ptr<ChildProcess> StartOutboxd(Stderr to, std::vector<std::string> args) {
  args.insert(args.begin(), BinPath("outboxd"));
  // Debian's interpreter: its pty and termios modules are all the script needs.
  if (to == Stderr::kTerminal) args.insert(args.begin(), {"/usr/bin/python3", kOnTerminal});
  return ChildProcess::Start(args);
}

int RunOutboxd(Stderr to, std::vector<std::string> args, std::string& log) {
  auto child = StartOutboxd(to, std::move(args));
  const std::optional<int> code = child->Wait(absl::Seconds(120));
  log = child->Log();
  return code.value_or(-1);
}

// The progress lines drawn: the text between a "\r" and the "\x1b[K" that ends each
// (an empty one is an erasure). On the terminal the script gives, output
// post-processing is off, so no other "\r" is written.
std::vector<std::string> ProgressLines(const std::string& log) {
  std::vector<std::string> lines;
  for (absl::string_view piece : absl::StrSplit(log, '\r')) {
    const size_t end = piece.find("\x1b[K");
    if (end != absl::string_view::npos && end > 0) lines.emplace_back(piece.substr(0, end));
  }
  return lines;
}

class ProgressTest : public testing::Test {
 protected:
  ProgressTest() : h_(kTopics, /*brokers=*/1) {}

  // `n` outbox rows nine days old, marked published by a polling relay eight days
  // ago: what cleanup deletes. No slot, so the marks are the acknowledgement.
  void OldPublishedRows(int n) {
    h_.db().Exec(
        absl::StrCat("INSERT INTO outbox (aggregate_id, tipo, payload, criado_em, publicado_em) "
                     "SELECT 'a' || i, 'pedido.confirmado', '{}', now() - interval '9 days', "
                     "now() - interval '8 days' FROM generate_series(1, ",
                     n, ") i"));
  }
  void DropSlot() {
    h_.db().Exec(absl::StrCat("SELECT pg_drop_replication_slot('", h_.slot(), "')"));
  }
  // `n` rows the relay has not published, of 20 aggregates.
  void NewRows(int n, int payload_bytes = 10) {
    h_.db().Exec(
        absl::StrCat("INSERT INTO outbox (aggregate_id, tipo, payload) SELECT 'a' || (i % 20), "
                     "'pedido.confirmado', jsonb_build_object('pad', repeat('x', ",
                     payload_bytes, ")) FROM generate_series(1, ", n, ") i"));
  }
  std::vector<std::string> CleanupArgs() {
    return {"cleanup", "--pg", h_.db().conninfo(), "--batch", "500"};
  }
  std::vector<std::string> RunArgs() {
    return {"run",    "--pg",    h_.db().conninfo(), "--brokers",  h_.cluster().bootstraps(),
            "--slot", h_.slot(), "--metrics",        "127.0.0.1:0"};
  }

  RelayHarness h_;
};

TEST_F(ProgressTest, CleanupOnATerminalShowsDoneOverEligibleWithARate) {
  DropSlot();
  OldPublishedRows(20'000);
  std::string log;
  ASSERT_EQ(RunOutboxd(Stderr::kTerminal, CleanupArgs(), log), 0) << log;
  EXPECT_THAT(ProgressLines(log),
              Contains(ContainsRegex("^cleanup of [a-z.]*outbox: [0-9]+/20000 rows \\([0-9]+%\\), "
                                     "[0-9]+ rows/s")))
      << log;
  EXPECT_THAT(log, ContainsRegex("cleanup of [a-z.]*outbox done: 20000 rows in [0-9.]+m?s \\("));
}

TEST_F(ProgressTest, CleanupIntoAPipeOrAsJsonLogsOnlyTheSummary) {
  DropSlot();
  OldPublishedRows(5'000);
  std::string log;
  ASSERT_EQ(RunOutboxd(Stderr::kPipe, CleanupArgs(), log), 0) << log;
  EXPECT_THAT(log, Not(HasSubstr("\r"))) << log;
  EXPECT_THAT(log, ContainsRegex("cleanup of [a-z.]*outbox done: 5000 rows in"));

  OldPublishedRows(5'000);
  std::vector<std::string> json = CleanupArgs();
  json.insert(json.end(), {"--log-format", "json"});
  ASSERT_EQ(RunOutboxd(Stderr::kTerminal, json, log), 0) << log;  // a terminal, but json
  EXPECT_THAT(log, Not(HasSubstr("\r"))) << log;
  EXPECT_THAT(log, ContainsRegex("\"msg\":\"cleanup of [a-z.]*outbox done: 5000 rows in"));
}

TEST_F(ProgressTest, DeadLetterReplayShowsReplayedOverTotal) {
  // 20 aggregates of 20 letters: 20 rounds (one letter per aggregate per round).
  InsertDeadLetters(h_.db(), 400, 20, "'pedido.confirmado'", "'{\"n\":' || i || '}'");
  const std::vector<std::string> replay = h_.ReplayArgs();
  std::string log;
  ASSERT_EQ(RunOutboxd(Stderr::kTerminal, replay, log), 0) << log;
  EXPECT_THAT(ProgressLines(log),
              Contains(ContainsRegex("^dead-letter replay: [0-9]+/400 letters \\([0-9]+%\\), "
                                     "[0-9]+ letters/s")))
      << log;
  EXPECT_THAT(log, HasSubstr("dead-letter replay done: 400 letters in"));
  EXPECT_EQ(h_.db().Scalar("SELECT count(*) FROM outbox_dead_letter"), "0");

  h_.db().Exec(
      "INSERT INTO outbox_dead_letter (id, aggregate_id, type, payload, created_at, lsn, topic, "
      "error) SELECT 'f' || i, 'a', 'pedido.confirmado', '{}', '2026-01-01 00:00:00+00', '0/0', "
      "'pedido.confirmado', 'test' FROM generate_series(1, 3) i");
  ASSERT_EQ(RunOutboxd(Stderr::kPipe, replay, log), 0) << log;
  EXPECT_THAT(log, Not(HasSubstr("\r"))) << log;
  EXPECT_THAT(log, HasSubstr("dead-letter replay done: 3 letters in"));
}

TEST_F(ProgressTest, BackfillAfterRecreateSlotShowsPublishedOverRows) {
  NewRows(5'000);
  std::string log;
  ASSERT_EQ(RunOutboxd(
                Stderr::kPipe,
                {"setup", "--pg", h_.db().conninfo(), "--slot", h_.slot(), "--recreate-slot"}, log),
            0)
      << log;
  auto relay = StartOutboxd(Stderr::kTerminal, RunArgs());
  const std::string done = absl::StrCat("backfill of slot ", h_.slot(), " done: 5000 events in");
  ASSERT_TRUE(relay->WaitForLog(done, absl::Seconds(90))) << relay->Log();
  relay->Signal(SIGTERM);
  EXPECT_EQ(relay->Wait(absl::Seconds(60)), 0) << relay->Log();
  EXPECT_THAT(ProgressLines(relay->Log()),
              Contains(ContainsRegex(absl::StrCat("^backfill of slot ", h_.slot(),
                                                  ": [0-9]+/5000 events \\([0-9]+%\\), "
                                                  "[0-9]+ events/s"))))
      << relay->Log();
}

// A backlog made while the relay is stopped (~40,000 events, well over the 1 MiB
// CatchUp counts as one): on a terminal the restarted relay shows WAL done/total
// with events/s, and outboxd_catchup_eta_seconds is 0 once it is drained.
TEST_F(ProgressTest, CatchUpAfterAnOutageShowsProgressAndItsEtaEndsAtZero) {
  h_.StartRelay();
  ASSERT_EQ(h_.StopRelay(), 0) << h_.relay().Log();
  NewRows(40'000, /*payload_bytes=*/100);
  auto relay = StartOutboxd(Stderr::kTerminal, RunArgs());
  ASSERT_TRUE(relay->WaitForLog("catch-up done: ", absl::Seconds(120))) << relay->Log();
  EXPECT_THAT(relay->Log(), HasSubstr("catching up: "));
  EXPECT_THAT(ProgressLines(relay->Log()),
              Contains(ContainsRegex("^catch-up: [0-9.]+/[0-9.]+ MiB \\([0-9]+%\\), "
                                     "[0-9]+ events/s")))
      << relay->Log();
  EXPECT_TRUE(WaitUntil(absl::Seconds(30), [&] {
    return ScrapeMetric(*relay, "outboxd_catchup_eta_seconds") == 0.0;
  })) << relay->Log();
  relay->Signal(SIGTERM);
  EXPECT_EQ(relay->Wait(absl::Seconds(60)), 0) << relay->Log();
}

TEST_F(ProgressTest, CatchUpAsJsonLogsOnlyTheSummary) {
  h_.StartRelay();
  ASSERT_EQ(h_.StopRelay(), 0) << h_.relay().Log();
  NewRows(20'000, /*payload_bytes=*/100);
  std::vector<std::string> args = RunArgs();
  args.insert(args.end(), {"--log-format", "json"});
  auto relay = StartOutboxd(Stderr::kTerminal, args);
  ASSERT_TRUE(relay->WaitForLog("\"msg\":\"catch-up done: ", absl::Seconds(120))) << relay->Log();
  relay->Signal(SIGTERM);
  EXPECT_EQ(relay->Wait(absl::Seconds(60)), 0) << relay->Log();
  EXPECT_THAT(relay->Log(), Not(HasSubstr("\r"))) << relay->Log();
}

}  // namespace
}  // namespace outboxd::test
