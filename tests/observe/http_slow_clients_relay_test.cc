// `outboxd run` as a child process while 200 idle connections and a slow-loris client
// hang on its metrics port (issue 13, point 3), or 1,500 from one address (issue 27,
// point 10): /healthz and /readyz keep answering and the relay keeps relaying.
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "support/http_client.h"
#include "support/relay_harness.h"
#include "support/wait_until.h"

namespace outboxd::test {
namespace {

const std::vector<std::string> kTopics = {"pedido.confirmado"};

// Generous against the ~1 ms a probe takes on loopback, well under the 3 s the Docker
// HEALTHCHECK allows.
constexpr absl::Duration kProbeDeadline = absl::Seconds(1);

// The port from the relay's "metrics on http://127.0.0.1:PORT/metrics" line, or -1.
int MetricsPort(ChildProcess& relay) {
  const std::string marker = "metrics on http://127.0.0.1:";
  std::string log = relay.Log();
  size_t at = log.find(marker);
  return at == std::string::npos ? -1 : std::atoi(log.c_str() + at + marker.size());
}

void InsertEvents(RelayHarness& h, int first, int rows) {
  auto conn = h.db().Connect();
  auto r = conn.Exec(
      absl::StrCat("INSERT INTO outbox (aggregate_id, tipo, payload) SELECT 'agg-' || (n % 7), "
                   "'pedido.confirmado', jsonb_build_object('n', n) FROM generate_series(",
                   first, ", ", first + rows - 1, ") n"));
  ASSERT_TRUE(r.ok()) << r.status();
}

// Starts the relay and the collector's reading; `port`: the relay's metrics port.
void StartRelay(RelayHarness& h, int* port) {
  h.StartRelay();
  *port = MetricsPort(h.relay());
  ASSERT_GT(*port, 0) << h.relay().Log();
  ASSERT_TRUE(h.collector().WaitUntilAssigned(absl::Seconds(30)));
}

TEST(HttpSlowClients, RelayKeepsRelayingAndHealthzAnswers) {
  RelayHarness h(kTopics);
  int port = 0;
  ASSERT_NO_FATAL_FAILURE(StartRelay(h, &port));

  // Both reconnect whenever the server cuts them off: 201 connections held throughout,
  // the crowd's from four addresses (one may hold only 64).
  IdleCrowd crowd("127.0.0.1", port, 200, {"127.0.0.10", "127.0.0.11", "127.0.0.12", "127.0.0.13"});
  SlowLoris loris("127.0.0.1", port, absl::Seconds(1));
  EXPECT_TRUE(crowd.WaitUntilAllOpen(absl::Seconds(30))) << crowd.open() << " of 200 connected";

  // Three rounds: events committed while the slow clients hang on all arrive, and each
  // round's probe answers 200 within the deadline.
  for (int round = 0; round < 3; ++round) {
    InsertEvents(h, round * 100 + 1, 100);
    EXPECT_TRUE(h.collector().WaitForCount((round + 1) * 100, absl::Seconds(30)))
        << "round " << round << ": " << h.collector().Count() << " events arrived";
    HttpReply reply = Exchange("127.0.0.1", port, "GET /healthz", kProbeDeadline);
    EXPECT_EQ(reply.status, 200) << "round " << round << ": no answer within " << kProbeDeadline
                                 << " (" << crowd.open() << " idle connections open)";
  }
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

// Issue 27, point 10, as reported: 1,500 slow connections from one client made 4 of 5
// /readyz probes of `outboxd run` time out at 3 s. The flood comes from 127.0.0.2 and
// reconnects whenever it is cut off; the probes come from 127.0.0.3 and must each
// answer within 1 s, while the relay keeps relaying.
TEST(HttpSlowClients, AFloodFromOneAddressLeavesReadyzAnsweringAnother) {
  RelayHarness h(kTopics);
  int port = 0;
  ASSERT_NO_FATAL_FAILURE(StartRelay(h, &port));
  ASSERT_TRUE(WaitUntil(absl::Seconds(30), [&] {
    return Exchange("127.0.0.1", port, "GET /readyz", kProbeDeadline).status == 200;
  })) << h.relay().Log();

  IdleCrowd flood("127.0.0.1", port, 1500, {"127.0.0.2"});
  EXPECT_TRUE(flood.WaitUntilAllOpen(absl::Seconds(30))) << flood.open() << " of 1500 connected";
  for (int i = 0; i < 5; ++i) {
    HttpReply reply = ExchangeFrom("127.0.0.3", "127.0.0.1", port, "GET /readyz", kProbeDeadline);
    EXPECT_EQ(reply.status, 200) << "probe " << i << ": no answer within " << kProbeDeadline;
  }
  InsertEvents(h, 1, 100);
  EXPECT_TRUE(h.collector().WaitForCount(100, absl::Seconds(30)))
      << h.collector().Count() << " events arrived";
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

}  // namespace
}  // namespace outboxd::test
