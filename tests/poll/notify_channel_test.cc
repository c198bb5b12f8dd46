// Issue 13, point 2: `poll --notify --install-notify-trigger` with a channel
// PostgreSQL cannot NOTIFY on (70 bytes, not UTF-8) installed a trigger that failed
// every application INSERT. Now such a channel is refused with exit 2 and one line
// before anything is installed, the installed function never raises whatever its
// argument, and a valid channel (63 bytes, the limit) still notifies.
#include <libpq-fe.h>
#include <sys/select.h>

#include <algorithm>
#include <csignal>
#include <string>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "support/child_process.h"
#include "support/poll_test_env.h"
#include "support/wait_until.h"

namespace outboxd {
namespace {

using test::ChildProcess;
using ::testing::HasSubstr;

const std::vector<std::string> kTopics = {"pedido.confirmado"};

std::unique_ptr<ChildProcess> StartPoll(test::PollEnv& env, const std::string& channel) {
  return ChildProcess::Start({test::BinPath("outboxd"), "poll", "--pg", env.db().conninfo(),
                              "--brokers", env.cluster().bootstraps(), "--notify",
                              "--install-notify-trigger", "--notify-channel", channel});
}

void ExpectInsertWorks(test::PollEnv& env, const std::string& why) {
  pg::Connection conn = env.db().Connect();
  absl::StatusOr<pg::Result> inserted = conn.Exec(
      "INSERT INTO outbox (aggregate_id, tipo, payload) VALUES ('a', 'pedido.confirmado', '{}')");
  EXPECT_TRUE(inserted.ok()) << why << ": " << inserted.status();
}

// Waits for one notification on `conn`; its channel, or "" at the deadline.
std::string NextNotification(pg::Connection& conn, absl::Duration timeout) {
  std::string channel;
  test::WaitUntil(
      timeout,
      [&] {
        if (PQconsumeInput(conn.get()) == 0) return true;
        if (PGnotify* notify = PQnotifies(conn.get())) {
          channel = notify->relname;
          PQfreemem(notify);
          return true;
        }
        fd_set readable;
        FD_ZERO(&readable);
        FD_SET(conn.socket(), &readable);
        timeval tv{0, 100000};
        select(conn.socket() + 1, &readable, nullptr, nullptr, &tv);
        return false;
      },
      absl::ZeroDuration());
  return channel;
}

TEST(NotifyChannel, ALongOrNonUtf8ChannelIsRefusedAndInsertsKeepWorking) {
  test::PollEnv env(kTopics);
  for (const std::string& channel : {std::string(70, 'c'), std::string("\xff\xfe")}) {
    auto relay = StartPoll(env, channel);
    EXPECT_EQ(relay->Wait(absl::Seconds(30)), 2) << relay->Log();
    const std::string log = relay->Log();
    EXPECT_THAT(log, HasSubstr("--notify-channel \"")) << log;
    EXPECT_EQ(std::count(log.begin(), log.end(), '\n'), 1) << "one line: " << log;
    EXPECT_EQ(env.db().Scalar("SELECT count(*) FROM pg_trigger WHERE tgname = 'outboxd_notify'"),
              "0")
        << "nothing installed";
    ExpectInsertWorks(env, "after refusing the channel");
  }
}

// The function outboxd installs skips a channel pg_notify would refuse instead of
// raising inside the application's INSERT: shown with triggers made by hand.
TEST(NotifyChannel, TheInstalledFunctionNeverFailsAnInsert) {
  test::PollEnv env(kTopics);
  const std::string channel(63, 'n');  // the longest PostgreSQL allows
  auto relay = StartPoll(env, channel);
  ASSERT_TRUE(relay->WaitForLog("polling table", absl::Seconds(30))) << relay->Log();
  relay->Signal(SIGTERM);
  EXPECT_EQ(relay->Wait(absl::Seconds(60)), 0) << relay->Log();

  // A valid channel still notifies.
  pg::Connection listener = env.db().Connect();
  ASSERT_TRUE(listener.Exec("LISTEN " + channel).ok());
  ExpectInsertWorks(env, "with the installed trigger");
  EXPECT_EQ(NextNotification(listener, absl::Seconds(10)), channel);

  env.db().Exec(
      "CREATE TRIGGER too_long AFTER INSERT ON outbox FOR EACH STATEMENT "
      "EXECUTE FUNCTION outboxd_notify('" +
      std::string(70, 'x') + "')");
  env.db().Exec(
      "CREATE TRIGGER empty AFTER INSERT ON outbox FOR EACH STATEMENT "
      "EXECUTE FUNCTION outboxd_notify('')");
  env.db().Exec(
      "CREATE TRIGGER no_argument AFTER INSERT ON outbox FOR EACH STATEMENT "
      "EXECUTE FUNCTION outboxd_notify()");
  ExpectInsertWorks(env, "with triggers whose channel pg_notify refuses");
}

}  // namespace
}  // namespace outboxd
