// Decisions on DRA nodes (docs/dra.md): filter checks a shared offering against the
// allocator's predicted pick (restricted sharing), bind takes the device the allocator really
// picked and refuses it when it breaks an invariant (another project's claim on a shared
// device, a claim on another node, no claim yet, too few devices), quotas in units hold.
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scoring/decision_core.h"
#include "scoring/feasibility.h"
#include "scoring/policies.h"
#include "state/assignment.h"
#include "state/catalog.h"
#include "state/cluster_state.h"
#include "state/dra_objects.h"
#include "state/mirror.h"
#include "tests/testing/dra_fixtures.h"

namespace gse {
namespace {

using testing::DecodeDra;

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr char kGpu[] = "nvidia.com/gpu";
constexpr char kShared[] = "nvidia.com/gpu.shared";
constexpr char kNode[] = "dra-1";

std::shared_ptr<const Catalog> TestCatalog() {
  std::vector<Offering> v(2);
  v[0].resource = kGpu;
  v[1].resource = kShared;
  v[1].sharing = Sharing::kTimeSliced;
  v[1].replicas = 4;
  absl::StatusOr<Catalog> c = Catalog::FromOfferings(std::move(v));
  EXPECT_TRUE(c.ok()) << c.status();
  return std::make_shared<const Catalog>(*std::move(c));
}

std::string ClassJson(const std::string& name, const std::string& resource) {
  return absl::StrCat(
      R"({"apiVersion":"resource.k8s.io/v1","kind":"DeviceClass","metadata":{"name":")", name,
      R"(","uid":"uid-)", name, R"(","creationTimestamp":"2026-11-20T08:00:00Z"},)",
      R"("spec":{"selectors":[{"cel":{"expression":"device.driver == 'gpu.nvidia.com' && )",
      R"(device.attributes['gpu.nvidia.com'].type == 'gpu'"}}],)",
      R"("extendedResourceName":")", resource, R"("}})");
}

// Whole GPUs gpu-<i> in `order`; shared ones take 4 shares (allowMultipleAllocations).
std::string SliceJson(const std::string& node, const std::vector<int>& order, bool shared) {
  std::string devices;
  for (int i : order) {
    absl::StrAppend(
        &devices, devices.empty() ? "" : ",", R"({"name":"gpu-)", i,
        R"(","attributes":{"type":{"string":"gpu"},"uuid":{"string":"GPU-)", node, "-", i,
        R"("},"productName":{"string":"NVIDIA A100-SXM4-40GB"}})",
        shared ? R"(,"allowMultipleAllocations":true,"capacity":{"shares":{"value":"4",)"
                 R"("requestPolicy":{"default":"1","validRange":{"min":"1"}}}})"
               : "",
        "}");
  }
  return absl::StrCat(
      R"({"apiVersion":"resource.k8s.io/v1","kind":"ResourceSlice","metadata":{"name":"s-)",
      node, R"(","uid":"uid-s-)", node, R"("},"spec":{"driver":"gpu.nvidia.com","pool":{)",
      R"("name":")", node, R"(","generation":1,"resourceSliceCount":1},"nodeName":")", node,
      R"(","devices":[)", devices, "]}}");
}

// The scheduler's extended-resource claim of pod ns/pod (uid "uid-<pod>") holding `device`
// on `node` (one share when `shared`).
std::string ClaimJson(const std::string& ns, const std::string& pod, const std::string& node,
                      const std::string& device, const std::string& cls, bool shared,
                      const std::string& suffix = "x") {
  return absl::StrCat(
      R"({"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaim","metadata":{"name":")", pod,
      "-extended-resources-", suffix, R"(","namespace":")", ns, R"(","uid":"uid-claim-)", pod,
      suffix, "\"", suffix == "terminating" ? R"(,"deletionTimestamp":"2026-12-01T00:00:00Z")" : "",
      R"(,"annotations":{"resource.kubernetes.io/extended-resource-claim":"true"},)",
      R"("ownerReferences":[{"apiVersion":"v1","kind":"Pod","name":")", pod,
      R"(","uid":"uid-)", pod, R"(","controller":true}]},)",
      R"("spec":{"devices":{"requests":[{"name":"container-0-request-0","exactly":{)",
      R"("deviceClassName":")", cls, R"(","allocationMode":"ExactCount","count":1}}]}},)",
      R"("status":{"allocation":{"devices":{"results":[{"request":"container-0-request-0",)",
      R"("driver":"gpu.nvidia.com","pool":")", node, R"(","device":")", device, R"(")",
      shared ? absl::StrCat(R"(,"shareID":"share-)", pod, R"(","consumedCapacity":{"shares":"1"})")
             : "",
      R"(}]},"nodeSelector":{"nodeSelectorTerms":[{"matchFields":[{"key":"metadata.name",)",
      R"("operator":"In","values":[")", node, R"("]}]}]}},)",
      R"("reservedFor":[{"resource":"pods","name":")", pod, R"(","uid":"uid-)", pod, R"("}]}})");
}

PodObject Pod(const std::string& ns, const std::string& name, const std::string& resource,
              const std::string& node = "") {
  PodObject p;
  p.namespace_name = ns;
  p.name = name;
  p.uid = "uid-" + name;
  p.node_name = node;
  p.phase = node.empty() ? "Pending" : "Running";
  ContainerResources c;
  c.name = "main";
  c.requests_milli[resource] = 1000;
  c.limits_milli[resource] = 1000;
  p.containers.push_back(c);
  return p;
}

class PlacementDraTest : public ::testing::Test {
 protected:
  PlacementDraTest()
      : mirror_(TestCatalog(), Options()),
        policy_(MakePolicy("affinity-pack").value()),
        core_(&mirror_, policy_.get()) {}

  static MirrorOptions Options() {
    MirrorOptions o;
    o.dra = true;
    return o;
  }

  // A DRA node with two shareable GPUs (walk order gpu-0, gpu-1) for kShared, and a
  // device-plugin node with two units of it.
  void SharedCluster() {
    mirror_.Write([&](ClusterState& s) {
      for (auto& c : DecodeDra(ClassJson("gpu-shared.nvidia.com", kShared)).device_classes) {
        s.ApplyDeviceClass(c);
      }
      for (auto& sl : DecodeDra(SliceJson(kNode, {0, 1}, true)).resource_slices) {
        s.ApplyResourceSlice(sl);
      }
      NodeObject n;
      n.name = kNode;
      s.ApplyNode(n);
      NodeObject p;
      p.name = "plugin-1";
      p.allocatable_milli[kShared] = 8000;
      s.ApplyNode(p);
    });
  }

  void Claim(const std::string& ns, const std::string& pod, const std::string& device,
             const std::string& node = kNode) {
    mirror_.Write([&](ClusterState& s) {
      for (auto& c :
           DecodeDra(ClaimJson(ns, pod, node, device, "gpu-shared.nvidia.com", true)).resource_claims) {
        s.ApplyResourceClaim(c);
      }
    });
  }

  void Bound(const std::string& ns, const std::string& pod, const std::string& device) {
    Claim(ns, pod, device);
    mirror_.Write([&](ClusterState& s) { s.ApplyPod(Pod(ns, pod, kShared, kNode)); });
  }

  // The project a pod of namespace `ns` belongs to.
  std::string ProjectOf(const std::string& ns) {
    return core_.Resolve(Pod(ns, "probe", kShared)).request.project;
  }

  FitReason FilterOn(const std::string& ns, const std::string& pod, const std::string& node) {
    const FilterDecision d = core_.Filter(Pod(ns, pod, kShared), {node});
    return d.verdicts.at(0);
  }

  // `read`: what bind's read of the claim from the API answers (nullptr: no read hook).
  ReserveDecision Bind(const std::string& ns, const std::string& pod,
                       const std::string& claim_key = "",
                       std::function<absl::StatusOr<DraResourceClaim>()> read = nullptr) {
    const PodObject p = Pod(ns, pod, kShared);
    const DecisionCore::Resolved r = core_.Resolve(p);
    return core_.Reserve(PodClaim{p.Key(), p.uid, ns, r.request.project}, r.request, kNode,
                         DraBindClaim{claim_key, absl::ZeroDuration(), std::move(read)});
  }

  // The scheduler's claim of `pod` on `device` as the API would answer it, at resourceVersion
  // `rv`: not put in the mirror.
  static DraResourceClaim ReadClaim(const std::string& ns, const std::string& pod,
                                    const std::string& device, const std::string& rv) {
    DraResourceClaim c =
        DecodeDra(ClaimJson(ns, pod, kNode, device, "gpu-shared.nvidia.com", true)).resource_claims.at(0);
    c.resource_version = rv;
    return c;
  }

  void ClaimWithSuffix(const std::string& ns, const std::string& pod, const std::string& device,
                       const std::string& suffix) {
    mirror_.Write([&](ClusterState& s) {
      for (auto& c : DecodeDra(ClaimJson(ns, pod, kNode, device, "gpu-shared.nvidia.com", true,
                                      suffix))
                         .resource_claims) {
        s.ApplyResourceClaim(c);
      }
    });
  }

  // Pod ns/pod bound with our annotations for `a` (its status naming claim
  // <pod>-extended-resources-x), after kube-scheduler's Unreserve deleted that claim: the
  // watch delivers the deletion, then the bound pod.
  PodObject BoundWithoutItsClaim(const Assignment& a, const std::string& ns, const std::string& pod,
                                 const std::string& resource) {
    PodObject bound = Pod(ns, pod, resource, kNode);
    bound.extended_resource_claim = pod + "-extended-resources-x";
    bound.annotations = mirror_.Read(
        [&](const ClusterState& s) { return AssignmentAnnotations(a, s.catalog(), ns); });
    mirror_.Write([&](ClusterState& s) {
      s.RemoveResourceClaim(ns + "/" + bound.extended_resource_claim);
      s.ApplyPod(bound);
    });
    return bound;
  }

  Mirror mirror_;
  std::unique_ptr<PlacementPolicy> policy_;
  DecisionCore core_;
};

TEST_F(PlacementDraTest, SharedDraNodeHasTheSlicesDevicesAsUnits) {
  SharedCluster();
  const NodeOffering no = mirror_.Read([](const ClusterState& s) {
    const NodeOffering* found = s.FindNode(kNode)->Find(s.catalog().Find(kShared)->id);
    return found != nullptr ? *found : NodeOffering();
  });
  EXPECT_TRUE(no.dra);
  EXPECT_EQ(no.unusable_reason, "");
  EXPECT_THAT(no.unit_devices,
              ElementsAre("gpu.nvidia.com/dra-1/gpu-0", "gpu.nvidia.com/dra-1/gpu-1"));
  EXPECT_EQ(no.replicas, 4);
}

TEST_F(PlacementDraTest, FilterRefusesANodeWhosePredictedDeviceHoldsAnotherProject) {
  SharedCluster();
  Bound("team-a", "a1", "gpu-0");
  // The allocator's first fit is gpu-0 (it has shares left): team-b would share it.
  EXPECT_EQ(FilterOn("team-b", "b1", kNode), FitReason::kDraDeviceOfOtherProject);
  EXPECT_EQ(FilterOn("team-a", "a2", kNode), FitReason::kFits);
  // The device-plugin node is judged as ever.
  EXPECT_EQ(FilterOn("team-b", "b1", "plugin-1"), FitReason::kFits);
  EXPECT_TRUE(NodeFit{FitReason::kDraDeviceOfOtherProject}.unresolvable());
  EXPECT_EQ(FitReasonLabel(FitReason::kDraDeviceOfOtherProject), "dra_device_of_other_project");
}

// Filter reads the DRA check from the room row (RoomRow::dra, DraRowVerdict); the reference,
// DraPredictedVerdict, reads the node and its units. After each change below (devices held by
// one project, by two, by a user-made claim, then no prediction) both agree for every project,
// and Audit finds rows and kept picks fresh.
// kube-scheduler's allocator, not the extender, picks the device on a DRA node: first fit in
// walk order, whatever project holds it. team-a's own gpu-1 has free shares, but the allocator
// would give team-a's next pod a share of team-b's gpu-0. That own unit must not keep team-a
// off every other node ("own unit has a free ticket on another node"): the project would
// never be scheduled again while gpu-0 has room.
TEST_F(PlacementDraTest, AnOwnUnitTheAllocatorWillNotPickDoesNotBindTheProjectToItsNode) {
  SharedCluster();
  Bound("team-b", "b1", "gpu-0");
  Bound("team-a", "a1", "gpu-1");
  const std::string project_a = ProjectOf("team-a");
  const ProjectId team_a =
      mirror_.Read([&](const ClusterState& s) { return s.FindProject(project_a); });
  const OfferingId shared =
      mirror_.Read([](const ClusterState& s) { return s.catalog().Find(kShared)->id; });
  EXPECT_EQ(mirror_.Read([&](const ClusterState& s) { return s.OwnedUnitsWithRoom(team_a, shared); }),
            0);
  const FilterDecision d = core_.Filter(Pod("team-a", "a2", kShared), {kNode, "plugin-1"});
  EXPECT_EQ(d.verdicts.at(0), FitReason::kDraDeviceOfOtherProject);
  EXPECT_EQ(d.verdicts.at(1), FitReason::kFits) << FitReasonText(d.verdicts.at(1));

  // Once team-b is gone, the allocator's first fit is gpu-0, empty: team-a's gpu-1 is still
  // not what its next pod would get, and team-a may open a unit on either node.
  mirror_.Write([](ClusterState& s) {
    s.RemovePod("uid-b1", "team-b/b1");
    s.RemoveResourceClaim("team-b/b1-extended-resources-x");
  });
  EXPECT_EQ(mirror_.Read([&](const ClusterState& s) { return s.OwnedUnitsWithRoom(team_a, shared); }),
            0);
  // A claim of team-a on gpu-0 makes gpu-0 the pick with team-a's room: now it binds team-a.
  Bound("team-a", "a3", "gpu-0");
  EXPECT_EQ(mirror_.Read([&](const ClusterState& s) { return s.OwnedUnitsWithRoom(team_a, shared); }),
            1);
  const FilterDecision joined = core_.Filter(Pod("team-a", "a4", kShared), {kNode, "plugin-1"});
  EXPECT_EQ(joined.verdicts.at(0), FitReason::kFits);
  EXPECT_EQ(joined.verdicts.at(1), FitReason::kAffinityElsewhere);
  EXPECT_TRUE(mirror_.Read([](const ClusterState& s) { return s.Audit().problems.empty(); }));
}

TEST_F(PlacementDraTest, TheRowsDraCheckIsTheNodes) {
  SharedCluster();
  // `want_row`: RoomRow::dra expected, or nullopt (any: the check is that both agree).
  auto expect_agree = [&](const std::string& step, std::optional<int32_t> want_row) {
    SCOPED_TRACE(step);
    std::vector<std::string> projects;  // resolved outside the mirror's lock
    for (const char* ns : {"team-a", "team-b", "team-c"}) projects.push_back(ProjectOf(ns));
    mirror_.Read([&](const ClusterState& s) {
      // Only the two owners the API server forced on one unit (I2, reported) may be wrong.
      for (const std::string& p : s.Audit().problems) {
        EXPECT_THAT(p, HasSubstr("has holders of 2 projects"));
      }
      const Offering& o = s.catalog().Get(s.catalog().Find(kShared)->id);
      const NodeState* node = s.FindNode(kNode);
      const int32_t row = s.RoomRows(o.id)[node->slot].dra;
      if (want_row.has_value()) {
        EXPECT_EQ(row, *want_row);
      }
      for (const std::string& name : projects) {
        const ProjectId project = s.FindProject(name);
        if (row == kDraRowReadNode) continue;
        EXPECT_EQ(DraRowVerdict(row, project), DraPredictedVerdict(s, o, project, node)) << name;
      }
      return 0;
    });
  };
  expect_agree("no holders", kDraRowFree);
  Bound("team-a", "a1", "gpu-0");
  const std::string team_a_name = ProjectOf("team-a");
  const ProjectId team_a =
      mirror_.Read([&](const ClusterState& s) { return s.FindProject(team_a_name); });
  ASSERT_NE(team_a, kNoProject);
  expect_agree("team-a shares gpu-0", team_a);
  // team-b's share of gpu-0 too (an allocator that walked another order): two owners on one
  // unit, whatever owner the unit then names.
  Bound("team-b", "b1", "gpu-0");
  expect_agree("team-a and team-b share gpu-0", std::nullopt);
  mirror_.Write([](ClusterState& s) {
    s.RemovePod("uid-b1", "team-b/b1");
    s.RemoveResourceClaim("team-b/b1-extended-resources-x");
  });
  expect_agree("team-b gone", team_a);
  mirror_.Write([](ClusterState& s) {
    s.RemovePod("uid-a1", "team-a/a1");
    s.RemoveResourceClaim("team-a/a1-extended-resources-x");
  });
  expect_agree("team-a gone", kDraRowFree);
  // A user-made claim on gpu-0 (no pod charged through it).
  mirror_.Write([&](ClusterState& s) {
    for (auto& c : DecodeDra(ClaimJson("team-c", "u1", kNode, "gpu-0", "gpu-shared.nvidia.com",
                                       true))
                       .resource_claims) {
      c.extended_resource_annotation = false;  // a user's claim, reserved for no pod yet
      c.owner_pod_name.clear();
      c.owner_pod_uid.clear();
      c.reserved_for.clear();
      s.ApplyResourceClaim(c);
    }
  });
  expect_agree("user claim on gpu-0", kDraRowTaken);
}

TEST_F(PlacementDraTest, NoPredictionIsNotGuessed) {
  SharedCluster();
  Bound("team-a", "a1", "gpu-0");
  // A second slice in the same pool without the sorted walk... simplest unmodelled shape: a
  // share allocated without consumedCapacity makes the walk unpredictable (docs/dra.md).
  mirror_.Write([&](ClusterState& s) {
    std::string json = ClaimJson("team-a", "a0", kNode, "gpu-0", "gpu-shared.nvidia.com", true);
    const std::string cut = R"(,"consumedCapacity":{"shares":"1"})";
    json.erase(json.find(cut), cut.size());
    for (auto& c : DecodeDra(json).resource_claims) s.ApplyResourceClaim(c);
  });
  // No prediction: the node passes; bind checks the device the allocator picks.
  EXPECT_EQ(FilterOn("team-b", "b1", kNode), FitReason::kFits);
  // The decision log's notes say so and why (the test catalog names no DeviceClass: no drift).
  EXPECT_THAT(core_.Filter(Pod("team-b", "b1", kShared), {kNode}, /*dra_notes=*/true).dra_notes,
              ElementsAre("dra-1: no prediction: device gpu-0: shared, with an allocation that "
                          "lists no consumed capacity"));
  EXPECT_THAT(core_.Filter(Pod("team-b", "b1", kShared), {kNode}).dra_notes, IsEmpty());
}

TEST_F(PlacementDraTest, BindTakesTheAllocatedDeviceAndRefusesSharingAcrossProjects) {
  SharedCluster();
  Bound("team-a", "a1", "gpu-0");
  // An allocator that walked another order gave team-b a share of gpu-0: refused.
  Claim("team-b", "b1", "gpu-0");
  ReserveDecision d = Bind("team-b", "b1");
  ASSERT_FALSE(d.assignment.ok());
  EXPECT_EQ(d.refusal, ReserveRefusal::kDraRefused);
  EXPECT_THAT(std::string(d.assignment.status().message()),
              HasSubstr("restricted sharing: DRA device gpu.nvidia.com/dra-1/gpu-0 holds claim "
                        "team-a/a1-extended-resources-x of project team-a"));
  // On gpu-1 it binds there: unit 1, never the policy's choice.
  Claim("team-b", "b1", "gpu-1");
  d = Bind("team-b", "b1");
  ASSERT_TRUE(d.assignment.ok()) << d.assignment.status();
  EXPECT_THAT(d.assignment->units, ElementsAre(1));
  // team-a joins its own device.
  Claim("team-a", "a2", "gpu-0");
  d = Bind("team-a", "a2");
  ASSERT_TRUE(d.assignment.ok()) << d.assignment.status();
  EXPECT_THAT(d.assignment->units, ElementsAre(0));
  EXPECT_TRUE(mirror_.Read([](const ClusterState& s) { return s.Audit().problems.empty(); }));
}

TEST_F(PlacementDraTest, BindRefusesWithoutAClaimOrWithAClaimElsewhere) {
  SharedCluster();
  ReserveDecision d = Bind("team-a", "a1");
  ASSERT_FALSE(d.assignment.ok());
  EXPECT_EQ(d.refusal, ReserveRefusal::kDraRefused);
  EXPECT_THAT(std::string(d.assignment.status().message()),
              HasSubstr("no allocated extended-resource claim of pod team-a/a1"));
  // Allocated on another node (the mirror has no such device there): no claim on dra-1.
  Claim("team-a", "a1", "gpu-0", "other-node");
  d = Bind("team-a", "a1");
  ASSERT_FALSE(d.assignment.ok());
  EXPECT_EQ(d.refusal, ReserveRefusal::kDraRefused);
}

TEST_F(PlacementDraTest, BindVerifiesTheClaimThePodsStatusNamesNotAStaleOne) {
  SharedCluster();
  Bound("team-a", "a1", "gpu-0");
  // A failed attempt's claim on team-a's gpu-0 that the mirror still holds, and the retry's
  // claim on gpu-1.
  ClaimWithSuffix("team-b", "b1", "gpu-0", "old");
  ClaimWithSuffix("team-b", "b1", "gpu-1", "new");
  // Two live claims of one pod and no name: not decided.
  ReserveDecision d = Bind("team-b", "b1");
  ASSERT_FALSE(d.assignment.ok());
  EXPECT_THAT(std::string(d.assignment.status().message()),
              HasSubstr("no allocated extended-resource claim of pod team-b/b1"));
  // The claim the pod's status names: gpu-1.
  d = Bind("team-b", "b1", "team-b/b1-extended-resources-new");
  ASSERT_TRUE(d.assignment.ok()) << d.assignment.status();
  EXPECT_THAT(d.assignment->units, ElementsAre(1));
}

// The claim watch trails PreBind (at start-up, under load): bind reads the claim from the API
// and verifies it as it verifies the mirror's, without putting it in the mirror.
TEST_F(PlacementDraTest, BindVerifiesTheClaimReadFromTheApiWhenTheMirrorHasNotShownIt) {
  SharedCluster();
  Bound("team-a", "a1", "gpu-0");
  // The same checks as for a mirrored claim: team-c's claim on team-a's gpu-0 is refused.
  ReserveDecision d = Bind("team-c", "c1", "team-c/c1-extended-resources-x",
                           [] { return ReadClaim("team-c", "c1", "gpu-0", "8"); });
  ASSERT_FALSE(d.assignment.ok());
  EXPECT_EQ(d.refusal, ReserveRefusal::kDraRefused);
  EXPECT_THAT(std::string(d.assignment.status().message()),
              HasSubstr("restricted sharing: DRA device gpu.nvidia.com/dra-1/gpu-0"));

  int reads = 0;
  d = Bind("team-b", "b1", "team-b/b1-extended-resources-x", [&] {
    ++reads;
    return ReadClaim("team-b", "b1", "gpu-1", "7");
  });
  ASSERT_TRUE(d.assignment.ok()) << d.assignment.status();
  EXPECT_EQ(reads, 1);
  EXPECT_THAT(d.assignment->units, ElementsAre(1));
  EXPECT_EQ(mirror_.Read([](const ClusterState& s) { return s.dra().resource_claim_count(); }), 1u)
      << "the read is not stored: only team-a's claim is mirrored";
  // The reservation made from the read holds its unit: team-c may not join gpu-1, though no
  // claim of team-b is mirrored there.
  d = Bind("team-c", "c1", "team-c/c1-extended-resources-x",
           [] { return ReadClaim("team-c", "c1", "gpu-1", "9"); });
  EXPECT_FALSE(d.assignment.ok());

  // When the watch delivers team-b's claim, the reservation already holds its device.
  mirror_.Write([](ClusterState& s) { s.ApplyResourceClaim(ReadClaim("team-b", "b1", "gpu-1", "7")); });
  EXPECT_TRUE(mirror_.Read([](const ClusterState& s) { return s.Audit().problems.empty(); }));
  EXPECT_THAT(mirror_.Read([](const ClusterState& s) {
                return s.FindPodById(PodIdOf("uid-b1", "team-b/b1"))->assignment.units;
              }),
              ElementsAre(1));
  // A claim the mirror has: no read.
  reads = 0;
  mirror_.Write([](ClusterState& s) { s.Release(PodIdOf("uid-b1", "team-b/b1")); });
  d = Bind("team-b", "b1", "team-b/b1-extended-resources-x", [&] {
    ++reads;
    return absl::UnavailableError("not called");
  });
  ASSERT_TRUE(d.assignment.ok()) << d.assignment.status();
  EXPECT_EQ(reads, 0);
}

// A lagging claim watch delivers a failed attempt's claim of the pod (allocated on team-a's
// gpu-0, bind refused it) after the retry was bound from the claim read on gpu-1. The pod
// holds what its own claim says, never the stale one's devices: the mirror must not move it
// onto team-a's device, even for the moment before the stale claim is deleted.
TEST_F(PlacementDraTest, AFailedAttemptsClaimArrivingLateDoesNotMoveTheBoundPod) {
  SharedCluster();
  Bound("team-a", "a1", "gpu-0");
  const std::string fresh = "team-b/b1-extended-resources-new";
  ReserveDecision d = Bind("team-b", "b1", fresh, [] {
    DraResourceClaim c = DecodeDra(ClaimJson("team-b", "b1", kNode, "gpu-1",
                                             "gpu-shared.nvidia.com", true, "new"))
                             .resource_claims.at(0);
    c.resource_version = "20";
    return c;
  });
  ASSERT_TRUE(d.assignment.ok()) << d.assignment.status();
  ASSERT_THAT(d.assignment->units, ElementsAre(1));
  const std::string id = PodIdOf("uid-b1", "team-b/b1");
  mirror_.Write([&](ClusterState& s) { ASSERT_TRUE(s.Confirm(id).ok()); });
  auto units = [&] {
    return mirror_.Read([&](const ClusterState& s) { return s.FindPodById(id)->assignment.units; });
  };
  auto clean = [&] { return mirror_.Read([](const ClusterState& s) { return s.Audit().problems; }); };
  // The watch catches up in order: the old claim (allocated), its deletion, the new claim,
  // then the pod bound with our annotation and its status naming the new claim.
  ClaimWithSuffix("team-b", "b1", "gpu-0", "old");
  EXPECT_THAT(units(), ElementsAre(1));
  EXPECT_THAT(clean(), IsEmpty());
  mirror_.Write([](ClusterState& s) { s.RemoveResourceClaim("team-b/b1-extended-resources-old"); });
  ClaimWithSuffix("team-b", "b1", "gpu-1", "new");
  EXPECT_THAT(units(), ElementsAre(1));
  PodObject bound = Pod("team-b", "b1", kShared, kNode);
  bound.extended_resource_claim = "b1-extended-resources-new";
  bound.annotations = mirror_.Read([&](const ClusterState& s) {
    return AssignmentAnnotations(*d.assignment, s.catalog(), "team-b");
  });
  mirror_.Write([&](ClusterState& s) { s.ApplyPod(bound); });
  EXPECT_THAT(units(), ElementsAre(1));
  EXPECT_THAT(clean(), IsEmpty());
  // The same late claim with a pod whose status names its claim (after a restart, say).
  ClaimWithSuffix("team-b", "b1", "gpu-0", "old");
  EXPECT_THAT(units(), ElementsAre(1));
  EXPECT_THAT(clean(), IsEmpty());
}

TEST_F(PlacementDraTest, AClaimReadFromTheApiThatIsNotThePodsOrFailedIsRefused) {
  SharedCluster();
  const std::string key = "team-b/b1-extended-resources-x";
  auto refusal = [&](std::function<absl::StatusOr<DraResourceClaim>()> read) {
    const ReserveDecision d = Bind("team-b", "b1", key, std::move(read));
    EXPECT_EQ(d.refusal, ReserveRefusal::kDraRefused);
    return d.assignment.ok() ? std::string("bound") : std::string(d.assignment.status().message());
  };
  EXPECT_THAT(refusal([] { return absl::NotFoundError("resourceclaims \"b1-x\" not found"); }),
              HasSubstr("reading it from the API failed: resourceclaims"));
  // Another pod's claim under that name (a stale status), a claim of another name, one being
  // deleted, one allocated on a device the node does not have.
  EXPECT_THAT(refusal([] {
                DraResourceClaim c = ReadClaim("team-b", "b1", "gpu-1", "7");
                c.owner_pod_uid = "uid-someone-else";
                return c;
              }),
              HasSubstr("is not pod team-b/b1's extended-resource claim"));
  EXPECT_THAT(refusal([] { return ReadClaim("team-b", "b2", "gpu-1", "7"); }),
              HasSubstr("the API answered team-b/b2-extended-resources-x for " + key));
  EXPECT_THAT(refusal([] {
                DraResourceClaim c = ReadClaim("team-b", "b1", "gpu-1", "7");
                c.terminating = true;
                return c;
              }),
              HasSubstr("is being deleted"));
  EXPECT_THAT(refusal([] { return ReadClaim("team-b", "b1", "gpu-7", "7"); }),
              HasSubstr("device gpu.nvidia.com/dra-1/gpu-7 is no device of class"));
  EXPECT_EQ(mirror_.Read([](const ClusterState& s) { return s.pods().size(); }), 0u);
}

// The mirror has the claim but not yet its allocation (the watch delivered the create, not
// PreBind's update): the newer read wins. A read older than the mirror's copy never does.
TEST_F(PlacementDraTest, AReadClaimWinsOnlyWhenNewerThanTheMirrorsCopy) {
  SharedCluster();
  const std::string key = "team-b/b1-extended-resources-x";
  mirror_.Write([](ClusterState& s) {
    DraResourceClaim pending = ReadClaim("team-b", "b1", "gpu-1", "5");
    pending.allocated = false;
    pending.results.clear();
    pending.allocation_node.clear();
    s.ApplyResourceClaim(pending);
  });
  ReserveDecision d = Bind("team-b", "b1", key, [] { return ReadClaim("team-b", "b1", "gpu-1", "4"); });
  ASSERT_FALSE(d.assignment.ok());
  EXPECT_THAT(std::string(d.assignment.status().message()),
              HasSubstr("the mirror's copy of " + key + " is as new as the API's answer or newer "
                        "(resourceVersion 5 against the API's 4)"));
  d = Bind("team-b", "b1", key, [] { return ReadClaim("team-b", "b1", "gpu-1", "5"); });
  EXPECT_FALSE(d.assignment.ok());
  // Not comparable (an older server's opaque version): the mirror, the ordered stream, wins.
  d = Bind("team-b", "b1", key, [] { return ReadClaim("team-b", "b1", "gpu-1", "x1"); });
  ASSERT_FALSE(d.assignment.ok());
  EXPECT_THAT(std::string(d.assignment.status().message()), HasSubstr("cannot be ordered"));
  d = Bind("team-b", "b1", key, [] { return ReadClaim("team-b", "b1", "gpu-1", "12"); });
  ASSERT_TRUE(d.assignment.ok()) << d.assignment.status();
  EXPECT_THAT(d.assignment->units, ElementsAre(1));
}

TEST_F(PlacementDraTest, ATerminatingClaimIsNotThePodsClaim) {
  SharedCluster();
  Bound("team-a", "a1", "gpu-0");
  ClaimWithSuffix("team-b", "b1", "gpu-0", "terminating");
  ClaimWithSuffix("team-b", "b1", "gpu-1", "new");
  const ReserveDecision d = Bind("team-b", "b1");
  ASSERT_TRUE(d.assignment.ok()) << d.assignment.status();
  EXPECT_THAT(d.assignment->units, ElementsAre(1));
  // Named, a terminating claim is refused.
  mirror_.Write([](ClusterState& s) { s.Release(PodIdOf("uid-b1", "team-b/b1")); });
  const ReserveDecision named = Bind("team-b", "b1", "team-b/b1-extended-resources-terminating");
  EXPECT_FALSE(named.assignment.ok());
}

TEST_F(PlacementDraTest, QuotaInUnitsHoldsOnDraNodes) {
  SharedCluster();
  mirror_.Write([](ClusterState& s) {
    ResourceQuotaObject q;
    q.namespace_name = "team-a";
    q.name = "gpu";
    // Time-sliced: a project is charged the tickets of the units it owns (4 per GPU here).
    q.hard_milli[std::string("requests.") + kShared] = 4000;
    s.ApplyQuota(q);
  });
  Claim("team-a", "a1", "gpu-0");
  ASSERT_TRUE(Bind("team-a", "a1").assignment.ok());
  Claim("team-a", "a2", "gpu-1");
  const ReserveDecision d = Bind("team-a", "a2");
  ASSERT_FALSE(d.assignment.ok());
  EXPECT_THAT(std::string(d.assignment.status().message()), HasSubstr("quota"));
}

// kube-scheduler's Unreserve deletes the extended-resource claim whenever our bind answers an
// error, including "binding outcome unknown" when the Binding did commit: the pod is then
// bound without its claim, and the API shows its device free. The pod's annotation still
// names the device it was verified on; the mirror keeps it held (kubelet may yet run the pod
// on it) until the pod ends, so no other project is predicted onto it or bound next to it.
TEST_F(PlacementDraTest, ABoundPodWhoseClaimWasDeletedKeepsItsSharedDeviceUntilItEnds) {
  SharedCluster();
  Claim("team-a", "a1", "gpu-0");
  const ReserveDecision d = Bind("team-a", "a1", "team-a/a1-extended-resources-x");
  ASSERT_TRUE(d.assignment.ok()) << d.assignment.status();
  PodObject bound = BoundWithoutItsClaim(*d.assignment, "team-a", "a1", kShared);
  const std::string id = PodIdOf("uid-a1", "team-a/a1");
  EXPECT_THAT(mirror_.Read([&](const ClusterState& s) { return s.FindPodById(id)->assignment.units; }),
              ElementsAre(0));
  // The allocator sees gpu-0 free and would pick it: team-b is kept off the node, and a
  // claim it got there anyway is refused.
  EXPECT_EQ(FilterOn("team-b", "b1", kNode), FitReason::kDraDeviceOfOtherProject);
  Claim("team-b", "b1", "gpu-0");
  ReserveDecision b = Bind("team-b", "b1");
  ASSERT_FALSE(b.assignment.ok());
  EXPECT_THAT(std::string(b.assignment.status().message()), HasSubstr("owned by another project"));
  mirror_.Write([](ClusterState& s) { s.RemoveResourceClaim("team-b/b1-extended-resources-x"); });
  EXPECT_THAT(mirror_.Read([](const ClusterState& s) { return s.Audit().problems; }), IsEmpty());
  // The pod ends: the device is free for any project.
  bound.phase = "Succeeded";
  mirror_.Write([&](ClusterState& s) { s.ApplyPod(bound); });
  EXPECT_EQ(FilterOn("team-b", "b1", kNode), FitReason::kFits);
}

// The same on an exclusive device, where the allocator's pick (gpu-0, free in the API) and
// the mirror's free unit (gpu-1) differ: the node must not pass filter, or every retry would
// be allocated gpu-0 and refused at bind while the pod waits on a node it cannot get.
TEST_F(PlacementDraTest, ABoundPodWhoseClaimWasDeletedKeepsItsExclusiveDeviceAndTheNodeIsNotOffered) {
  mirror_.Write([&](ClusterState& s) {
    for (auto& c : DecodeDra(ClassJson("gpu.nvidia.com", kGpu)).device_classes) s.ApplyDeviceClass(c);
    for (auto& sl : DecodeDra(SliceJson(kNode, {0, 1}, false)).resource_slices) s.ApplyResourceSlice(sl);
    NodeObject n;
    n.name = kNode;
    s.ApplyNode(n);
  });
  auto claim = [&](const std::string& ns, const std::string& pod, const std::string& device) {
    mirror_.Write([&](ClusterState& s) {
      for (auto& c : DecodeDra(ClaimJson(ns, pod, kNode, device, "gpu.nvidia.com", false)).resource_claims) {
        s.ApplyResourceClaim(c);
      }
    });
  };
  auto bind = [&](const std::string& ns, const std::string& pod) {
    const PodObject p = Pod(ns, pod, kGpu);
    const DecisionCore::Resolved r = core_.Resolve(p);
    return core_.Reserve(PodClaim{p.Key(), p.uid, ns, r.request.project}, r.request, kNode,
                         DraBindClaim{ns + "/" + pod + "-extended-resources-x", absl::ZeroDuration(), nullptr});
  };
  auto filter = [&](const std::string& ns, const std::string& pod) {
    return core_.Filter(Pod(ns, pod, kGpu), {kNode}).verdicts.at(0);
  };
  claim("team-a", "a1", "gpu-0");
  const ReserveDecision d = bind("team-a", "a1");
  ASSERT_TRUE(d.assignment.ok()) << d.assignment.status();
  PodObject bound = BoundWithoutItsClaim(*d.assignment, "team-a", "a1", kGpu);
  EXPECT_EQ(filter("team-b", "b1"), FitReason::kNoFreeUnit);
  EXPECT_EQ(filter("team-a", "a2"), FitReason::kNoFreeUnit);
  claim("team-b", "b1", "gpu-0");
  EXPECT_FALSE(bind("team-b", "b1").assignment.ok());
  mirror_.Write([](ClusterState& s) { s.RemoveResourceClaim("team-b/b1-extended-resources-x"); });
  EXPECT_THAT(mirror_.Read([](const ClusterState& s) { return s.Audit().problems; }), IsEmpty());
  bound.phase = "Succeeded";
  mirror_.Write([&](ClusterState& s) { s.ApplyPod(bound); });
  EXPECT_EQ(filter("team-b", "b1"), FitReason::kFits);
}

}  // namespace
}  // namespace gse
