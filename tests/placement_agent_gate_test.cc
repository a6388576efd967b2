// The node agent's per-node gate (state/agent_gate.cc, docs/agent.md "Extender cooperation"):
// on a node whose Node carries gpu.themelio.io/inventory, the pods bound there that its agent
// has not confirmed yet wait, per offering, for one group of units; Reserve refuses anything
// else, filter fails such a node with "waiting for the node agent", and the wait ends on
// gpu.themelio.io/allocated, a terminal phase, deletion, a deletionTimestamp or the timeout.
#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rapidjson/document.h"
#include "scoring/feasibility.h"
#include "scoring/pod_request.h"
#include "state/assignment.h"
#include "state/catalog.h"
#include "state/cluster_state.h"
#include "state/k8s_objects.h"
#include "state/mirror.h"

namespace gse {
namespace {

using ::testing::HasSubstr;

constexpr char kGpu[] = "nvidia.com/gpu";
constexpr char kTs[] = "nvidia.com/mig-1g.5gb.shared";
constexpr char kMps[] = "nvidia.com/gpu.mps";
constexpr absl::Duration kTimeout = absl::Seconds(120);

std::shared_ptr<const Catalog> TestCatalog() {
  std::vector<Offering> v(3);
  v[0].resource = kGpu;
  v[1].resource = kTs;
  v[1].unit = UnitKind::kMig;
  v[1].mig_profile = "1g.5gb";
  v[1].sharing = Sharing::kTimeSliced;
  v[1].replicas = 4;
  v[2].resource = kMps;
  v[2].sharing = Sharing::kMps;
  v[2].replicas = 4;
  absl::StatusOr<Catalog> c = Catalog::FromOfferings(std::move(v));
  EXPECT_TRUE(c.ok()) << c.status();
  return std::make_shared<const Catalog>(*std::move(c));
}

// A node with 4 whole GPUs, 7 time-sliced slices (4 tickets each) and 2 MPS GPUs (4 shares);
// `agent`: it carries the agent's inventory annotation.
NodeObject Node(const std::string& name, bool agent) {
  NodeObject n;
  n.name = name;
  n.uid = name + "-uid";
  n.allocatable_milli[kGpu] = 4000;
  n.allocatable_milli[kTs] = 28000;
  n.allocatable_milli[kMps] = 8000;
  if (agent) n.agent_inventory = R"({"version":1,"resources":{}})";
  return n;
}

class AgentGateTest : public ::testing::Test {
 protected:
  AgentGateTest() : state_(TestCatalog(), MirrorOptions{}) {
    state_.ApplyNode(Node("agent-node", true));
    state_.ApplyNode(Node("plain-node", false));
  }

  OfferingId Id(const char* resource) const { return state_.catalog().Find(resource)->id; }

  Assignment On(const std::string& node, const char* resource, std::vector<int32_t> units,
                int32_t amount = 1) const {
    Assignment a;
    a.node = node;
    a.offering = Id(resource);
    a.units = std::move(units);
    a.amount_per_unit = amount;
    return a;
  }

  static PodClaim Claim(const std::string& ns, const std::string& name) {
    return PodClaim{ns + "/" + name, ns + "-" + name + "-uid", ns, ns};
  }

  // The pod as the API server shows it once bound with `a` (our annotations), optionally
  // confirmed by the agent.
  PodObject Bound(const std::string& ns, const std::string& name, const Assignment& a,
                  bool allocated = false) const {
    PodObject p;
    p.namespace_name = ns;
    p.name = name;
    p.uid = ns + "-" + name + "-uid";
    p.node_name = a.node;
    p.phase = "Pending";
    ContainerResources c;
    c.name = "main";
    const std::string resource = state_.catalog().Get(a.offering).resource;
    c.requests_milli[resource] = (a.amount_per_unit == 1 ? static_cast<int64_t>(a.units.size())
                                                         : a.amount_per_unit) * 1000;
    c.limits_milli = c.requests_milli;
    p.containers.push_back(c);
    p.annotations = AssignmentAnnotations(a, state_.catalog(), ns);
    if (allocated) p.annotations[std::string(kAnnotationAllocated)] = "MIG-x::0";
    return p;
  }

  FitReason Filter(const std::string& ns, const char* resource, const std::string& node,
                   int64_t amount = 1) const {
    PodObject p;
    p.namespace_name = ns;
    p.name = "candidate";
    ContainerResources c;
    c.name = "main";
    c.requests_milli[resource] = amount * 1000;
    p.containers.push_back(c);
    const PodRequest request = ResolvePodRequest(state_.catalog(), p, ns);
    const FilterOutcome out = FilterNodes(state_, request, {state_.FindNode(node)});
    // The one-node rule (bind's re-check, preemption) must agree with the filter.
    EXPECT_EQ(CheckNode(state_, request, state_.FindNode(node)).reason, out.fits[0].reason);
    return out.fits[0].reason;
  }

  ClusterState state_;
};

TEST_F(AgentGateTest, NodeWithoutAgentHasNoGate) {
  ASSERT_TRUE(state_.Reserve(Claim("team-a", "a1"), On("plain-node", kTs, {0})).ok());
  EXPECT_TRUE(state_.Reserve(Claim("team-b", "b1"), On("plain-node", kTs, {1})).ok());
  EXPECT_EQ(Filter("team-c", kTs, "plain-node"), FitReason::kFits);
  EXPECT_FALSE(state_.AgentGateOf(*state_.FindNode("plain-node"), Id(kTs)).closed);
}

TEST_F(AgentGateTest, ReserveAdmitsOnlyTheWaitingGroup) {
  ASSERT_TRUE(state_.Reserve(Claim("team-a", "a1"), On("agent-node", kTs, {0})).ok());
  const ClusterState::AgentGate gate = state_.AgentGateOf(*state_.FindNode("agent-node"), Id(kTs));
  ASSERT_TRUE(gate.closed);
  ASSERT_TRUE(gate.joinable.has_value());
  EXPECT_EQ(*gate.joinable, On("agent-node", kTs, {0}));
  EXPECT_EQ(gate.waiting_pod, "team-a/a1");

  // Another project (another unit): refused, naming the waiting pod.
  const absl::Status other = state_.Reserve(Claim("team-b", "b1"), On("agent-node", kTs, {1}));
  EXPECT_EQ(other.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(other.message(), HasSubstr("waiting for the node agent"));
  EXPECT_THAT(other.message(), HasSubstr("team-a/a1"));
  EXPECT_EQ(state_.FindPod("team-b/b1"), nullptr) << "a refused Reserve changes nothing";
  // The same project on another unit of its own: a second group, refused too.
  EXPECT_FALSE(state_.Reserve(Claim("team-a", "a2"), On("agent-node", kTs, {2})).ok());
  // The same project on the waiting unit: the same group, admitted (not serialised).
  EXPECT_TRUE(state_.Reserve(Claim("team-a", "a3"), On("agent-node", kTs, {0})).ok());
  // Other offerings of the node have their own gate.
  EXPECT_TRUE(state_.Reserve(Claim("team-b", "g1"), On("agent-node", kGpu, {0})).ok());
  // The node without an agent is not gated.
  EXPECT_TRUE(state_.Reserve(Claim("team-b", "b2"), On("plain-node", kTs, {1})).ok());
  EXPECT_THAT(state_.Audit().problems, ::testing::IsEmpty());
}

TEST_F(AgentGateTest, FilterFailsOtherGroupsWithWaitingForTheNodeAgent) {
  ASSERT_TRUE(state_.Reserve(Claim("team-a", "a1"), On("agent-node", kTs, {0})).ok());
  EXPECT_EQ(Filter("team-b", kTs, "agent-node"), FitReason::kWaitingForAgent);
  EXPECT_EQ(Filter("team-a", kTs, "agent-node"), FitReason::kFits);
  // Filter reads the group from the node's summary, Reserve from the holders: they agree.
  const OfferingSummary& summary = state_.FindNode("agent-node")->Find(Id(kTs))->summary;
  const ClusterState::AgentGate gate = state_.AgentGateOf(*state_.FindNode("agent-node"), Id(kTs));
  ASSERT_TRUE(gate.joinable.has_value());
  EXPECT_EQ(std::vector<int32_t>{summary.agent_join_unit}, gate.joinable->units);
  EXPECT_EQ(summary.agent_join_amount, gate.joinable->amount_per_unit);
  EXPECT_EQ(Filter("team-b", kTs, "plain-node"), FitReason::kFits);
  EXPECT_EQ(FitReasonText(FitReason::kWaitingForAgent), "waiting for the node agent");
  EXPECT_TRUE(NodeFit{FitReason::kWaitingForAgent}.unresolvable()) << "preemption cannot help";

  // The waiting unit full (4 tickets): the project's next pod would open a second group.
  for (int i = 2; i <= 4; ++i) {
    ASSERT_TRUE(state_.Reserve(Claim("team-a", absl::StrCat("a", i)), On("agent-node", kTs, {0})).ok());
  }
  EXPECT_EQ(Filter("team-a", kTs, "agent-node"), FitReason::kWaitingForAgent);
}

TEST_F(AgentGateTest, ExclusivePodsAreSerialisedPerNode) {
  ASSERT_TRUE(state_.Reserve(Claim("team-a", "g1"), On("agent-node", kGpu, {0, 1})).ok());
  EXPECT_FALSE(state_.AgentGateOf(*state_.FindNode("agent-node"), Id(kGpu)).joinable.has_value());
  EXPECT_EQ(state_.FindNode("agent-node")->Find(Id(kGpu))->summary.agent_join_unit, -1);
  EXPECT_EQ(Filter("team-a", kGpu, "agent-node"), FitReason::kWaitingForAgent);
  const absl::Status s = state_.Reserve(Claim("team-a", "g2"), On("agent-node", kGpu, {2}));
  EXPECT_THAT(s.message(), HasSubstr("waiting for the node agent"));
  EXPECT_EQ(Filter("team-a", kGpu, "plain-node"), FitReason::kFits);
}

TEST_F(AgentGateTest, MpsJoinsOnlyWithTheSameShares) {
  ASSERT_TRUE(state_.Reserve(Claim("team-a", "m1"), On("agent-node", kMps, {0}, 2)).ok());
  EXPECT_EQ(Filter("team-b", kMps, "agent-node", 2), FitReason::kFits) << "same unit, same amount";
  EXPECT_EQ(Filter("team-b", kMps, "agent-node", 1), FitReason::kWaitingForAgent);
  EXPECT_TRUE(state_.Reserve(Claim("team-b", "m2"), On("agent-node", kMps, {0}, 2)).ok());
  EXPECT_FALSE(state_.Reserve(Claim("team-c", "m3"), On("agent-node", kMps, {1}, 2)).ok());
}

TEST_F(AgentGateTest, TheAgentsConfirmationOpensTheGate) {
  const Assignment a0 = On("agent-node", kTs, {0});
  ASSERT_TRUE(state_.Reserve(Claim("team-a", "a1"), a0).ok());
  state_.ApplyPod(Bound("team-a", "a1", a0));  // the watch shows the binding, unconfirmed
  EXPECT_EQ(Filter("team-b", kTs, "agent-node"), FitReason::kWaitingForAgent);
  state_.ApplyPod(Bound("team-a", "a1", a0, /*allocated=*/true));
  EXPECT_FALSE(state_.AgentGateOf(*state_.FindNode("agent-node"), Id(kTs)).closed);
  EXPECT_EQ(Filter("team-b", kTs, "agent-node"), FitReason::kFits);
  EXPECT_TRUE(state_.Reserve(Claim("team-b", "b1"), On("agent-node", kTs, {1})).ok());
  EXPECT_THAT(state_.Audit().problems, ::testing::IsEmpty());
}

TEST_F(AgentGateTest, TerminalTerminatingAndDeletedPodsStopWaiting) {
  const Assignment a0 = On("agent-node", kTs, {0});
  auto closed = [&] { return state_.AgentGateOf(*state_.FindNode("agent-node"), Id(kTs)).closed; };

  state_.ApplyPod(Bound("team-a", "a1", a0));  // bound by us before a restart: waits too
  ASSERT_TRUE(closed());
  PodObject failed = Bound("team-a", "a1", a0);
  failed.phase = "Failed";  // kubelet refused it
  state_.ApplyPod(failed);
  EXPECT_FALSE(closed());

  state_.ApplyPod(Bound("team-a", "a2", a0));
  ASSERT_TRUE(closed());
  PodObject terminating = Bound("team-a", "a2", a0);
  terminating.terminating = true;
  state_.ApplyPod(terminating);
  EXPECT_FALSE(closed());
  EXPECT_NE(state_.FindPod("team-a/a2"), nullptr) << "a terminating pod still holds its unit";

  state_.ApplyPod(Bound("team-a", "a3", a0));
  ASSERT_TRUE(closed());
  state_.RemovePod("team-a-a3-uid", "team-a/a3");
  EXPECT_FALSE(closed());
  EXPECT_TRUE(state_.agent_waiting_pods().empty());
}

TEST_F(AgentGateTest, TimeoutEndsTheWaitForGood) {
  const Assignment a0 = On("agent-node", kTs, {0});
  ASSERT_TRUE(state_.Reserve(Claim("team-a", "a1"), a0).ok());
  EXPECT_EQ(state_.ExpireAgentWaits(absl::Now() + kTimeout / 2, kTimeout), 0);
  EXPECT_EQ(Filter("team-b", kTs, "agent-node"), FitReason::kWaitingForAgent);
  EXPECT_EQ(state_.ExpireAgentWaits(absl::Now() + kTimeout, kTimeout), 1);
  EXPECT_EQ(Filter("team-b", kTs, "agent-node"), FitReason::kFits);
  // Later events of the pod (still unconfirmed) do not close the gate again.
  state_.ApplyPod(Bound("team-a", "a1", a0));
  EXPECT_FALSE(state_.AgentGateOf(*state_.FindNode("agent-node"), Id(kTs)).closed);
  EXPECT_EQ(state_.ExpireAgentWaits(absl::Now() + 2 * kTimeout, kTimeout), 0);
  EXPECT_THAT(state_.Audit().problems, ::testing::IsEmpty());
}

TEST_F(AgentGateTest, NodeAnnotationTurnsTheGateOnAndOff) {
  ASSERT_TRUE(state_.Reserve(Claim("team-a", "a1"), On("plain-node", kTs, {0})).ok());
  EXPECT_TRUE(state_.agent_waiting_pods().empty()) << "no agent: nothing to wait for";
  EXPECT_TRUE(state_.ApplyNode(Node("plain-node", true)));  // an agent starts publishing
  EXPECT_EQ(Filter("team-b", kTs, "plain-node"), FitReason::kWaitingForAgent)
      << "a pod bound before the agent published its inventory waits for it too: the agent "
         "must tell it apart from the next binds";
  EXPECT_EQ(state_.agent_waiting_pods().size(), 1u);
  ASSERT_TRUE(state_.Reserve(Claim("team-a", "a2"), On("plain-node", kTs, {0})).ok())
      << "its own group may still join";
  EXPECT_FALSE(state_.Reserve(Claim("team-b", "b1"), On("plain-node", kTs, {1})).ok());
  EXPECT_TRUE(state_.ApplyNode(Node("plain-node", false)));  // the agent's annotation removed
  EXPECT_EQ(Filter("team-b", kTs, "plain-node"), FitReason::kFits);
}

TEST(AgentGateMirror, RelistKeepsWaitsAndTheirExpiry) {
  Mirror mirror(TestCatalog(), MirrorOptions{});
  ObjectBatch batch;
  batch.nodes.push_back(Node("n1", true));
  mirror.ReplaceAll(batch, absl::Now());
  const OfferingId ts = mirror.Read([](const ClusterState& s) { return s.catalog().Find(kTs)->id; });
  auto bound = [&](const std::string& name, int32_t unit) {
    PodObject p;
    p.namespace_name = "team-" + name;
    p.name = name;
    p.uid = name + "-uid";
    p.node_name = "n1";
    p.phase = "Running";
    ContainerResources c;
    c.name = "main";
    c.requests_milli[kTs] = 1000;
    p.containers.push_back(c);
    Assignment a;
    a.node = "n1";
    a.offering = ts;
    a.units = {unit};
    p.annotations = mirror.Read([&](const ClusterState& s) {
      return AssignmentAnnotations(a, s.catalog(), p.namespace_name);
    });
    return p;
  };
  batch.pods = {bound("a", 0), bound("b", 1)};  // two groups (bound by someone before us)
  mirror.ReplaceAll(batch, absl::Now());
  EXPECT_EQ(mirror.ExpireAgentWaits(absl::Now() + kTimeout, kTimeout), std::make_pair(2, 0));
  mirror.ReplaceAll(batch, absl::Now());  // a relist of the same, still unconfirmed pods
  EXPECT_EQ(mirror.ExpireAgentWaits(absl::Now() + kTimeout, kTimeout), std::make_pair(0, 0))
      << "expired waits stay over across a relist";
  mirror.Read([&](const ClusterState& s) {
    EXPECT_FALSE(s.AgentGateOf(*s.FindNode("n1"), ts).closed);
    return 0;
  });
}

// Many schedulers' binds at once: at every moment, every (node, offering) with an agent has at
// most one group of waiting pods, and the filter and bind agree (no bind through a gate the
// filter would have closed, checked by Reserve itself under the writer lock).
TEST(AgentGateMirror, ConcurrentBindsNeverOpenTwoGroups) {
  Mirror mirror(TestCatalog(), MirrorOptions{});
  ObjectBatch batch;
  for (int n = 0; n < 3; ++n) batch.nodes.push_back(Node(absl::StrCat("n", n), true));
  mirror.ReplaceAll(batch, absl::Now());
  const OfferingId ts = mirror.Read([](const ClusterState& s) { return s.catalog().Find(kTs)->id; });
  std::atomic<int> bound{0}, refused{0}, violations{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 40; ++i) {
        const std::string ns = absl::StrCat("team-", (t + i) % 4);
        const PodClaim claim{absl::StrCat(ns, "/p", t, "-", i), absl::StrCat("uid-", t, "-", i), ns, ns};
        absl::StatusOr<Assignment> r = mirror.ReserveWith(
            claim, [&](const ClusterState& s) -> absl::StatusOr<Assignment> {
              const std::string node = absl::StrCat("n", i % 3);
              const ClusterState::AgentGate gate = s.AgentGateOf(*s.FindNode(node), ts);
              if (gate.joinable) return *gate.joinable;
              Assignment a;
              a.node = node;
              a.offering = ts;
              a.units = {(t + i) % 7};
              return a;
            });
        (r.ok() ? bound : refused)++;
        mirror.Read([&](const ClusterState& s) {
          for (const auto& [name, node] : s.nodes()) {
            std::map<std::vector<int32_t>, int> groups;
            for (const std::string& id : s.agent_waiting_pods()) {
              const PodRecord* rec = s.FindPodById(id);
              if (rec->assignment.node == name) groups[rec->assignment.units]++;
            }
            if (groups.size() > 1) violations++;
          }
          return 0;
        });
        // Now and then the agent confirms everything waiting on one node.
        if (i % 5 == 4) {
          mirror.Write([&](ClusterState& s) {
            s.ExpireAgentWaits(absl::Now() + kTimeout, kTimeout);
            return 0;
          });
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(violations.load(), 0);
  EXPECT_GT(bound.load(), 0);
  EXPECT_GT(refused.load(), 0) << "the gate refused some binds";
  mirror.Read([](const ClusterState& s) {
    EXPECT_THAT(s.Audit().problems, ::testing::IsEmpty());
    return 0;
  });
}

// ---- the agent's liveness (docs/agent.md "Agent liveness")

TEST_F(AgentGateTest, StaleAgentRefusesItsNodeAtFilterAndReserve) {
  const absl::Time last = absl::FromUnixSeconds(1800000000);
  EXPECT_TRUE(state_.SetAgentStale("agent-node", true, last));
  EXPECT_FALSE(state_.SetAgentStale("agent-node", true, last)) << "no change, nothing to do";
  EXPECT_EQ(state_.AgentStaleNodes(), 1);
  for (const char* resource : {kTs, kGpu, kMps}) {
    EXPECT_EQ(Filter("team-a", resource, "agent-node"), FitReason::kAgentStale) << resource;
    EXPECT_EQ(Filter("team-a", resource, "plain-node"), FitReason::kFits) << resource;
  }
  EXPECT_EQ(FitReasonText(FitReason::kAgentStale), "node agent not renewing its heartbeat Lease");
  EXPECT_EQ(FitReasonLabel(FitReason::kAgentStale), "agent_stale");
  EXPECT_TRUE(NodeFit{FitReason::kAgentStale}.unresolvable()) << "preemption cannot revive an agent";

  const absl::Status s = state_.Reserve(Claim("team-a", "a1"), On("agent-node", kTs, {0}));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("node agent not renewing its heartbeat Lease"));
  EXPECT_THAT(s.message(), HasSubstr("2027-01-15T08:00:00.000Z")) << "names the last renewal seen";
  EXPECT_EQ(state_.FindPod("team-a/a1"), nullptr) << "a refused Reserve changes nothing";
  EXPECT_EQ(state_.OwnedUnitsWithRoom(kNoProject, Id(kTs)), 0);

  // A Node update (its inventory republished) does not revive the agent: only a renewal does.
  NodeObject refreshed = Node("agent-node", true);
  refreshed.agent_inventory = R"({"version":1,"resources":{},"x":1})";
  state_.ApplyNode(refreshed);
  EXPECT_EQ(Filter("team-a", kTs, "agent-node"), FitReason::kAgentStale);

  EXPECT_TRUE(state_.SetAgentStale("agent-node", false, absl::Now()));
  EXPECT_EQ(Filter("team-a", kTs, "agent-node"), FitReason::kFits);
  EXPECT_TRUE(state_.Reserve(Claim("team-a", "a1"), On("agent-node", kTs, {0})).ok());
  EXPECT_THAT(state_.Audit().problems, ::testing::IsEmpty());
}

TEST_F(AgentGateTest, StaleFlagMattersOnlyWhileTheNodeHasAnAgent) {
  EXPECT_TRUE(state_.SetAgentStale("plain-node", true, absl::InfinitePast()));
  EXPECT_EQ(Filter("team-a", kTs, "plain-node"), FitReason::kFits) << "no inventory: no agent to judge";
  EXPECT_TRUE(state_.Reserve(Claim("team-a", "a1"), On("plain-node", kTs, {0})).ok());
  EXPECT_EQ(state_.AgentStaleNodes(), 0);
  EXPECT_FALSE(state_.SetAgentStale("no-such-node", true, absl::InfinitePast()));
}

TEST(AgentLivenessMirror, SweepJudgesByLastRenewalAndARelistKeepsTheVerdict) {
  Mirror mirror(TestCatalog(), MirrorOptions{});
  ObjectBatch batch;
  batch.nodes = {Node("n1", true), Node("n2", true), Node("n3", false)};
  mirror.ReplaceAll(batch, absl::Now());
  const absl::Time now = absl::Now();
  const absl::Duration timeout = absl::Seconds(60);
  std::map<std::string, absl::Time> renewed = {{"n1", now - absl::Seconds(59)},
                                               {"n2", now - absl::Seconds(60)}};
  auto last = [&](absl::string_view node) {
    auto it = renewed.find(std::string(node));
    return it == renewed.end() ? absl::InfinitePast() : it->second;
  };
  EXPECT_EQ(mirror.SweepAgentLiveness(last, now, timeout), 1) << "n2: 60 s without a renewal";
  auto stale = [&](const char* node) {
    return mirror.Read([&](const ClusterState& s) { return s.FindNode(node)->agent_stale; });
  };
  EXPECT_FALSE(stale("n1"));
  EXPECT_TRUE(stale("n2"));
  EXPECT_FALSE(stale("n3")) << "never renewed, but no agent inventory: not judged";
  mirror.ReplaceAll(batch, absl::Now());  // a relist (410, resync)
  EXPECT_TRUE(stale("n2")) << "a relist does not revive a dead agent";
  renewed["n2"] = now;
  EXPECT_EQ(mirror.SweepAgentLiveness(last, now, timeout), 0);
  EXPECT_FALSE(stale("n2"));
}

// Binds, relists and liveness sweeps at once: a node whose agent is dead never gets a pod,
// whatever interleaving (Reserve checks the flag under the writer lock, ReplaceAll carries
// it over), while the live node keeps taking them.
TEST(AgentLivenessMirror, ConcurrentBindsNeverLandOnAStaleNode) {
  Mirror mirror(TestCatalog(), MirrorOptions{});
  ObjectBatch batch;
  batch.nodes = {Node("dead", true), Node("live", true)};
  mirror.ReplaceAll(batch, absl::Now());
  const OfferingId gpu = mirror.Read([](const ClusterState& s) { return s.catalog().Find(kGpu)->id; });
  auto last = [](absl::string_view node) {
    return node == "dead" ? absl::InfinitePast() : absl::Now();
  };
  ASSERT_EQ(mirror.SweepAgentLiveness(last, absl::Now(), absl::Seconds(60)), 1);
  std::atomic<bool> stop{false};
  std::atomic<int> on_dead{0}, on_live{0};
  std::thread sweeper([&] {
    while (!stop.load()) {
      mirror.SweepAgentLiveness(last, absl::Now(), absl::Seconds(60));
      mirror.ReplaceAll(batch, absl::Now());
    }
  });
  std::vector<std::thread> binders;
  for (int t = 0; t < 4; ++t) {
    binders.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        const std::string ns = absl::StrCat("team-", t);
        const PodClaim claim{absl::StrCat(ns, "/p", i), absl::StrCat("uid-", t, "-", i), ns, ns};
        absl::StatusOr<Assignment> r = mirror.ReserveWith(claim, [&](const ClusterState&) {
          Assignment a;
          a.node = i % 2 == 0 ? "dead" : "live";
          a.offering = gpu;
          a.units = {(t + i) % 4};
          return absl::StatusOr<Assignment>(a);
        });
        if (r.ok()) (r->node == "dead" ? on_dead : on_live)++;
      }
    });
  }
  for (std::thread& b : binders) b.join();
  stop.store(true);
  sweeper.join();
  EXPECT_EQ(on_dead.load(), 0);
  EXPECT_GT(on_live.load(), 0);
}

// ---- a wait counts from the binding (PodScheduled), and pods bound before the inventory

PodObject WithScheduledAt(PodObject p, absl::Time t) {
  p.scheduled_at = t;
  return p;
}

TEST_F(AgentGateTest, AWaitFirstSeenAfterARestartCountsFromTheBinding) {
  const absl::Time now = absl::Now();
  // The extender restarted: it first sees pods bound 100 s ago (their PodScheduled time),
  // one bound in the API server's future (its clock ahead of ours), one without the
  // condition (a hand-made object).
  state_.ApplyPod(WithScheduledAt(Bound("team-a", "old", On("agent-node", kTs, {0})), now - absl::Seconds(100)));
  state_.ApplyPod(WithScheduledAt(Bound("team-a", "ahead", On("agent-node", kTs, {0})), now + absl::Hours(1)));
  state_.ApplyPod(Bound("team-a", "none", On("agent-node", kTs, {0})));
  const PodRecord* old = state_.FindPod("team-a/old");
  ASSERT_NE(old, nullptr);
  EXPECT_EQ(old->awaiting_agent_since, now - absl::Seconds(100));
  EXPECT_LE(state_.FindPod("team-a/ahead")->awaiting_agent_since, absl::Now()) << "never later than now";
  EXPECT_GE(state_.FindPod("team-a/none")->awaiting_agent_since, now) << "first sight";
  // 21 s later the old pod's 120 s are over: it stops holding the node, the others do not.
  EXPECT_EQ(state_.ExpireAgentWaits(now + absl::Seconds(21), kTimeout), 1);
  EXPECT_TRUE(state_.FindPod("team-a/old")->agent_wait_expired);
  EXPECT_FALSE(state_.FindPod("team-a/none")->agent_wait_expired);
  // A later event of the same pod (relabel, status) keeps the wait's start.
  state_.ApplyPod(WithScheduledAt(Bound("team-a", "none", On("agent-node", kTs, {0})), now - absl::Hours(1)));
  EXPECT_GE(state_.FindPod("team-a/none")->awaiting_agent_since, now);
}

TEST_F(AgentGateTest, PodsBoundBeforeTheInventoryWaitFromTheirBinding) {
  const absl::Time now = absl::Now();
  const Assignment a0 = On("plain-node", kTs, {0});
  const Assignment a1 = On("plain-node", kTs, {1});
  state_.ApplyPod(WithScheduledAt(Bound("team-a", "early", a0), now - absl::Seconds(110)));
  state_.ApplyPod(WithScheduledAt(Bound("team-b", "confirmed", a1, /*allocated=*/true), now - absl::Seconds(5)));
  EXPECT_TRUE(state_.agent_waiting_pods().empty()) << "no agent yet";
  EXPECT_TRUE(state_.ApplyNode(Node("plain-node", true)));
  EXPECT_TRUE(state_.FindPod("team-a/early")->awaiting_agent);
  EXPECT_FALSE(state_.FindPod("team-b/confirmed")->awaiting_agent) << "already confirmed";
  EXPECT_EQ(state_.FindPod("team-a/early")->awaiting_agent_since, now - absl::Seconds(110));
  EXPECT_EQ(Filter("team-c", kTs, "plain-node"), FitReason::kWaitingForAgent);
  EXPECT_EQ(state_.ExpireAgentWaits(now + absl::Seconds(10), kTimeout), 1) << "120 s from its binding";
  EXPECT_EQ(Filter("team-c", kTs, "plain-node"), FitReason::kFits);
  EXPECT_THAT(state_.Audit().problems, ::testing::IsEmpty());
}

TEST(AgentGateDecode, PodScheduledTimeIsReadAndABadOneIgnored) {
  auto decode = [](const std::string& conditions) {
    const std::string json = absl::StrCat(
        R"({"metadata":{"name":"p","namespace":"ns","uid":"u"},"spec":{"nodeName":"n1","containers":[]},)",
        R"("status":{"phase":"Pending","conditions":)", conditions, "}}");
    rapidjson::Document doc;
    doc.Parse(json.c_str());
    return DecodePod(doc, "Pod");
  };
  // As recorded (kube-api-1.26/pod-after-binding.json).
  auto pod = decode(R"([{"type":"PodScheduled","status":"True","lastProbeTime":null,"lastTransitionTime":"2026-11-29T09:52:02Z"}])");
  ASSERT_TRUE(pod.ok()) << pod.status();
  EXPECT_EQ(pod->scheduled_at, absl::FromUnixSeconds(1795945922));
  for (const char* bad : {R"([{"type":"PodScheduled","status":"True","lastTransitionTime":"yesterday"}])",
                          R"([{"type":"PodScheduled","status":"True","lastTransitionTime":7}])",
                          R"([{"type":"PodScheduled","status":"False","lastTransitionTime":"2026-11-29T09:52:02Z"}])",
                          R"([17, null])", R"("not an array")"}) {
    auto p = decode(bad);
    ASSERT_TRUE(p.ok()) << bad << ": " << p.status() << " (a hint: the pod itself is fine)";
    EXPECT_EQ(p->scheduled_at, absl::InfinitePast()) << bad;
  }
}

TEST(AgentGateMirror, ARestartDoesNotRestartAWait) {
  // The mirror rebuilt from a list (a new process): the pod's wait started at its binding.
  Mirror mirror(TestCatalog(), MirrorOptions{});
  ObjectBatch batch;
  batch.nodes.push_back(Node("n1", true));
  PodObject p;
  p.namespace_name = "team-a";
  p.name = "a";
  p.uid = "a-uid";
  p.node_name = "n1";
  p.phase = "Pending";
  ContainerResources c;
  c.name = "main";
  c.requests_milli[kTs] = 1000;
  p.containers.push_back(c);
  Assignment a;
  a.node = "n1";
  a.units = {0};
  a.offering = mirror.Read([](const ClusterState& s) { return s.catalog().Find(kTs)->id; });
  p.annotations = mirror.Read([&](const ClusterState& s) { return AssignmentAnnotations(a, s.catalog(), "team-a"); });
  const absl::Time now = absl::Now();
  p.scheduled_at = now - absl::Seconds(90);
  batch.pods.push_back(p);
  mirror.ReplaceAll(batch, now);
  EXPECT_EQ(mirror.ExpireAgentWaits(now + absl::Seconds(29), kTimeout), std::make_pair(0, 1));
  EXPECT_EQ(mirror.ExpireAgentWaits(now + absl::Seconds(30), kTimeout), std::make_pair(1, 0))
      << "120 s after the binding, not after the restart";
}

}  // namespace
}  // namespace gse
