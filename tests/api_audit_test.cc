// The fault run's referee (tests/testing/api_audit.h) on API server states built by hand: it
// must find each kind of violation from the objects alone, and must not blame what the
// extender could not have refused (a quota lowered or a node shrunk under running pods, a
// relabel).
#include "tests/testing/api_audit.h"

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/fault_cluster.h"
#include "testsupport/fake_apiserver.h"

namespace gse::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr char kShared[] = "nvidia.com/mig-1g.5gb.shared";
constexpr char kGpu[] = "nvidia.com/gpu";
constexpr char kMps[] = "nvidia.com/gpu.mps";
constexpr char kGpuShared[] = "nvidia.com/gpu.shared";  // DRA node dra-g
constexpr char kMig[] = "nvidia.com/mig-1g.5gb";        // mig-x, and DRA node dra-m

class ApiAuditTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(cluster_.Load().ok()); }

  // A pod bound by someone to `node` with the extender's annotations (unit "" = none).
  void Bound(const std::string& ns, const std::string& name, const std::string& resource, int amount,
             const std::string& node, const std::string& units, const std::string& project,
             int amount_per_unit = 1) {
    PodSpec spec;
    spec.namespace_name = ns;
    spec.name = name;
    spec.requests[resource] = absl::StrCat(amount);
    spec.node = node;
    if (!units.empty()) {
      spec.annotations["gpu.themelio.io/unit"] = absl::StrCat(node, "/", resource, "/", units);
      spec.annotations["gpu.themelio.io/amount"] = absl::StrCat(amount_per_unit);
      spec.annotations["gpu.themelio.io/project"] = project;
    }
    ASSERT_TRUE(fake_.Apply("pods", PodJson(spec)).ok());
  }

  // A pod bound to a DRA node by our bind: unit annotations plus the devices they name
  // (`device` of the node), and its extended-resource claim allocated `claimed` (pod UID
  // "uid-<name>"); `claimed` empty: no claim (kube-scheduler deleted it).
  void BoundOnDra(const std::string& ns, const std::string& name, const std::string& resource,
                  const std::string& node, int unit, const std::string& device, const std::string& project,
                  const std::string& claimed, bool terminating = false) {
    PodSpec spec;
    spec.namespace_name = ns;
    spec.name = name;
    spec.uid = "uid-" + name;
    spec.requests[resource] = "1";
    spec.node = node;
    spec.annotations["gpu.themelio.io/unit"] = absl::StrCat(node, "/", resource, "/", unit);
    spec.annotations["gpu.themelio.io/amount"] = "1";
    spec.annotations["gpu.themelio.io/project"] = project;
    spec.annotations["gpu.themelio.io/dra-devices"] = absl::StrCat("gpu.nvidia.com/", node, "/", device, "=U");
    ASSERT_TRUE(fake_.Apply("pods", PodJson(spec)).ok());
    if (!claimed.empty()) Claim(ns, name, node, claimed, terminating);
  }
  void Claim(const std::string& ns, const std::string& pod, const std::string& node,
             const std::string& device, bool terminating = false) {
    ASSERT_TRUE(fake_.Apply("resourceclaims",
                            absl::StrCat(R"({"metadata":{"name":")", pod, R"(-extended-resources-x","namespace":")", ns,
                                         "\"", terminating ? R"(,"deletionTimestamp":"2026-12-01T00:00:00Z")" : "",
                                         R"(,"ownerReferences":[{"apiVersion":"v1","kind":"Pod","name":")", pod,
                                         R"(","uid":"uid-)", pod, R"(","controller":true}]},)",
                                         R"("status":{"allocation":{"devices":{"results":[{"request":"r",)",
                                         R"("driver":"gpu.nvidia.com","pool":")", node, R"(","device":")",
                                         device, R"("}]}}}})"))
                    .ok());
  }

  AuditSnapshot Snap() const { return audit_.Snapshot(fake_); }

  // Kinds found when `end` is judged as the end of a phase that began at `previous`, with no
  // change of facts at its start.
  std::vector<std::string> Kinds(const AuditSnapshot& previous, const AuditSnapshot& end) const {
    std::vector<std::string> kinds;
    for (const AuditViolation& v : audit_.Judge(previous, {&previous.facts}, previous, end)) {
      kinds.push_back(v.kind);
    }
    return kinds;
  }

  FakeApiServer fake_;
  FaultCluster cluster_{&fake_};
  ApiAudit audit_{FaultCluster::Offerings(), FaultCluster::kProjectLabel, FaultCluster::DraNodes()};
};

TEST_F(ApiAuditTest, AValidPlacementHasNoViolation) {
  const AuditSnapshot empty = Snap();
  Bound("alpha", "t1", kShared, 1, "ts-a", "0", "alpha");
  Bound("lab", "t2", kShared, 1, "ts-a", "0", "alpha");  // lab belongs to alpha
  Bound("beta", "t3", kShared, 1, "ts-a", "1", "beta");
  Bound("gamma", "g1", kGpu, 2, "dgx-a", "0,1", "gamma");
  Bound("gamma", "m1", kMps, 3, "mps-a", "0", "gamma", 3);
  Bound("alpha", "m2", kMps, 1, "mps-a", "0", "alpha", 1);  // MPS units may be shared
  const AuditSnapshot end = Snap();
  EXPECT_THAT(Kinds(empty, end), IsEmpty());
  EXPECT_EQ(end.holders.size(), 6u);
  // Usage: alpha owns one time-sliced slice (two tickets used) and is charged its 4 tickets,
  // shares count as shares.
  EXPECT_EQ(end.usage.at({"alpha", kShared}), 4);
  EXPECT_EQ(end.usage.at({"beta", kShared}), 4);
  EXPECT_EQ(end.usage.at({"gamma", kGpu}), 2);
  EXPECT_EQ(end.usage.at({"gamma", kMps}), 3);
  // Quotas from the ResourceQuotas: time-sliced hard values count tickets, a project's
  // namespaces add up (alpha 8 + lab 4 tickets), gamma has none (unlimited).
  EXPECT_EQ(end.facts.quota.at({"alpha", kShared}), 12);
  EXPECT_EQ(end.facts.quota.count({"gamma", kShared}), 0u);
  EXPECT_EQ(end.facts.units.at({"ts-a", kShared}).units, 3);
  EXPECT_EQ(end.facts.units.at({"ts-a", kShared}).capacity, 4);
}

// On a DRA node the claims are what the kubelet hands out: the referee reads them, and the
// annotations must name the claim's devices.
TEST_F(ApiAuditTest, DraNodesAreJudgedByTheirClaims) {
  const AuditSnapshot empty = Snap();
  // Valid: alpha's two pods on gpu-0, beta on gpu-1, an exclusive MIG each; a pod whose claim
  // was deleted (kube-scheduler's Unreserve after an unknown bind) holds by its annotation.
  BoundOnDra("alpha", "a1", kGpuShared, "dra-g", 0, "gpu-0", "alpha", "gpu-0");
  BoundOnDra("lab", "a2", kGpuShared, "dra-g", 0, "gpu-0", "alpha", "gpu-0");
  BoundOnDra("beta", "b1", kGpuShared, "dra-g", 1, "gpu-1", "beta", "gpu-1");
  BoundOnDra("gamma", "g1", kMig, "dra-m", 2, "gpu-9-mig-1g5gb-19-2", "gamma", "gpu-9-mig-1g5gb-19-2");
  BoundOnDra("gamma", "g2", kMig, "dra-m", 3, "gpu-9-mig-1g5gb-19-3", "gamma", "");
  // A failed attempt's claim (its pod is not bound) and a terminating one count for nothing.
  Claim("beta", "pending", "dra-g", "gpu-0");
  BoundOnDra("beta", "b2", kGpuShared, "dra-g", 1, "gpu-1", "beta", "gpu-0", /*terminating=*/true);
  const AuditSnapshot valid = Snap();
  EXPECT_THAT(Kinds(empty, valid), IsEmpty());
  EXPECT_EQ(valid.facts.units.at({"dra-g", kGpuShared}).units, 2);
  EXPECT_EQ(valid.facts.units.at({"dra-m", kMig}).units, 4);
  EXPECT_EQ(valid.usage.at({"gamma", kMig}), 2);  // quota in units across node kinds

  // beta's pod annotated gpu-1 whose claim holds alpha's gpu-0; a MIG device allocated twice.
  BoundOnDra("beta", "b3", kGpuShared, "dra-g", 1, "gpu-1", "beta", "gpu-0");
  BoundOnDra("alpha", "m1", kMig, "dra-m", 0, "gpu-9-mig-1g5gb-19-0", "alpha", "gpu-9-mig-1g5gb-19-2");
  const std::vector<AuditViolation> v = audit_.Judge(valid, {&valid.facts}, valid, Snap());
  std::vector<std::string> kinds;
  for (const AuditViolation& x : v) kinds.push_back(x.kind);
  EXPECT_THAT(kinds, ::testing::UnorderedElementsAre("I1 DRA capacity", "I2 DRA two projects",
                                                     "I1 DRA device", "I1 DRA device"));
  for (const AuditViolation& x : v) {
    if (x.kind == "I2 DRA two projects") {
      EXPECT_THAT(x.evidence, HasSubstr("gpu.nvidia.com/dra-g/gpu-0 is shared by projects alpha, beta"));
    }
    if (x.kind == "I1 DRA capacity") {
      EXPECT_THAT(x.evidence, HasSubstr("gpu.nvidia.com/dra-m/gpu-9-mig-1g5gb-19-2 is allocated to 2 claims"));
    }
  }
}

TEST_F(ApiAuditTest, AnExclusiveUnitWithTwoHoldersIsOverCapacity) {
  const AuditSnapshot empty = Snap();
  Bound("gamma", "a", kGpu, 1, "dgx-a", "2", "gamma");
  Bound("beta", "b", kGpu, 1, "dgx-a", "2", "beta");
  const std::vector<AuditViolation> v = audit_.Judge(empty, {&empty.facts}, empty, Snap());
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].kind, "I1 capacity");
  EXPECT_THAT(v[0].evidence, HasSubstr("dgx-a/nvidia.com/gpu/2 holds 2 of capacity 1"));
  EXPECT_THAT(v[0].evidence, HasSubstr("gamma/a uid="));
  EXPECT_THAT(v[0].evidence, HasSubstr("beta/b uid="));
}

TEST_F(ApiAuditTest, TicketsAndSharesBeyondTheUnitsCapacity) {
  const AuditSnapshot empty = Snap();
  for (int i = 0; i < 5; ++i) Bound("gamma", absl::StrCat("t", i), kShared, 1, "ts-b", "2", "gamma");
  Bound("gamma", "m1", kMps, 3, "mps-a", "1", "gamma", 3);
  Bound("gamma", "m2", kMps, 2, "mps-a", "1", "gamma", 2);
  EXPECT_THAT(Kinds(empty, Snap()), ElementsAre("I1 capacity", "I1 capacity"));
}

TEST_F(ApiAuditTest, TwoProjectsOnATimeSlicedUnit) {
  const AuditSnapshot empty = Snap();
  Bound("alpha", "a", kShared, 1, "ts-a", "1", "alpha");
  Bound("beta", "b", kShared, 1, "ts-a", "1", "beta");
  EXPECT_THAT(Kinds(empty, Snap()), ElementsAre("I2 two projects"));
}

TEST_F(ApiAuditTest, ANewHolderBeyondAllocatableIsAViolationAnOldOneIsDraining) {
  const AuditSnapshot empty = Snap();
  Bound("gamma", "old", kGpu, 1, "dgx-a", "3", "gamma");
  const AuditSnapshot first = Snap();
  EXPECT_THAT(Kinds(empty, first), IsEmpty());
  // The device plugin drops a GPU: allocatable 3, the .count label still says 4.
  ASSERT_TRUE(cluster_.SetNodeUnits("dgx-a", 3).ok());
  const AuditSnapshot shrunk = Snap();
  EXPECT_THAT(Kinds(first, shrunk), IsEmpty()) << "the old holder keeps its draining unit";
  ASSERT_TRUE(cluster_.DeletePod("gamma/old").ok());
  const AuditSnapshot released = Snap();
  Bound("gamma", "new", kGpu, 1, "dgx-a", "3", "gamma");
  EXPECT_THAT(Kinds(released, Snap()), ElementsAre("I1 unit beyond allocatable"));
  // Had the node shrunk during that phase, a bind might have seen it at full size.
  const AuditSnapshot end = Snap();
  EXPECT_THAT(audit_.Judge(released, {&first.facts}, released, end), IsEmpty());
}

TEST_F(ApiAuditTest, BoundGpuPodsWithoutAMatchingClaimAreUnaccounted) {
  const AuditSnapshot empty = Snap();
  Bound("gamma", "none", kGpu, 1, "dgx-a", "", "");                       // no annotations
  Bound("gamma", "two", kGpu, 2, "dgx-a", "0", "gamma");                  // one unit for two
  Bound("gamma", "ticket", kShared, 1, "ts-a", "0", "gamma", 2);          // two tickets
  PodSpec elsewhere;                                                      // names another node
  elsewhere.namespace_name = "gamma";
  elsewhere.name = "elsewhere";
  elsewhere.requests[kGpu] = "1";
  elsewhere.node = "mig-x";
  elsewhere.annotations = {{"gpu.themelio.io/unit", "dgx-a/nvidia.com/gpu/1"},
                           {"gpu.themelio.io/amount", "1"}, {"gpu.themelio.io/project", "gamma"}};
  ASSERT_TRUE(fake_.Apply("pods", PodJson(elsewhere)).ok());
  Bound("gamma", "plain", "example.com/widget", 1, "dgx-a", "", "");  // no GPU: nothing to account
  const AuditSnapshot end = Snap();
  EXPECT_EQ(end.unaccounted.size(), 4u);
  EXPECT_THAT(Kinds(empty, end), ElementsAre("I1 unaccounted", "I1 unaccounted", "I1 unaccounted",
                                             "I1 unaccounted"));
}

TEST_F(ApiAuditTest, QuotaExcessCountsOnlyWhatABindAdded) {
  // alpha may hold 2 whole GPUs.
  Bound("alpha", "g1", kGpu, 1, "dgx-a", "0", "alpha");
  Bound("alpha", "g2", kGpu, 1, "dgx-a", "1", "alpha");
  const AuditSnapshot two = Snap();
  // Lowered to 1 under the running pods: over quota, and nobody's fault.
  ASSERT_TRUE(cluster_.SetQuota("alpha", kGpu, 1).ok());
  const AuditSnapshot lowered = Snap();
  EXPECT_THAT(audit_.Judge(two, {&two.facts}, lowered, lowered), IsEmpty());
  // The next phase adds a third: a bind the extender should have refused.
  Bound("alpha", "g3", kGpu, 1, "dgx-a", "2", "alpha");
  const AuditSnapshot three = Snap();
  const std::vector<AuditViolation> v = audit_.Judge(lowered, {&lowered.facts}, lowered, three);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].kind, "I4 quota");
  EXPECT_THAT(v[0].evidence, HasSubstr("alpha uses 3 (units, tickets or shares) of nvidia.com/gpu, quota 1"));
  // Had the quota been lowered during that phase, the third bind may have seen 2: still one
  // too many.
  EXPECT_EQ(audit_.Judge(lowered, {&two.facts}, lowered, three).size(), 1u);
  ASSERT_TRUE(cluster_.SetQuota("alpha", kGpu, 3).ok());
  const AuditSnapshot raised = Snap();
  EXPECT_THAT(audit_.Judge(lowered, {&lowered.facts}, lowered, raised), IsEmpty())
      << "a quota raised during the phase may have allowed the third";
}

// A time-sliced slice is charged whole. beta (its namespace alone) holds two slices under a
// quota of one slice's tickets (lowered under them). The phase starts by deleting the pods of one slice, which a
// lagging watch hides from the extender: it still sees the slice held by beta and joins it,
// which re-opens it. Not the extender's fault; opening a slice it sees free would be.
TEST_F(ApiAuditTest, AJoinOfASliceWhosePodsTheExtenderCannotSeeDeletedIsNoQuotaExcess) {
  Bound("beta", "t0", kShared, 1, "ts-a", "0", "beta");
  Bound("beta", "t1", kShared, 1, "ts-a", "1", "beta");
  ASSERT_TRUE(cluster_.SetQuota("beta", kShared, 4).ok());
  const AuditSnapshot before = Snap();
  ASSERT_TRUE(cluster_.DeletePod("beta/t1").ok());  // the phase's first change
  const AuditSnapshot start = Snap();
  Bound("beta", "t2", kShared, 1, "ts-a", "1", "beta");  // joins slice 1 as the extender sees it
  const AuditSnapshot end = Snap();
  EXPECT_THAT(audit_.Judge(before, {&before.facts}, start, end), IsEmpty());
  // The same bind on a third slice opens one the extender saw free: an excess.
  Bound("beta", "t3", kShared, 1, "ts-a", "2", "beta");
  const std::vector<AuditViolation> v = audit_.Judge(before, {&before.facts}, start, Snap());
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].kind, "I4 quota");
  EXPECT_THAT(v[0].evidence, HasSubstr("usage at the start 8 (8 at the previous phase's end, 4 after "
                                       "this phase's first changes)"));
}

TEST_F(ApiAuditTest, ARelabelMovesQuotasAndTheChargedProjectMustBeTheNamespaces) {
  // lab (project alpha, 4 tickets = 1 slice) runs one alpha slice.
  Bound("lab", "t1", kShared, 1, "ts-a", "0", "alpha");
  const AuditSnapshot before = Snap();
  // lab becomes beta's: its ResourceQuota now counts for beta, its running pod stays alpha's.
  ASSERT_TRUE(cluster_.Relabel("lab", "beta").ok());
  const AuditSnapshot relabelled = Snap();
  EXPECT_EQ(relabelled.facts.project_of_namespace.at("lab"), "beta");
  EXPECT_EQ(relabelled.facts.quota.at({"beta", kShared}), 12);
  EXPECT_EQ(relabelled.usage.at({"alpha", kShared}), 4);
  EXPECT_THAT(audit_.Judge(before, {&before.facts}, relabelled, relabelled), IsEmpty());
  // A new lab pod may be charged to alpha or beta in the phase of the relabel, not to gamma.
  Bound("lab", "t2", kShared, 1, "ts-b", "0", "beta");
  Bound("lab", "t3", kShared, 1, "ts-b", "1", "gamma");
  const AuditSnapshot end = Snap();
  const std::vector<AuditViolation> v = audit_.Judge(relabelled, {&before.facts}, relabelled, end);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].kind, "I4 charged project");
  EXPECT_THAT(v[0].evidence, HasSubstr("lab/t3 is charged to gamma"));
}

}  // namespace
}  // namespace gse::testing
