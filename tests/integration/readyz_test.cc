// /readyz against the real PostgreSQL and the mock broker: true for the streaming
// relay and for its standby (which /healthz calls unhealthy), so a Kubernetes pair
// (deploy/kubernetes/) has both pods ready and its PodDisruptionBudget can let one go.
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "support/metrics_text.h"
#include "support/relay_harness.h"

namespace outboxd::test {
namespace {

using ::testing::HasSubstr;

TEST(Readyz, IsReadyForTheStreamingRelayAndItsStandby) {
  RelayHarness h({"pedido.confirmado"});
  h.StartRelay();
  std::unique_ptr<ChildProcess> standby = h.SpawnRelay();
  ASSERT_TRUE(standby->WaitForLog("standing by", absl::Seconds(30))) << standby->Log();

  auto active_ready = WaitForHttpStatus(h.relay(), "/readyz", 200, absl::Seconds(30));
  EXPECT_EQ(active_ready.first, 200) << active_ready.second;
  auto standby_ready = WaitForHttpStatus(*standby, "/readyz", 200, absl::Seconds(30));
  EXPECT_EQ(standby_ready.first, 200) << standby_ready.second << standby->Log();
  EXPECT_THAT(standby_ready.second, HasSubstr("standing by"));
  EXPECT_EQ(HttpGetFromLog(*standby, "/healthz").first, 503);  // unchanged: not streaming

  // The active relay goes: the standby takes the slot and is ready as the streamer.
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
  ASSERT_TRUE(WaitForStreaming(*standby)) << standby->Log();
  auto took_over = WaitForHttpStatus(*standby, "/healthz", 200, absl::Seconds(30));
  EXPECT_EQ(took_over.first, 200) << took_over.second;
  EXPECT_EQ(HttpGetFromLog(*standby, "/readyz").second, "ok\n");
  h.set_relay(std::move(standby));
  EXPECT_EQ(h.StopRelay(), 0) << h.relay().Log();
}

}  // namespace
}  // namespace outboxd::test
