// The agent's heartbeat (agent/heartbeat.h) against the local test API server, and what the
// extender makes of it (kube/agent_leases.h + Mirror::SweepAgentLiveness): the Lease is
// created, then renewed with a conditional PUT; a heartbeat that stops makes the node stale
// once the timeout has passed on the extender's clock, and renewing again makes it live.
#include "agent/heartbeat.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "agent/agent_log.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kube/agent_leases.h"
#include "rapidjson/document.h"
#include "state/catalog.h"
#include "state/mirror.h"
#include "tests/testing/eventually.h"
#include "testsupport/fake_apiserver.h"

namespace gse::agent {
namespace {

using ::testing::HasSubstr;
using testing::Eventually;
using testing::FakeApiServer;

constexpr char kNs[] = "gpu-slice-agent";

class HeartbeatTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetLogSinkForTest([](const std::string&) {});
    ASSERT_TRUE(fake_.Start().ok());
    KubeConfig config;
    config.server = fake_.url();
    config.token = "test-token";
    client_ = std::move(*KubeClient::Create(config));
    ASSERT_TRUE(client_->CheckReachable(1, absl::Milliseconds(10)).ok());
  }
  void TearDown() override { SetLogSinkForTest(nullptr); }

  HeartbeatOptions Options(absl::Duration interval = absl::Milliseconds(100)) const {
    HeartbeatOptions o;
    o.node = "gpu-node-1";
    o.lease_namespace = kNs;
    o.holder = "gpu-node-1/gpu-slice-agent-abcde";
    o.interval = interval;
    return o;
  }

  rapidjson::Document StoredLease() const {
    rapidjson::Document doc;
    std::optional<std::string> got = fake_.Get("leases", kNs, "gse-agent-gpu-node-1");
    if (got) doc.Parse(got->c_str());
    return doc;
  }

  FakeApiServer fake_;
  std::unique_ptr<KubeClient> client_;
};

TEST_F(HeartbeatTest, CreatesThenRenewsItsLease) {
  Heartbeat hb(client_.get(), Options(absl::Seconds(20)));
  ASSERT_TRUE(hb.RenewOnce().ok());
  rapidjson::Document first = StoredLease();
  ASSERT_TRUE(first.IsObject()) << "created";
  EXPECT_STREQ(first["spec"]["holderIdentity"].GetString(), "gpu-node-1/gpu-slice-agent-abcde");
  EXPECT_EQ(first["spec"]["leaseDurationSeconds"].GetInt(), 60) << "3 x interval";
  // What the extender decodes of it.
  auto decoded = DecodeAgentLease(first, "Lease");
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ASSERT_TRUE(decoded->has_value());
  EXPECT_EQ((*decoded)->node, "gpu-node-1");
  const std::string rv = first["metadata"]["resourceVersion"].GetString();
  const std::string renew = first["spec"]["renewTime"].GetString();

  absl::SleepFor(absl::Milliseconds(2));  // renewTime has microseconds: it changes
  ASSERT_TRUE(hb.RenewOnce().ok());
  rapidjson::Document second = StoredLease();
  EXPECT_NE(second["metadata"]["resourceVersion"].GetString(), rv) << "updated";
  EXPECT_NE(second["spec"]["renewTime"].GetString(), renew);
  EXPECT_STREQ(second["spec"]["acquireTime"].GetString(), first["spec"]["acquireTime"].GetString())
      << "a renewal keeps the rest of the Lease";
}

TEST_F(HeartbeatTest, ALeaseChangedMeanwhileIsReadAgain) {
  Heartbeat hb(client_.get(), Options(absl::Seconds(20)));
  ASSERT_TRUE(hb.RenewOnce().ok());
  // One PUT answered 409 (another writer came in between GET and PUT).
  FakeApiServer::Fault f;
  f.method = "PUT";
  f.path_contains = "/leases/gse-agent-gpu-node-1";
  f.status = 409;
  f.times = 1;
  fake_.AddFault(f);
  EXPECT_TRUE(hb.RenewOnce().ok()) << "read again, renewed";
}

TEST_F(HeartbeatTest, AStoppedHeartbeatMakesTheNodeStaleAndARenewedOneLiveAgain) {
  // The extender's side: the Lease table fed by its watch, and a mirror whose node carries
  // the agent's inventory.
  const absl::Duration timeout = absl::Seconds(1);
  AgentLeaseTable table(timeout);
  AgentLeaseWatcherOptions wo;
  wo.lease_namespace = kNs;
  wo.log = [](const std::string&) {};
  AgentLeaseWatcher watcher(client_.get(), &table, wo);
  Mirror mirror(std::make_shared<const Catalog>(Catalog::BuiltIn()), MirrorOptions{});
  NodeObject node;
  node.name = "gpu-node-1";
  node.uid = "uid-1";
  node.allocatable_milli["nvidia.com/gpu"] = 2000;
  node.agent_inventory = R"({"version":1,"resources":{}})";
  mirror.Write([&](ClusterState& s) { return s.ApplyNode(node); });
  auto sweep = [&] {
    return mirror.SweepAgentLiveness([&](absl::string_view n) { return table.LastRenewal(n); },
                                     absl::Now(), timeout);
  };
  auto stale = [&] { return mirror.Read([](const ClusterState& s) { return s.FindNode("gpu-node-1")->agent_stale; }); };

  auto hb = std::make_unique<Heartbeat>(client_.get(), Options());
  hb->Start();
  ASSERT_TRUE(Eventually([&] { return hb->counters().renewals >= 1; }, absl::Seconds(30)));
  watcher.Start();
  ASSERT_TRUE(Eventually([&] { return table.current() && table.Find("gpu-node-1").has_value(); },
                         absl::Seconds(30)));
  // Renewing every 100 ms: the node stays live through many sweeps (each renewal is seen).
  const int64_t seen = hb->counters().renewals;
  ASSERT_TRUE(Eventually([&] { return hb->counters().renewals >= seen + 5; }, absl::Seconds(30)));
  EXPECT_EQ(sweep(), 0);
  EXPECT_FALSE(stale());

  hb->Stop();  // the agent dies
  const absl::Time stopped = absl::Now();
  ASSERT_TRUE(Eventually([&] { return sweep() == 1; }, absl::Seconds(30)));
  EXPECT_TRUE(stale());
  EXPECT_GE(absl::Now() - stopped, timeout / 2)
      << "not stale long before the timeout has passed";

  hb = std::make_unique<Heartbeat>(client_.get(), Options());  // the agent restarts
  hb->Start();
  ASSERT_TRUE(Eventually([&] { return sweep() == 0; }, absl::Seconds(30)));
  EXPECT_FALSE(stale());
  hb->Stop();
  watcher.Stop();
}

TEST_F(HeartbeatTest, FailuresAreCountedAndRetried) {
  fake_.SetTokens({"another-token"});
  Heartbeat hb(client_.get(), Options());
  hb.Start();
  ASSERT_TRUE(Eventually([&] { return hb.counters().failures >= 2; }, absl::Seconds(30)));
  EXPECT_EQ(hb.counters().renewals, 0);
  fake_.SetTokens({"test-token"});
  ASSERT_TRUE(Eventually([&] { return hb.counters().renewals >= 1; }, absl::Seconds(30)));
  hb.Stop();
}

}  // namespace
}  // namespace gse::agent
