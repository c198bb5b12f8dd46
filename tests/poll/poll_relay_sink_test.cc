// The polling relay's rules against an in-memory sink (tests/support/fake_sink.h):
// what the broker answers is scripted per message, so each rule is checked without a
// broker's timing. The database is the real PostgreSQL.
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "poll/poll_relay.h"
#include "support/fake_sink.h"
#include "support/poll_test_env.h"

namespace outboxd {
namespace {

using ::testing::StartsWith;

// "publicado_em IS NOT NULL|tentativas|ultimo_erro" of the row `id`.
std::string State(test::PollEnv& env, const std::string& id) {
  return env.db().Scalar(
      absl::StrCat("SELECT (publicado_em IS NOT NULL)::text || '|' || tentativas || '|' || "
                   "coalesce(ultimo_erro, '') FROM outbox WHERE id = '",
                   id, "'"));
}

poll::PollOptions Options(test::PollEnv& env, test::FakeSink::Handle& fake) {
  poll::PollOptions options;
  options.conninfo = env.db().conninfo();
  options.make_sink = fake.Factory();
  options.publish_timeout = absl::Seconds(2);
  return options;
}

// Only what the sink acknowledged is marked published; a refused message is a failed
// attempt with the sink's reason, and one never answered is a failed attempt too
// (never "published" on a timeout).
TEST(PollRelayWithSink, MarksOnlyAcknowledgedRowsPublished) {
  test::PollEnv env({"pedido.confirmado"});
  const std::string a = env.Insert("A", "pedido.confirmado");
  const std::string b = env.Insert("B", "pedido.confirmado");
  const std::string c = env.Insert("C", "pedido.confirmado");
  test::FakeSink::Handle fake;
  fake.set_answer([](const test::ProducedMessage& m) -> std::optional<absl::Status> {
    if (m.key == "A") return absl::OkStatus();
    if (m.key == "B") return absl::InvalidArgumentError("message too large");
    return std::nullopt;  // C: the broker never answers
  });
  poll::PollStats stats;
  poll::PollRelay relay(Options(env, fake), &stats);

  absl::StatusOr<int> reserved = relay.RunOnce();
  ASSERT_TRUE(reserved.ok()) << reserved.status();
  EXPECT_EQ(*reserved, 3);
  EXPECT_THAT(State(env, a), StartsWith("true|0|"));
  EXPECT_EQ(State(env, b), "false|1|message too large");
  EXPECT_THAT(State(env, c), StartsWith("false|1|not acknowledged by the broker within"));
  EXPECT_EQ(fake->produced().size(), 3u);
  EXPECT_EQ(stats.events_published, 1u);
  // The batch is sent at once, not after the producer's linger.ms.
  EXPECT_EQ(fake->send_nows(), 1);
}

// A sink that can deliver nothing more (a fatal producer error) is dropped after its
// batch and a new one made for the next; the rows it could not deliver are retried.
TEST(PollRelayWithSink, RecreatesAnUnhealthySinkAndRetriesItsRows) {
  test::PollEnv env({"pedido.confirmado"});
  const std::string a = env.Insert("A", "pedido.confirmado");
  test::FakeSink::Handle fake;
  bool broken = true;
  fake.set_answer([&](const test::ProducedMessage&) -> std::optional<absl::Status> {
    if (!broken) return absl::OkStatus();
    fake->RaiseFatalErrorForTesting("fenced");
    return absl::AbortedError("fatal: fenced");
  });
  poll::PollStats stats;
  poll::PollRelay relay(Options(env, fake), &stats);

  ASSERT_TRUE(relay.RunOnce().ok());
  EXPECT_THAT(State(env, a), StartsWith("false|1|"));
  EXPECT_EQ(fake.created(), 1);

  broken = false;
  env.db().Exec("UPDATE outbox SET proxima_tentativa_em = now()");  // skip the backoff
  absl::StatusOr<int> reserved = relay.RunOnce();
  ASSERT_TRUE(reserved.ok()) << reserved.status();
  EXPECT_EQ(*reserved, 1);
  EXPECT_EQ(fake.created(), 2) << "the unhealthy sink must be replaced";
  EXPECT_THAT(State(env, a), StartsWith("true|1|"));
}

}  // namespace
}  // namespace outboxd
