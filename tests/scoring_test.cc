// Placement engine: ResolvePodRequest, CheckNode/FilterNodes (DESIGN.md placement rules,
// I3, I5, I6, evictions) and the placement policies (scores, unit choice, Reserve accepts it).
#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scoring/feasibility.h"
#include "scoring/pod_request.h"
#include "scoring/policies.h"
#include "state/assignment.h"
#include "state/catalog.h"
#include "state/cluster_state.h"
#include "state/k8s_objects.h"

namespace gse {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kGpu[] = "nvidia.com/gpu";
constexpr char kGpuAlias[] = "nvidia.com/gpu-legacy";
constexpr char kMig3g[] = "nvidia.com/mig-3g.20gb";
constexpr char kTs[] = "nvidia.com/mig-1g.5gb.shared";
constexpr char kTsAlias[] = "nvidia.com/mig-1g.5gb-ts";
constexpr char kMps[] = "nvidia.com/gpu.mps";
constexpr char kSolo[] = "nvidia.com/gpu.mps-solo";
constexpr char kL4[] = "nvidia.com/l4";
constexpr char kH100[] = "nvidia.com/h100";
constexpr char kPoolLabel[] = "gpu.example.com/pool";

std::shared_ptr<const Catalog> TestCatalog() {
  std::vector<Offering> v(7);
  v[0].resource = kGpu;
  v[0].aliases = {kGpuAlias};
  v[1].resource = kMig3g;
  v[1].unit = UnitKind::kMig;
  v[1].mig_profile = "3g.20gb";
  v[2].resource = kTs;
  v[2].aliases = {kTsAlias};
  v[2].unit = UnitKind::kMig;
  v[2].mig_profile = "1g.5gb";
  v[2].sharing = Sharing::kTimeSliced;
  v[2].replicas = 4;
  v[3].resource = kMps;
  v[3].sharing = Sharing::kMps;
  v[3].replicas = 4;
  v[4].resource = kSolo;
  v[4].sharing = Sharing::kMps;
  v[4].replicas = 4;
  v[4].mps_single_project = true;
  v[5].resource = kL4;
  v[5].product = "NVIDIA-L4";
  v[5].node_selector = {{kPoolLabel, "inference"}};
  v[6].resource = kH100;
  v[6].product = "NVIDIA-H100";
  absl::StatusOr<Catalog> c = Catalog::FromOfferings(std::move(v));
  EXPECT_TRUE(c.ok()) << c.status();
  return std::make_shared<const Catalog>(*std::move(c));
}

// One advertised resource of a node: `units` devices with `replicas` tickets/shares each,
// advertised the way the NVIDIA device plugin and GPU feature discovery do it.
struct Adv {
  std::string resource;
  int32_t units;
  int32_t replicas = 1;
};

NodeObject MakeNode(const std::string& name, const std::vector<Adv>& resources,
                    const std::string& product = "NVIDIA-A100-SXM4-40GB",
                    const std::map<std::string, std::string>& extra_labels = {}) {
  NodeObject n;
  n.name = name;
  n.uid = name + "-uid";
  n.labels = extra_labels;
  n.labels["nvidia.com/gpu.product"] = product;
  n.allocatable_milli["cpu"] = 64000;
  for (const Adv& r : resources) {
    std::string base = r.resource;
    if (absl::EndsWith(base, ".shared")) base.resize(base.size() - 7);
    n.labels[base + ".count"] = std::to_string(r.units);
    n.labels[base + ".replicas"] = std::to_string(r.replicas);
    n.allocatable_milli[r.resource] = int64_t{r.units} * r.replicas * 1000;
  }
  return n;
}

ContainerResources Container(const std::map<std::string, int64_t>& requests_milli,
                             const std::map<std::string, int64_t>& limits_milli = {}) {
  ContainerResources c;
  c.name = "c";
  c.requests_milli = requests_milli;
  c.limits_milli = limits_milli;
  return c;
}

PodObject PodWith(std::vector<ContainerResources> containers,
                  std::vector<ContainerResources> init = {}) {
  PodObject p;
  p.name = "p";
  p.namespace_name = "ns";
  p.containers = std::move(containers);
  p.init_containers = std::move(init);
  return p;
}

class ScoringTest : public ::testing::Test {
 protected:
  ScoringTest() : catalog_(TestCatalog()), state_(catalog_, MirrorOptions{}) {}

  OfferingId Id(const std::string& resource) const { return catalog_->Find(resource)->id; }

  const NodeState* AddNode(const std::string& name, const std::vector<Adv>& resources,
                           const std::string& product = "NVIDIA-A100-SXM4-40GB",
                           const std::map<std::string, std::string>& labels = {}) {
    state_.ApplyNode(MakeNode(name, resources, product, labels));
    return state_.FindNode(name);
  }
  const NodeState* N(const std::string& name) const { return state_.FindNode(name); }

  // A pod of `project` (namespace = project) asking for `amount` of `resource`.
  PodRequest Req(const std::string& resource, int64_t amount, const std::string& project) const {
    return ResolvePodRequest(*catalog_, PodWith({Container({{resource, amount * 1000}})}),
                             project);
  }

  // Places a pod directly (as a bind would), failing the test if Reserve refuses.
  void Place(const std::string& pod, const std::string& project, const std::string& node,
             const std::string& resource, std::vector<int32_t> units, int32_t amount = 1) {
    Assignment a;
    a.node = node;
    a.offering = Id(resource);
    a.units = std::move(units);
    a.amount_per_unit = amount;
    ASSERT_TRUE(state_.Reserve(Claim(pod, project), a).ok())
        << state_.Reserve(Claim(pod, project), a);
  }

  static PodClaim Claim(const std::string& pod, const std::string& project) {
    PodClaim c;
    c.key = project + "/" + pod;
    c.uid = c.key + "-uid";
    c.namespace_name = project;
    c.project = project;
    return c;
  }

  void SetQuota(const std::string& project, const std::string& resource, int64_t hard) {
    ResourceQuotaObject q;
    q.name = "gpu-" + resource;
    q.namespace_name = project;
    q.hard_milli["requests." + resource] = hard * 1000;
    state_.ApplyQuota(q);
  }

  // `evicted_keys`: namespace/name of pods placed by Place (evictions go by UID).
  FitReason Fit(const PodRequest& r, const std::string& node,
                const std::set<std::string>& evicted_keys = {}) {
    Evictions evicted;
    for (const std::string& key : evicted_keys) evicted.insert(key + "-uid");
    return CheckNode(state_, r, N(node), evicted).reason;
  }

  std::unique_ptr<PlacementPolicy> Policy(const std::string& name) {
    absl::StatusOr<std::unique_ptr<PlacementPolicy>> p = MakePolicy(name);
    EXPECT_TRUE(p.ok()) << p.status();
    return *std::move(p);
  }

  std::shared_ptr<const Catalog> catalog_;
  ClusterState state_;
};

// ---------------------------------------------------------------------------------------------
// ResolvePodRequest

TEST_F(ScoringTest, PodWithoutCatalogResourceIsNotInterestedAndPassesEveryNode) {
  AddNode("a", {{kGpu, 1}});
  Place("x", "q", "a", kGpu, {0});  // even a full node
  PodRequest r = ResolvePodRequest(
      *catalog_,
      PodWith({Container({{"cpu", 2000}, {"memory", 1 << 30}}, {{"example.com/fpga", 1000}})}),
      "p");
  EXPECT_EQ(r.offering, kNoOffering);
  EXPECT_FALSE(r.interested());
  EXPECT_TRUE(r.unresolvable.empty());
  // I6: passes known, full and unknown nodes alike.
  FilterOutcome out = FilterNodes(state_, r, {N("a"), nullptr});
  ASSERT_EQ(out.fits.size(), 2u);
  EXPECT_TRUE(out.fits[0].fits());
  EXPECT_TRUE(out.fits[1].fits());
  EXPECT_FALSE(out.spill_outside_candidates);
}

TEST_F(ScoringTest, AliasResolvesToItsOffering) {
  PodRequest r = ResolvePodRequest(*catalog_, PodWith({Container({{kTsAlias, 1000}})}), "p");
  EXPECT_EQ(r.offering, Id(kTs));
  EXPECT_EQ(r.amount, 1);
  EXPECT_EQ(r.project, "p");
  EXPECT_TRUE(r.unresolvable.empty());
  // A name and its alias in one pod ask for the same offering, so they add up.
  PodRequest both = ResolvePodRequest(
      *catalog_, PodWith({Container({{kGpu, 1000}}), Container({{kGpuAlias, 2000}})}), "p");
  EXPECT_EQ(both.offering, Id(kGpu));
  EXPECT_EQ(both.amount, 3);
  EXPECT_TRUE(both.unresolvable.empty());
}

TEST_F(ScoringTest, TwoOfferingsAreUnresolvableOnEveryNode) {
  AddNode("a", {{kGpu, 2}, {kMig3g, 2}});
  PodRequest r = ResolvePodRequest(
      *catalog_, PodWith({Container({{kGpu, 1000}}), Container({{kMig3g, 1000}})}), "p");
  EXPECT_TRUE(r.interested());
  EXPECT_EQ(r.unresolvable, "pod requests more than one GPU offering");
  NodeFit fit = CheckNode(state_, r, N("a"));
  EXPECT_EQ(fit.reason, FitReason::kPodUnresolvable);
  EXPECT_TRUE(fit.unresolvable());
  EXPECT_EQ(fit.Message(r), "pod requests more than one GPU offering");
  EXPECT_EQ(CheckNode(state_, r, nullptr).reason, FitReason::kPodUnresolvable);
}

TEST_F(ScoringTest, EffectiveAmountIsMaxOfContainerSumAndLargestInitContainer) {
  auto amount = [&](std::vector<int64_t> regular, std::vector<int64_t> init) {
    std::vector<ContainerResources> c, i;
    for (int64_t n : regular) c.push_back(Container({{kGpu, n * 1000}}));
    for (int64_t n : init) i.push_back(Container({{kGpu, n * 1000}}));
    return ResolvePodRequest(*catalog_, PodWith(c, i), "p").amount;
  };
  EXPECT_EQ(amount({1, 1}, {}), 2);
  EXPECT_EQ(amount({1, 1}, {3}), 3);     // an init container needing more wins
  EXPECT_EQ(amount({1, 1}, {1, 1}), 2);
  EXPECT_EQ(amount({1}, {1, 1}), 1);     // init containers run one at a time: max, not sum
  EXPECT_EQ(amount({2, 2}, {1, 3}), 4);
  // An init-only request counts too.
  EXPECT_EQ(amount({}, {2}), 2);
}

TEST_F(ScoringTest, SidecarUnitsAddToTheAppContainersAndAreNotReused) {
  // Init containers in spec order: a GPU count, negative for a sidecar (restartPolicy Always).
  auto amount = [&](std::vector<int64_t> regular, std::vector<int64_t> init) {
    std::vector<ContainerResources> c, i;
    for (int64_t n : regular) c.push_back(Container({{kGpu, n * 1000}}));
    for (int64_t n : init) {
      i.push_back(Container({{kGpu, std::abs(n) * 1000}}));
      i.back().restartable = n < 0;
    }
    return ResolvePodRequest(*catalog_, PodWith(c, i), "p").amount;
  };
  EXPECT_EQ(amount({1}, {-1}), 2);        // the sidecar keeps its GPU beside the app's
  EXPECT_EQ(amount({1}, {1}), 1);         // a plain init container's GPU is reused
  EXPECT_EQ(amount({1}, {-1, 2}), 3);     // the init container runs beside the sidecar: 1 + 2
  EXPECT_EQ(amount({1}, {2, -1}), 2);     // started after it, the sidecar reuses its GPU
  EXPECT_EQ(amount({}, {-1, -1}), 2);     // sidecars only
  EXPECT_EQ(amount({2}, {-1, 1, -2}), 5);  // app 2 + sidecars 3 > init 1 + sidecar 1
}

TEST_F(ScoringTest, RequestWinsOverLimitAndLimitStandsInForAMissingRequest) {
  PodRequest limit_only =
      ResolvePodRequest(*catalog_, PodWith({Container({}, {{kGpu, 2000}})}), "p");
  EXPECT_EQ(limit_only.offering, Id(kGpu));
  EXPECT_EQ(limit_only.amount, 2);
  PodRequest both = ResolvePodRequest(
      *catalog_, PodWith({Container({{kGpu, 1000}}, {{kGpu, 3000}})}), "p");
  EXPECT_EQ(both.amount, 1);
}

TEST_F(ScoringTest, MoreThanOneTicketIsRejectedOnEveryNode) {  // I5
  AddNode("a", {{kTs, 2, 4}});
  AddNode("b", {{kTs, 2, 4}});
  for (const PodObject& pod :
       {PodWith({Container({{kTs, 2000}})}),
        PodWith({Container({{kTs, 1000}}), Container({{kTsAlias, 1000}})})}) {
    PodRequest r = ResolvePodRequest(*catalog_, pod, "p");
    EXPECT_EQ(r.unresolvable, "more than one time-sliced ticket requested");
    FilterOutcome out = FilterNodes(state_, r, {N("a"), N("b"), nullptr});
    for (const NodeFit& fit : out.fits) {
      EXPECT_EQ(fit.reason, FitReason::kPodUnresolvable);
      EXPECT_TRUE(fit.unresolvable());
      EXPECT_THAT(fit.Message(r), HasSubstr("more than one time-sliced ticket"));
    }
  }
}

TEST_F(ScoringTest, MpsSharesAboveReplicasAreUnresolvable) {
  EXPECT_TRUE(Req(kMps, 4, "p").unresolvable.empty());
  EXPECT_EQ(Req(kMps, 5, "p").unresolvable, "more shares than one unit has");
}

TEST_F(ScoringTest, FractionalAmountsAreUnresolvableWithTheirOwnReason) {
  PodRequest half = ResolvePodRequest(*catalog_, PodWith({Container({{kGpu, 500}})}), "p");
  EXPECT_THAT(half.unresolvable, HasSubstr("whole number"));
  // 0.5 + 0.5 is still not two halves of a GPU we can hand out.
  PodRequest halves = ResolvePodRequest(
      *catalog_, PodWith({Container({{kGpu, 500}}), Container({{kGpu, 500}})}), "p");
  EXPECT_THAT(halves.unresolvable, HasSubstr("whole number"));
  EXPECT_EQ(CheckNode(state_, half, nullptr).reason, FitReason::kPodUnresolvable);
}

// kube-scheduler sends a pod that names a managed resource with quantity 0 (its name matches
// managedResources); it asks for nothing of ours, so it passes every node like any pod that
// asks for no catalog resource (I6), as the mirror already counts it (issue 12, finding 5).
TEST_F(ScoringTest, ZeroAmountIsNotAGpuPodAndPassesEveryNode) {
  AddNode("gpu", {{kGpu, 1}});
  AddNode("cpu-only", {});
  for (const PodObject& pod :
       {PodWith({Container({{kGpu, 0}})}), PodWith({Container({}, {{kTs, 0}})}),
        PodWith({Container({{kGpu, 0}}), Container({{kMig3g, 0}})}),
        PodWith({Container({{kMps, 0}})}, {Container({{kMps, 0}})})}) {
    const PodRequest r = ResolvePodRequest(*catalog_, pod, "p");
    EXPECT_FALSE(r.interested());
    EXPECT_EQ(r.offering, kNoOffering);
    EXPECT_EQ(r.unresolvable, "");
    const FilterOutcome out = FilterNodes(state_, r, {N("gpu"), N("cpu-only"), nullptr});
    for (const NodeFit& fit : out.fits) EXPECT_TRUE(fit.fits()) << fit.Message(r);
  }
  // A zero of one offering next to a real ask of another is that one ask, not two offerings.
  const PodRequest one = ResolvePodRequest(
      *catalog_, PodWith({Container({{kGpu, 0}}), Container({{kMig3g, 1000}})}), "p");
  EXPECT_EQ(one.offering, Id(kMig3g));
  EXPECT_EQ(one.amount, 1);
  EXPECT_EQ(one.unresolvable, "");
}

TEST_F(ScoringTest, TooManyUnitsForOnePodIsUnresolvable) {
  EXPECT_TRUE(Req(kGpu, kMaxUnitsPerPod, "p").unresolvable.empty());
  EXPECT_FALSE(Req(kGpu, kMaxUnitsPerPod + 1, "p").unresolvable.empty());
}

// ---------------------------------------------------------------------------------------------
// CheckNode: one test per FitReason

TEST_F(ScoringTest, FitsAndReasonTextsAndLabels) {
  AddNode("a", {{kGpu, 1}});
  EXPECT_EQ(Fit(Req(kGpu, 1, "p"), "a"), FitReason::kFits);
  EXPECT_EQ(FitReasonText(FitReason::kNoFreeUnit), "no free unit");
  EXPECT_EQ(FitReasonText(FitReason::kQuotaExhausted), "project quota exhausted");
  EXPECT_EQ(FitReasonLabel(FitReason::kQuotaExhausted), "quota_exhausted");
  EXPECT_EQ(FitReasonLabel(FitReason::kNodeUnknown), "node_unknown");
  NodeFit fit{FitReason::kAffinityElsewhere};
  EXPECT_EQ(fit.Message(Req(kTs, 1, "p")),
            "project's own unit has a free ticket on another node");
}

TEST_F(ScoringTest, NodeUnknownForNullAndDeletedNodes) {
  AddNode("a", {{kGpu, 2}});
  Place("x", "q", "a", kGpu, {0});
  EXPECT_EQ(CheckNode(state_, Req(kGpu, 1, "p"), nullptr).reason, FitReason::kNodeUnknown);
  EXPECT_TRUE(NodeFit{FitReason::kNodeUnknown}.unresolvable());
  // Deleted while a unit is still held: kept for accounting, never placed on.
  state_.RemoveNode("a");
  ASSERT_NE(N("a"), nullptr);
  EXPECT_EQ(Fit(Req(kGpu, 1, "p"), "a"), FitReason::kNodeUnknown);
}

TEST_F(ScoringTest, OfferingNotOnNode) {
  AddNode("a", {{kGpu, 2}});
  AddNode("zero", {{kMig3g, 0}});
  EXPECT_EQ(Fit(Req(kMig3g, 1, "p"), "a"), FitReason::kOfferingNotOnNode);
  EXPECT_EQ(Fit(Req(kMig3g, 1, "p"), "zero"), FitReason::kOfferingNotOnNode);
  EXPECT_TRUE(NodeFit{FitReason::kOfferingNotOnNode}.unresolvable());
}

TEST_F(ScoringTest, NodeThatStoppedAdvertisingTakesNothingEvenWithEvictions) {
  AddNode("a", {{kGpu, 2}});
  Place("x", "q", "a", kGpu, {1});
  AddNode("a", {{kMig3g, 1}});  // reconfigured: the held GPU stays, draining
  ASSERT_NE(N("a")->Find(Id(kGpu)), nullptr);
  EXPECT_EQ(Fit(Req(kGpu, 1, "p"), "a"), FitReason::kOfferingNotOnNode);
  EXPECT_EQ(Fit(Req(kGpu, 1, "p"), "a", {"q/x"}), FitReason::kOfferingNotOnNode);
}

TEST_F(ScoringTest, OfferingUnusableWhenNodeSharesItDifferentlyOrProductDiffers) {
  AddNode("ts", {{kMig3g, 2, 2}});                     // exclusive offering time-sliced here
  AddNode("a100", {{kH100, 2}}, "NVIDIA-A100-SXM4-80GB");  // product mismatch
  AddNode("h100", {{kH100, 2}}, "NVIDIA-H100-80GB-HBM3");
  EXPECT_EQ(Fit(Req(kMig3g, 1, "p"), "ts"), FitReason::kOfferingUnusable);
  EXPECT_EQ(Fit(Req(kH100, 1, "p"), "a100"), FitReason::kOfferingUnusable);
  EXPECT_EQ(Fit(Req(kH100, 1, "p"), "h100"), FitReason::kFits);
  EXPECT_TRUE(NodeFit{FitReason::kOfferingUnusable}.unresolvable());
}

TEST_F(ScoringTest, NodeSelectorMustMatch) {
  AddNode("plain", {{kL4, 2}}, "NVIDIA-L4");
  AddNode("other-pool", {{kL4, 2}}, "NVIDIA-L4", {{kPoolLabel, "training"}});
  AddNode("pool", {{kL4, 2}}, "NVIDIA-L4", {{kPoolLabel, "inference"}});
  EXPECT_EQ(Fit(Req(kL4, 1, "p"), "plain"), FitReason::kNodeSelector);
  EXPECT_EQ(Fit(Req(kL4, 1, "p"), "other-pool"), FitReason::kNodeSelector);
  EXPECT_EQ(Fit(Req(kL4, 1, "p"), "pool"), FitReason::kFits);
  EXPECT_TRUE(NodeFit{FitReason::kNodeSelector}.unresolvable());
}

TEST_F(ScoringTest, NoFreeUnitForExclusive) {
  AddNode("a", {{kGpu, 2}});
  Place("x", "q", "a", kGpu, {1});
  EXPECT_EQ(Fit(Req(kGpu, 1, "p"), "a"), FitReason::kFits);
  EXPECT_EQ(Fit(Req(kGpu, 2, "p"), "a"), FitReason::kNoFreeUnit);
  EXPECT_FALSE(NodeFit{FitReason::kNoFreeUnit}.unresolvable());  // preemption may help
}

TEST_F(ScoringTest, QuotaExhaustedOnlyWhenQuotaIsTheObstacle) {
  AddNode("a", {{kGpu, 2}});
  AddNode("b", {{kGpu, 1}});
  SetQuota("p", kGpu, 2);
  Place("x", "p", "a", kGpu, {0});
  EXPECT_EQ(Fit(Req(kGpu, 1, "p"), "a"), FitReason::kFits);
  EXPECT_EQ(Fit(Req(kGpu, 2, "p"), "a"), FitReason::kNoFreeUnit);  // capacity first
  Place("y", "p", "b", kGpu, {0});
  const NodeFit fit = CheckNode(state_, Req(kGpu, 1, "p"), N("a"));
  EXPECT_EQ(fit.reason, FitReason::kQuotaExhausted);
  EXPECT_TRUE(fit.unresolvable());
  EXPECT_EQ(fit.Message(Req(kGpu, 1, "p")), "project quota exhausted");
  // Full node and exhausted quota: capacity is reported, preemption (of the project's own
  // pods) could fix both.
  EXPECT_EQ(Fit(Req(kGpu, 1, "p"), "b"), FitReason::kNoFreeUnit);
  // Other projects are not limited by p's quota.
  EXPECT_EQ(Fit(Req(kGpu, 1, "q"), "a"), FitReason::kFits);
}

TEST_F(ScoringTest, TimeSlicedOwnUnitNeedsNoQuotaButANewUnitDoes) {
  AddNode("a", {{kTs, 2, 4}});
  AddNode("b", {{kTs, 2, 4}});
  SetQuota("p", kTs, 4);  // 4 tickets = one unit
  Place("t1", "p", "a", kTs, {1});
  EXPECT_EQ(Fit(Req(kTs, 1, "p"), "a"), FitReason::kFits);
  EXPECT_EQ(Fit(Req(kTs, 1, "p"), "b"), FitReason::kQuotaExhausted);
  for (const char* pod : {"t2", "t3", "t4"}) Place(pod, "p", "a", kTs, {1});
  // Own unit full: a new unit would be needed, and quota forbids it.
  EXPECT_EQ(Fit(Req(kTs, 1, "p"), "a"), FitReason::kQuotaExhausted);
}

TEST_F(ScoringTest, JoiningAnOwnUnitNeedsNoQuotaEvenAfterTheQuotaWasLowered) {
  AddNode("a", {{kTs, 2, 4}});
  Place("t1", "p", "a", kTs, {0});
  Place("t2", "p", "a", kTs, {1});
  SetQuota("p", kTs, 4);  // one unit, while p owns two: a fact, not our doing
  const PodRequest r = Req(kTs, 1, "p");
  EXPECT_EQ(Fit(r, "a"), FitReason::kFits);  // a ticket on an owned unit adds no unit
  // And the bind's re-check agrees with the filter.
  for (const std::string& name : PolicyNames()) {
    absl::StatusOr<Assignment> a = Policy(name)->ChooseUnits(state_, r, *N("a"));
    ASSERT_TRUE(a.ok()) << a.status();
    const absl::Status s = state_.Reserve(Claim("t-" + name, "p"), *a);
    EXPECT_TRUE(s.ok()) << name << ": " << s;
  }
  EXPECT_EQ(state_.Usage(state_.FindProject("p"), Id(kTs)), 8) << "two slices of 4 tickets";
}

// Issue 12: the filter charges a slice with its node's real ticket count (the catalog says 4).
TEST_F(ScoringTest, TimeSlicedQuotaBuysSlicesByTheirRealTicketCount) {
  AddNode("a", {{kTs, 1, 2}});
  AddNode("b", {{kTs, 1, 2}});
  AddNode("c", {{kTs, 1, 2}});
  AddNode("big", {{kTs, 1, 8}});
  SetQuota("p", kTs, 4);  // 4 tickets: two 2-ticket slices
  Place("t1", "p", "a", kTs, {0});
  Place("t2", "p", "a", kTs, {0});
  EXPECT_EQ(Fit(Req(kTs, 1, "p"), "b"), FitReason::kFits) << "2 tickets owned < 4";
  Place("t3", "p", "b", kTs, {0});
  EXPECT_EQ(Fit(Req(kTs, 1, "p"), "c"), FitReason::kQuotaExhausted) << "4 tickets owned";
  EXPECT_EQ(Fit(Req(kTs, 1, "p"), "b"), FitReason::kFits) << "its own slice b/0 has room";

  SetQuota("q", kTs, 5);
  Place("u1", "q", "big", kTs, {0});
  EXPECT_EQ(Fit(Req(kTs, 1, "q"), "c"), FitReason::kQuotaExhausted) << "8 tickets owned >= 5";
  // Evicting q's only holder of big/0 gives the whole slice back.
  EXPECT_EQ(Fit(Req(kTs, 1, "q"), "c", {"q/u1"}), FitReason::kFits);
}

TEST_F(ScoringTest, NoFreeTicketAndOtherProjectsUnitsAreNeverUsed) {
  AddNode("a", {{kTs, 1, 4}});
  Place("t1", "q", "a", kTs, {0});  // q's unit still has 3 free tickets
  const NodeFit fit = CheckNode(state_, Req(kTs, 1, "p"), N("a"));
  EXPECT_EQ(fit.reason, FitReason::kNoFreeTicket);
  EXPECT_FALSE(fit.unresolvable());
  EXPECT_EQ(Fit(Req(kTs, 1, "q"), "a"), FitReason::kFits);
}

TEST_F(ScoringTest, NoUnitWithSharesForMps) {
  AddNode("a", {{kMps, 2, 4}});
  Place("m1", "q", "a", kMps, {0}, 3);
  Place("m2", "q", "a", kMps, {1}, 2);
  EXPECT_EQ(Fit(Req(kMps, 2, "p"), "a"), FitReason::kFits);  // unit 1 has 2 free
  EXPECT_EQ(Fit(Req(kMps, 3, "p"), "a"), FitReason::kNoUnitWithShares);  // 1 + 2 free, split
  EXPECT_FALSE(NodeFit{FitReason::kNoUnitWithShares}.unresolvable());
}

TEST_F(ScoringTest, MpsQuotaCountsShares) {
  AddNode("a", {{kMps, 2, 4}});
  SetQuota("p", kMps, 3);
  Place("m1", "p", "a", kMps, {0}, 2);
  EXPECT_EQ(Fit(Req(kMps, 1, "p"), "a"), FitReason::kFits);
  EXPECT_EQ(Fit(Req(kMps, 2, "p"), "a"), FitReason::kQuotaExhausted);
}

TEST_F(ScoringTest, MpsUnitsAreSharedAcrossProjectsUnlessSingleProject) {
  AddNode("a", {{kMps, 1, 4}, {kSolo, 1, 4}});
  Place("m1", "q", "a", kMps, {0}, 1);
  Place("s1", "q", "a", kSolo, {0}, 1);
  EXPECT_EQ(Fit(Req(kMps, 2, "p"), "a"), FitReason::kFits);
  EXPECT_EQ(Fit(Req(kSolo, 2, "p"), "a"), FitReason::kNoUnitWithShares);
  EXPECT_EQ(Fit(Req(kSolo, 2, "q"), "a"), FitReason::kFits);
}

TEST_F(ScoringTest, DrainingUnitsTakeNoNewHolder) {
  AddNode("a", {{kGpu, 2}});
  Place("x", "q", "a", kGpu, {1});
  AddNode("a", {{kGpu, 1}});  // shrinks: unit 1 is held, so it stays, draining
  ASSERT_EQ(N("a")->Find(Id(kGpu))->units.size(), 2u);
  EXPECT_EQ(Fit(Req(kGpu, 1, "p"), "a"), FitReason::kFits);
  EXPECT_EQ(Fit(Req(kGpu, 2, "p"), "a"), FitReason::kNoFreeUnit);
  // Evicting the holder of a draining unit frees nothing usable.
  EXPECT_EQ(Fit(Req(kGpu, 2, "p"), "a", {"q/x"}), FitReason::kNoFreeUnit);
  absl::StatusOr<Assignment> a = Policy("affinity-pack")->ChooseUnits(state_, Req(kGpu, 1, "p"),
                                                                      *N("a"));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_THAT(a->units, ElementsAre(0));
}

// ---------------------------------------------------------------------------------------------
// Evictions (preemption): one code path with the plain check

TEST_F(ScoringTest, EvictingTheRightHolderFreesAnExclusiveUnit) {
  AddNode("a", {{kGpu, 1}, {kMig3g, 1}});
  AddNode("b", {{kGpu, 1}});
  Place("gpu-a", "q", "a", kGpu, {0});
  Place("mig-a", "q", "a", kMig3g, {0});
  Place("gpu-b", "q", "b", kGpu, {0});
  const PodRequest r = Req(kGpu, 1, "p");
  EXPECT_EQ(Fit(r, "a"), FitReason::kNoFreeUnit);
  EXPECT_EQ(Fit(r, "a", {"q/gpu-a"}), FitReason::kFits);
  EXPECT_EQ(Fit(r, "a", {"q/mig-a"}), FitReason::kNoFreeUnit);  // another offering
  EXPECT_EQ(Fit(r, "a", {"q/gpu-b"}), FitReason::kNoFreeUnit);  // another node
  EXPECT_EQ(Fit(r, "a", {"nobody/unknown"}), FitReason::kNoFreeUnit);
  // The overlay changed nothing.
  EXPECT_EQ(Fit(r, "a"), FitReason::kNoFreeUnit);
  EXPECT_EQ(state_.Usage(state_.FindProject("q"), Id(kGpu)), 2);
}

TEST_F(ScoringTest, EvictionsFreeATimeSlicedUnitOnlyWhenItsOwnerIsGone) {
  AddNode("a", {{kTs, 1, 4}});
  Place("t1", "q", "a", kTs, {0});
  Place("t2", "q", "a", kTs, {0});
  const PodRequest r = Req(kTs, 1, "p");
  EXPECT_EQ(Fit(r, "a"), FitReason::kNoFreeTicket);
  EXPECT_EQ(Fit(r, "a", {"q/t1"}), FitReason::kNoFreeTicket);  // q still owns it
  EXPECT_EQ(Fit(r, "a", {"q/t1", "q/t2"}), FitReason::kFits);   // empty: p may open it
}

TEST_F(ScoringTest, EvictionsFreeAFullOwnUnitForItsProject) {
  AddNode("a", {{kTs, 1, 2}});
  Place("t1", "p", "a", kTs, {0});
  Place("t2", "p", "a", kTs, {0});
  EXPECT_EQ(Fit(Req(kTs, 1, "p"), "a"), FitReason::kNoFreeTicket);
  EXPECT_EQ(Fit(Req(kTs, 1, "p"), "a", {"p/t1"}), FitReason::kFits);
}

TEST_F(ScoringTest, EvictingTheProjectsOwnPodsLowersItsUsage) {
  AddNode("a", {{kGpu, 2}});
  AddNode("b", {{kGpu, 1}});
  SetQuota("p", kGpu, 1);
  Place("mine", "p", "b", kGpu, {0});
  Place("theirs", "q", "a", kGpu, {0});
  const PodRequest r = Req(kGpu, 1, "p");
  EXPECT_EQ(Fit(r, "a"), FitReason::kQuotaExhausted);
  EXPECT_EQ(Fit(r, "a", {"q/theirs"}), FitReason::kQuotaExhausted);
  EXPECT_EQ(Fit(r, "a", {"p/mine"}), FitReason::kFits);
}

TEST_F(ScoringTest, EvictionsLowerTimeSlicedUsageOnlyWhenAUnitIsNoLongerOwned) {
  AddNode("a", {{kTs, 1, 4}});
  AddNode("b", {{kTs, 1, 4}});
  SetQuota("p", kTs, 4);  // one unit
  Place("t1", "p", "a", kTs, {0});
  Place("t2", "p", "a", kTs, {0});
  const PodRequest r = Req(kTs, 1, "p");
  EXPECT_EQ(Fit(r, "b"), FitReason::kQuotaExhausted);
  EXPECT_EQ(Fit(r, "b", {"p/t1"}), FitReason::kQuotaExhausted);  // still owns unit a/0
  EXPECT_EQ(Fit(r, "b", {"p/t1", "p/t2"}), FitReason::kFits);
}

TEST_F(ScoringTest, EvictionsLowerMpsUsageByTheVictimsShares) {
  AddNode("a", {{kMps, 2, 4}});
  SetQuota("p", kMps, 4);
  Place("m1", "p", "a", kMps, {0}, 3);
  Place("m2", "p", "a", kMps, {1}, 1);
  const PodRequest r = Req(kMps, 2, "p");
  EXPECT_EQ(Fit(r, "a"), FitReason::kQuotaExhausted);
  EXPECT_EQ(Fit(r, "a", {"p/m2"}), FitReason::kQuotaExhausted);  // 3 + 2 > 4
  EXPECT_EQ(Fit(r, "a", {"p/m1"}), FitReason::kFits);
}

TEST_F(ScoringTest, EvictionsRecomputeSingleProjectMpsOwnership) {
  AddNode("a", {{kSolo, 1, 4}});
  Place("s1", "q", "a", kSolo, {0}, 1);
  EXPECT_EQ(Fit(Req(kSolo, 1, "p"), "a"), FitReason::kNoUnitWithShares);
  EXPECT_EQ(Fit(Req(kSolo, 1, "p"), "a", {"q/s1"}), FitReason::kFits);
}

// ---------------------------------------------------------------------------------------------
// FilterNodes: the cross-node affinity rule (I3)

TEST_F(ScoringTest, OwnUnitWithFreeTicketOnACandidateBlocksNewUnitsElsewhere) {
  AddNode("own", {{kTs, 2, 4}});
  AddNode("empty", {{kTs, 2, 4}});
  AddNode("gpu", {{kGpu, 2}});
  Place("t1", "p", "own", kTs, {0});
  const PodRequest r = Req(kTs, 1, "p");
  FilterOutcome out = FilterNodes(state_, r, {N("empty"), N("own"), N("gpu"), nullptr});
  EXPECT_EQ(out.fits[0].reason, FitReason::kAffinityElsewhere);
  EXPECT_TRUE(out.fits[0].unresolvable());  // preemption must not evict for it
  EXPECT_EQ(out.fits[1].reason, FitReason::kFits);
  EXPECT_EQ(out.fits[2].reason, FitReason::kOfferingNotOnNode);  // own reasons are kept
  EXPECT_EQ(out.fits[3].reason, FitReason::kNodeUnknown);
  EXPECT_FALSE(out.spill_outside_candidates);
  // Another project is not bound by p's units.
  FilterOutcome other = FilterNodes(state_, Req(kTs, 1, "q"), {N("empty"), N("own")});
  EXPECT_TRUE(other.fits[0].fits());
  EXPECT_TRUE(other.fits[1].fits());
}

TEST_F(ScoringTest, OwnUnitOutsideTheCandidatesIsASpill) {
  AddNode("own", {{kTs, 2, 4}});
  AddNode("empty", {{kTs, 2, 4}});
  Place("t1", "p", "own", kTs, {0});
  FilterOutcome out = FilterNodes(state_, Req(kTs, 1, "p"), {N("empty")});
  EXPECT_TRUE(out.fits[0].fits());
  EXPECT_TRUE(out.spill_outside_candidates);
  // No spill for a project that owns nothing with room.
  FilterOutcome q = FilterNodes(state_, Req(kTs, 1, "q"), {N("empty")});
  EXPECT_FALSE(q.spill_outside_candidates);
}

TEST_F(ScoringTest, FullOwnUnitsDoNotBlockANewUnit) {
  AddNode("own", {{kTs, 1, 2}});
  AddNode("empty", {{kTs, 2, 2}});
  Place("t1", "p", "own", kTs, {0});
  Place("t2", "p", "own", kTs, {0});
  FilterOutcome out = FilterNodes(state_, Req(kTs, 1, "p"), {N("own"), N("empty")});
  EXPECT_EQ(out.fits[0].reason, FitReason::kNoFreeTicket);
  EXPECT_EQ(out.fits[1].reason, FitReason::kFits);
  EXPECT_FALSE(out.spill_outside_candidates);
}

TEST_F(ScoringTest, AffinityRuleAppliesToTimeSlicedOnly) {
  AddNode("a", {{kGpu, 2}, {kMps, 1, 4}});
  AddNode("b", {{kGpu, 2}, {kMps, 1, 4}});
  Place("g", "p", "a", kGpu, {0});
  Place("m", "p", "a", kMps, {0}, 1);
  for (const PodRequest& r : {Req(kGpu, 1, "p"), Req(kMps, 1, "p")}) {
    FilterOutcome out = FilterNodes(state_, r, {N("a"), N("b")});
    EXPECT_TRUE(out.fits[0].fits());
    EXPECT_TRUE(out.fits[1].fits());
    EXPECT_FALSE(out.spill_outside_candidates);
  }
}

// ---------------------------------------------------------------------------------------------
// Policies

TEST_F(ScoringTest, PolicyRegistry) {
  EXPECT_THAT(PolicyNames(), ElementsAre("affinity-pack", "spread"));
  for (const std::string& name : PolicyNames()) EXPECT_EQ(Policy(name)->name(), name);
  absl::StatusOr<std::unique_ptr<PlacementPolicy>> bad = MakePolicy("bin-pack");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("\"bin-pack\""));
  EXPECT_THAT(bad.status().message(), HasSubstr("affinity-pack"));
}

TEST_F(ScoringTest, PackPrefersTheProjectsPartlyFilledUnitFullestFirst) {
  AddNode("one-ticket", {{kTs, 2, 4}});
  AddNode("three-tickets", {{kTs, 2, 4}});
  AddNode("empty", {{kTs, 2, 4}});
  AddNode("other-project", {{kTs, 2, 4}});
  Place("a1", "p", "one-ticket", kTs, {1});
  for (const char* pod : {"b1", "b2", "b3"}) Place(pod, "p", "three-tickets", kTs, {0});
  Place("q1", "q", "other-project", kTs, {0});
  auto pack = Policy("affinity-pack");
  const PodRequest r = Req(kTs, 1, "p");
  const int64_t one = pack->Score(state_, r, *N("one-ticket"));
  const int64_t three = pack->Score(state_, r, *N("three-tickets"));
  const int64_t empty = pack->Score(state_, r, *N("empty"));
  const int64_t other = pack->Score(state_, r, *N("other-project"));
  EXPECT_EQ(three, kMaxExtenderPriority);
  EXPECT_GE(three, one);   // fuller never scores less than emptier
  EXPECT_GT(one, empty);   // own partly filled unit beats empty units
  EXPECT_GT(one, other);
  EXPECT_GE(empty, 0);
  // The chosen units are the ones the scores described.
  EXPECT_THAT(pack->ChooseUnits(state_, r, *N("one-ticket"))->units, ElementsAre(1));
  EXPECT_THAT(pack->ChooseUnits(state_, r, *N("three-tickets"))->units, ElementsAre(0));
  // q's unit has free tickets but is never chosen for p.
  EXPECT_THAT(pack->ChooseUnits(state_, r, *N("other-project"))->units, ElementsAre(1));
}

TEST_F(ScoringTest, FullerOwnUnitIsChosenInsideANodeUnderPackEmptierUnderSpread) {
  AddNode("a", {{kTs, 3, 4}});
  Place("x1", "p", "a", kTs, {0});
  for (const char* pod : {"y1", "y2", "y3"}) Place(pod, "p", "a", kTs, {2});
  const PodRequest r = Req(kTs, 1, "p");
  EXPECT_THAT(Policy("affinity-pack")->ChooseUnits(state_, r, *N("a"))->units, ElementsAre(2));
  EXPECT_THAT(Policy("spread")->ChooseUnits(state_, r, *N("a"))->units, ElementsAre(0));
  // Spread still keeps the project on its own unit: unit 1 (empty) is not chosen.
}

TEST_F(ScoringTest, PackPrefersNodesWhereTheProjectAlreadyOwnsUnits) {
  AddNode("own-full", {{kTs, 2, 2}});
  AddNode("empty", {{kTs, 2, 2}});
  AddNode("busy", {{kTs, 2, 2}});
  Place("t1", "p", "own-full", kTs, {0});
  Place("t2", "p", "own-full", kTs, {0});
  Place("q1", "q", "busy", kTs, {0});
  Place("q2", "q", "busy", kTs, {0});
  auto pack = Policy("affinity-pack");
  const PodRequest r = Req(kTs, 1, "p");
  const int64_t own = pack->Score(state_, r, *N("own-full"));
  const int64_t busy = pack->Score(state_, r, *N("busy"));
  const int64_t empty = pack->Score(state_, r, *N("empty"));
  EXPECT_GT(own, busy);
  EXPECT_GT(busy, empty);  // packing: an already used node before a whole free one
  EXPECT_LT(own, kMaxExtenderPriority);
}

TEST_F(ScoringTest, PackIsBestFitForExclusiveAndSpreadIsTheOpposite) {
  AddNode("nearly-full", {{kGpu, 8}});
  AddNode("quarter", {{kGpu, 8}});
  AddNode("empty", {{kGpu, 8}});
  for (int32_t i = 0; i < 7; ++i) Place(absl::StrCat("n", i), "q", "nearly-full", kGpu, {i});
  Place("q1", "q", "quarter", kGpu, {0, 1});
  auto pack = Policy("affinity-pack");
  auto spread = Policy("spread");
  const PodRequest r = Req(kGpu, 1, "p");
  const int64_t p_full = pack->Score(state_, r, *N("nearly-full"));
  const int64_t p_quarter = pack->Score(state_, r, *N("quarter"));
  const int64_t p_empty = pack->Score(state_, r, *N("empty"));
  EXPECT_EQ(p_full, kMaxExtenderPriority);  // exact fit
  EXPECT_GT(p_full, p_quarter);
  EXPECT_GT(p_quarter, p_empty);            // a whole free node is kept for last
  const int64_t s_full = spread->Score(state_, r, *N("nearly-full"));
  const int64_t s_quarter = spread->Score(state_, r, *N("quarter"));
  const int64_t s_empty = spread->Score(state_, r, *N("empty"));
  EXPECT_LT(s_full, s_quarter);
  EXPECT_LT(s_quarter, s_empty);
  for (int64_t s : {p_full, p_quarter, p_empty, s_full, s_quarter, s_empty}) {
    EXPECT_GE(s, 0);
    EXPECT_LE(s, kMaxExtenderPriority);
  }
}

TEST_F(ScoringTest, ExactFitOnAnEmptyNodeIsBestFit) {
  AddNode("small", {{kGpu, 2}});
  AddNode("big", {{kGpu, 8}});
  Place("q1", "q", "big", kGpu, {0});
  auto pack = Policy("affinity-pack");
  const PodRequest r = Req(kGpu, 2, "p");
  EXPECT_GT(pack->Score(state_, r, *N("small")), pack->Score(state_, r, *N("big")));
}

TEST_F(ScoringTest, ExclusiveChoosesLowestIndexFreeUnits) {
  AddNode("a", {{kGpu, 5}});
  Place("x", "q", "a", kGpu, {0, 2});
  for (const std::string& name : PolicyNames()) {
    absl::StatusOr<Assignment> a = Policy(name)->ChooseUnits(state_, Req(kGpu, 2, "p"), *N("a"));
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_THAT(a->units, ElementsAre(1, 3)) << name;
  }
}

TEST_F(ScoringTest, MpsPackChoosesTheFullestUnitThatFitsSpreadTheEmptiest) {
  AddNode("a", {{kMps, 4, 4}});
  Place("m0", "q", "a", kMps, {0}, 1);  // 3 free
  Place("m1", "q", "a", kMps, {1}, 2);  // 2 free
  Place("m3", "q", "a", kMps, {3}, 3);  // 1 free; unit 2 empty
  auto pack = Policy("affinity-pack");
  auto spread = Policy("spread");
  EXPECT_THAT(pack->ChooseUnits(state_, Req(kMps, 2, "p"), *N("a"))->units, ElementsAre(1));
  EXPECT_THAT(pack->ChooseUnits(state_, Req(kMps, 3, "p"), *N("a"))->units, ElementsAre(0));
  EXPECT_THAT(pack->ChooseUnits(state_, Req(kMps, 4, "p"), *N("a"))->units, ElementsAre(2));
  EXPECT_THAT(spread->ChooseUnits(state_, Req(kMps, 2, "p"), *N("a"))->units, ElementsAre(2));
  absl::StatusOr<Assignment> a = pack->ChooseUnits(state_, Req(kMps, 2, "p"), *N("a"));
  EXPECT_EQ(a->amount_per_unit, 2);
}

TEST_F(ScoringTest, MpsPackScoresATighterFitHigher) {
  AddNode("tight", {{kMps, 1, 4}});
  AddNode("loose", {{kMps, 1, 4}});
  AddNode("empty", {{kMps, 1, 4}});
  Place("t", "q", "tight", kMps, {0}, 3);
  Place("l", "q", "loose", kMps, {0}, 1);
  auto pack = Policy("affinity-pack");
  const PodRequest r = Req(kMps, 1, "p");
  EXPECT_EQ(pack->Score(state_, r, *N("tight")), kMaxExtenderPriority);
  EXPECT_GT(pack->Score(state_, r, *N("tight")), pack->Score(state_, r, *N("loose")));
  EXPECT_GT(pack->Score(state_, r, *N("loose")), pack->Score(state_, r, *N("empty")));
  auto spread = Policy("spread");
  EXPECT_LT(spread->Score(state_, r, *N("tight")), spread->Score(state_, r, *N("empty")));
}

TEST_F(ScoringTest, NonFittingNodeScoresZeroAndChooseUnitsSaysWhy) {
  AddNode("a", {{kGpu, 1}});
  Place("x", "q", "a", kGpu, {0});
  for (const std::string& name : PolicyNames()) {
    auto policy = Policy(name);
    EXPECT_EQ(policy->Score(state_, Req(kGpu, 1, "p"), *N("a")), 0);
    absl::StatusOr<Assignment> a = policy->ChooseUnits(state_, Req(kGpu, 1, "p"), *N("a"));
    ASSERT_FALSE(a.ok());
    EXPECT_EQ(a.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(a.status().message(), HasSubstr("no free unit"));
    absl::StatusOr<Assignment> two =
        policy->ChooseUnits(state_, Req(kTs, 2, "p"), *N("a"));
    ASSERT_FALSE(two.ok());
    EXPECT_THAT(two.status().message(), HasSubstr("more than one time-sliced ticket"));
  }
}

TEST_F(ScoringTest, ChooseUnitsResultIsAcceptedByReserve) {
  AddNode("mix", {{kGpu, 3}, {kTs, 2, 4}, {kMps, 2, 4}, {kSolo, 1, 4}});
  Place("busy", "q", "mix", kGpu, {0});
  Place("tq", "q", "mix", kTs, {0});
  int pod = 0;
  for (const std::string& name : PolicyNames()) {
    auto policy = Policy(name);
    for (const PodRequest& r : {Req(kGpu, 1, "p"), Req(kTs, 1, "p"), Req(kTs, 1, "p"),
                                Req(kMps, 3, "p"), Req(kSolo, 2, "p")}) {
      absl::StatusOr<Assignment> a = policy->ChooseUnits(state_, r, *N("mix"));
      ASSERT_TRUE(a.ok()) << name << ": " << a.status();
      EXPECT_EQ(a->node, "mix");
      EXPECT_EQ(a->offering, r.offering);
      EXPECT_TRUE(std::is_sorted(a->units.begin(), a->units.end()));
      const absl::Status s = state_.Reserve(Claim(absl::StrCat("pod", pod++), "p"), *a);
      EXPECT_TRUE(s.ok()) << name << ": " << s;
    }
  }
  // p's tickets all went to one unit (not q's): I2 and I3 inside the node.
  const NodeOffering* ts = N("mix")->Find(Id(kTs));
  EXPECT_EQ(ts->units[0].used, 1);
  EXPECT_EQ(ts->units[1].used, 4);
  EXPECT_EQ(ts->units[1].owner, state_.FindProject("p"));
  EXPECT_EQ(state_.Audit().problems.size(), 0u);
}

// Prioritize scores most nodes from their rows in the room table (ScoreFilteredRow); the
// score must be the one ScoreFiltered gives from the node, for every policy, sharing, owner
// and fill level, and the row must decline where it cannot know (MPS, owners >= 64).
TEST_F(ScoringTest, ScoresFromRoomRowsEqualScoresFromNodes) {
  for (const char* n : {"empty", "busy", "owned", "full", "mixed"}) {
    AddNode(n, {{kGpu, 4}, {kTs, 3, 4}, {kMps, 2, 4}});
  }
  Place("g1", "q", "busy", kGpu, {0});
  Place("t1", "p", "owned", kTs, {1});
  Place("t2", "p", "owned", kTs, {1});
  for (int i = 0; i < 4; ++i) Place(absl::StrCat("f", i), "p", "full", kTs, {0});
  Place("g2", "q", "full", kGpu, {0, 1, 2});
  Place("t3", "q", "mixed", kTs, {0});
  Place("m1", "p", "mixed", kMps, {0}, 2);
  int from_rows = 0;
  for (const std::string& policy_name : PolicyNames()) {
    std::unique_ptr<PlacementPolicy> policy = Policy(policy_name);
    for (const PodRequest& r : {Req(kGpu, 1, "p"), Req(kGpu, 2, "q"), Req(kTs, 1, "p"),
                                Req(kTs, 1, "q"), Req(kTs, 1, "new"), Req(kMps, 1, "p")}) {
      const ProjectId project = state_.FindProject(r.project);
      const RoomRow* rows = state_.RoomRows(r.offering);
      for (const auto& [name, node] : state_.nodes()) {
        if (!CheckNode(state_, r, node.get()).fits()) continue;
        SCOPED_TRACE(absl::StrCat(policy_name, " ", catalog_->Get(r.offering).resource, " ",
                                  r.project, " on ", name));
        const std::optional<int64_t> row_score =
            policy->ScoreFilteredRow(state_, r, project, rows[node->slot]);
        if (catalog_->Get(r.offering).sharing == Sharing::kMps) {
          EXPECT_FALSE(row_score.has_value());
          continue;
        }
        ASSERT_TRUE(row_score.has_value());
        EXPECT_EQ(*row_score, policy->ScoreFiltered(state_, r, project, *node));
        ++from_rows;
      }
    }
  }
  EXPECT_GE(from_rows, 30);
}

TEST_F(ScoringTest, RoomRowsDeclineScoresForProjectIdsBeyondTheOwnerBits) {
  AddNode("n", {{kTs, 20, 4}});
  AddNode("gpus", {{kGpu, 64}});
  // Projects get ids as they first hold something: 64 of them on whole GPUs first.
  for (int p = 0; p < 70; ++p) {
    const std::string project = absl::StrCat("p", p);
    if (p < 64) {
      Place("g", project, "gpus", kGpu, {p});
    } else {
      Place("t", project, "n", kTs, {p - 64});
    }
  }
  const PodRequest r = Req(kTs, 1, "p65");
  const ProjectId project = state_.FindProject("p65");
  ASSERT_GE(project, 64);
  std::unique_ptr<PlacementPolicy> policy = Policy("affinity-pack");
  const NodeState& node = *N("n");
  EXPECT_FALSE(policy->ScoreFilteredRow(state_, r, project, state_.RoomRows(r.offering)[node.slot])
                   .has_value());
  EXPECT_EQ(policy->ScoreFiltered(state_, r, project, node), 10);  // its own unit, with room
}

TEST_F(ScoringTest, ScoresAreDeterministicAndNotInterestedPodsScoreZero) {
  AddNode("a", {{kGpu, 4}});
  auto pack = Policy("affinity-pack");
  const PodRequest cpu_only =
      ResolvePodRequest(*catalog_, PodWith({Container({{"cpu", 1000}})}), "p");
  EXPECT_EQ(pack->Score(state_, cpu_only, *N("a")), 0);
  EXPECT_FALSE(pack->ChooseUnits(state_, cpu_only, *N("a")).ok());
  const PodRequest r = Req(kGpu, 1, "p");
  EXPECT_EQ(pack->Score(state_, r, *N("a")), pack->Score(state_, r, *N("a")));
  EXPECT_EQ(*pack->ChooseUnits(state_, r, *N("a")), *pack->ChooseUnits(state_, r, *N("a")));
}

}  // namespace
}  // namespace gse
