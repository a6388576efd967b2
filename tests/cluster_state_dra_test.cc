// ClusterState in DRA mode (state/dra_nodes.cc, docs/dra.md), on the DRA fact sheet's objects
// (shared/protocol/dra/): the per-node rule in a mixed cluster, DRA-backed units named by
// device and UUID in walk order, charged pods moved onto their claims' devices whichever of
// pod and claim comes first, user-made claims blocking their devices, a DeviceClass edited
// under the state, quotas in units across both kinds, a relist that keeps the DRA objects, and
// random object changes that leave every node as a fresh derivation would (the re-derivation
// reaches exactly the nodes a change may touch).
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "state/catalog.h"
#include "state/cluster_state.h"
#include "state/dra_objects.h"
#include "state/mirror.h"
#include "tests/testing/dra_fixtures.h"
#include "tests/testing/dra_random.h"
#include "testsupport/paths.h"

namespace gse {
namespace {

using testing::Dra;
using testing::Edit;
using testing::DecodeDra;

using ::gse::testing::ReadFileOrDie;
using ::gse::testing::SharedPath;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr char kMig[] = "nvidia.com/mig-1g.5gb";
constexpr char kDraNode[] = "gpu-node-a";  // the fact sheet slice's node
constexpr char kPluginNode[] = "plugin-1";
// The fact sheet slice's devices in array (= walk) order.
const std::vector<std::string> kWalk = {"19-3", "19-0", "19-5", "19-1", "19-6", "19-2", "19-4"};
// The fact sheet claim's pod.
constexpr char kClaimPodUid[] = "6f0c3a8e-2b1d-4c6e-9a57-0d2f4b8e1c11";

std::shared_ptr<const Catalog> BuiltIn() { return std::make_shared<const Catalog>(Catalog::BuiltIn()); }

MirrorOptions DraOn() {
  MirrorOptions o;
  o.dra = true;
  return o;
}

NodeObject Node(const std::string& name, const std::map<std::string, int64_t>& allocatable) {
  NodeObject n;
  n.name = name;
  n.uid = name + "-uid";
  n.allocatable_milli["cpu"] = 64000;
  n.allocatable_milli["pods"] = 110000;
  for (const auto& [k, v] : allocatable) n.allocatable_milli[k] = v * 1000;
  return n;
}

PodObject Pod(const std::string& ns, const std::string& name, const std::string& uid,
              const std::string& node) {
  PodObject p;
  p.namespace_name = ns;
  p.name = name;
  p.uid = uid;
  p.node_name = node;
  p.phase = "Running";
  ContainerResources c;
  c.name = "main";
  c.requests_milli[kMig] = 1000;
  c.limits_milli[kMig] = 1000;
  p.containers.push_back(c);
  return p;
}

void ApplyClassAndSlice(ClusterState& s) {
  for (auto& c : DecodeDra(Dra("deviceclass-mig-1g-extended.json")).device_classes) {
    s.ApplyDeviceClass(std::move(c));
  }
  for (auto& sl : DecodeDra(Dra("resourceslice-a100-mig-node.json")).resource_slices) {
    s.ApplyResourceSlice(std::move(sl));
  }
}

void ApplyClaim(ClusterState& s, const std::string& json) {
  for (auto& c : DecodeDra(json).resource_claims) s.ApplyResourceClaim(std::move(c));
}

const NodeOffering* MigOn(const ClusterState& s, const std::string& node) {
  const NodeState* n = s.FindNode(node);
  return n == nullptr ? nullptr : n->Find(s.catalog().Find(kMig)->id);
}

std::vector<std::string> Devices(const NodeOffering& no) {
  std::vector<std::string> out;
  for (const std::string& d : no.unit_devices) out.push_back(d.substr(d.rfind("-19-") + 1));
  return out;
}

TEST(ClusterStateDra, MixedClusterKindsAndUnitsInWalkOrder) {
  ClusterState s(BuiltIn(), DraOn());
  s.ApplyNode(Node(kDraNode, {}));
  s.ApplyNode(Node(kPluginNode, {{kMig, 7}}));
  // Before any DRA object: the DRA node offers nothing, the plugin node its allocatable.
  EXPECT_EQ(MigOn(s, kDraNode), nullptr);
  ApplyClassAndSlice(s);

  const NodeOffering* dra = MigOn(s, kDraNode);
  ASSERT_NE(dra, nullptr);
  EXPECT_TRUE(dra->dra);
  EXPECT_EQ(dra->advertised_units, 7);
  EXPECT_EQ(dra->unusable_reason, "");
  std::vector<std::string> want;
  for (const std::string& d : kWalk) want.push_back(d);
  EXPECT_EQ(Devices(*dra), want);
  EXPECT_EQ(dra->unit_devices[0], "gpu.nvidia.com/gpu-node-a/gpu-0-mig-1g5gb-19-3");
  EXPECT_EQ(dra->unit_uuids[0], "MIG-3f7b2d4e-0c58-5a6d-89b1-4d5c6f7a8b93");
  EXPECT_EQ(ClusterState::KindOf(*s.FindNode(kDraNode), dra->offering), DraNodeKind::kDra);

  const NodeOffering* plugin = MigOn(s, kPluginNode);
  ASSERT_NE(plugin, nullptr);
  EXPECT_FALSE(plugin->dra);
  EXPECT_EQ(plugin->advertised_units, 7);
  EXPECT_TRUE(plugin->unit_devices.empty());
  EXPECT_EQ(ClusterState::KindOf(*s.FindNode(kPluginNode), plugin->offering),
            DraNodeKind::kDevicePlugin);
  EXPECT_TRUE(s.Audit().problems.empty());
}

TEST(ClusterStateDra, ANodeWithoutDevicesOfTheClassOffersNothing) {
  // A CPU node and a device-plugin node without the name: a class maps it and allocatable is
  // absent, but no device of the class is there.
  ClusterState s(BuiltIn(), DraOn());
  ApplyClassAndSlice(s);
  s.ApplyNode(Node("cpu-1", {}));
  s.ApplyNode(Node(kPluginNode, {{"nvidia.com/gpu", 2}}));
  EXPECT_EQ(MigOn(s, "cpu-1"), nullptr);
  EXPECT_EQ(MigOn(s, kPluginNode), nullptr);
  EXPECT_TRUE(s.FindNode("cpu-1")->offerings.empty());
}

TEST(ClusterStateDra, OffByDefaultIgnoresDraObjects) {
  ClusterState s(BuiltIn(), MirrorOptions{});
  s.ApplyNode(Node(kDraNode, {}));
  ApplyClassAndSlice(s);
  EXPECT_EQ(MigOn(s, kDraNode), nullptr);
  EXPECT_EQ(s.dra().device_class_count(), 0u);
}

TEST(ClusterStateDra, ChargedPodMovesOntoItsClaimsDeviceWhenTheClaimComesLater) {
  ClusterState s(BuiltIn(), DraOn());
  s.ApplyNode(Node(kDraNode, {}));
  ApplyClassAndSlice(s);
  // Without its claim the pod is charged conservatively: unit 0 (free, lowest).
  s.ApplyPod(Pod("ml-team", "cuda-infer-7d9f8b6c5-x2lqp", kClaimPodUid, kDraNode));
  const PodRecord* rec = s.FindPodByUid(kClaimPodUid);
  ASSERT_NE(rec, nullptr);
  EXPECT_THAT(rec->assignment.units, ElementsAre(0));
  // The claim says 19-6: the charge moves there (5th in walk order); a status update of the
  // pod leaves it there.
  ApplyClaim(s, Edit(Dra("resourceclaim-extended-allocated.json"),
                     "\"device\": \"gpu-0-mig-1g5gb-19-3\"", "\"device\": \"gpu-0-mig-1g5gb-19-6\""));
  rec = s.FindPodByUid(kClaimPodUid);
  ASSERT_NE(rec, nullptr);
  EXPECT_EQ(rec->source, HoldingSource::kCharged);
  EXPECT_THAT(rec->assignment.units, ElementsAre(4));
  s.ApplyPod(Pod("ml-team", "cuda-infer-7d9f8b6c5-x2lqp", kClaimPodUid, kDraNode));
  EXPECT_THAT(s.FindPodByUid(kClaimPodUid)->assignment.units, ElementsAre(4));
  EXPECT_EQ(MigOn(s, kDraNode)->units[0].used, 0);
  EXPECT_EQ(MigOn(s, kDraNode)->units[4].used, 1);
  EXPECT_TRUE(s.Audit().problems.empty());
}

TEST(ClusterStateDra, ChargedPodOnClaimSeenFirst) {
  ClusterState s(BuiltIn(), DraOn());
  s.ApplyNode(Node(kDraNode, {}));
  ApplyClassAndSlice(s);
  ApplyClaim(s, Edit(Dra("resourceclaim-extended-allocated.json"),
                     "\"device\": \"gpu-0-mig-1g5gb-19-3\"", "\"device\": \"gpu-0-mig-1g5gb-19-2\""));
  s.ApplyPod(Pod("ml-team", "cuda-infer-7d9f8b6c5-x2lqp", kClaimPodUid, kDraNode));
  const PodRecord* rec = s.FindPodByUid(kClaimPodUid);
  ASSERT_NE(rec, nullptr);
  EXPECT_THAT(rec->assignment.units, ElementsAre(5));  // 19-2
  const ProjectId p = s.FindProject("ml-team");
  EXPECT_EQ(s.Usage(p, s.catalog().Find(kMig)->id), 1);  // quota in units
}

// The fact sheet's allocation, made by a user: no extended-resource annotation, so no
// owning pod counts.
std::string UserClaimJson() {
  return Edit(Dra("resourceclaim-extended-allocated.json"),
              "\"resource.kubernetes.io/extended-resource-claim\": \"true\"",
              "\"example.com/owner\": \"user\"");
}

TEST(ClusterStateDra, UserClaimBlocksItsDevice) {
  ClusterState s(BuiltIn(), DraOn());
  s.ApplyNode(Node(kDraNode, {}));
  ApplyClassAndSlice(s);
  ApplyClaim(s, UserClaimJson());
  const NodeOffering* no = MigOn(s, kDraNode);
  ASSERT_NE(no, nullptr);
  EXPECT_TRUE(no->units[0].user_claimed);  // 19-3: no new holders
  EXPECT_FALSE(no->units[0].unhealthy);    // health is another matter
  EXPECT_TRUE(no->units[0].TakesNoNewHolders());
  EXPECT_EQ(no->units[0].Free(), 0);
  EXPECT_FALSE(no->units[1].user_claimed);
  EXPECT_EQ(no->summary.empty_units, 6);
  // Its removal frees the device.
  s.RemoveResourceClaim("ml-team/cuda-infer-7d9f8b6c5-x2lqp-extended-resources-k7m2q");
  EXPECT_FALSE(MigOn(s, kDraNode)->units[0].user_claimed);
  EXPECT_EQ(MigOn(s, kDraNode)->units[0].Free(), 1);
  EXPECT_TRUE(s.Audit().problems.empty());
}

// A user-made claim with a prioritized list (firstAvailable, KEP-4816): its result names the
// subrequest ("gpu/mig") and holds the device like any other result. (The scheduler's
// extended-resource claims never use prioritized lists: one ExactCount request each.)
TEST(ClusterStateDra, AUserClaimWithAPrioritizedListHoldsTheDeviceItsResultNames) {
  ClusterState s(BuiltIn(), DraOn());
  s.ApplyNode(Node(kDraNode, {}));
  ApplyClassAndSlice(s);
  std::string user = UserClaimJson();
  user = Edit(user,
              R"("exactly": {
            "deviceClassName": "mig-1g-5gb.nvidia.com",
            "allocationMode": "ExactCount",
            "count": 1
          })",
              R"("firstAvailable": [{"name": "full", "deviceClassName": "gpu.nvidia.com"},
                                {"name": "mig", "deviceClassName": "mig-1g-5gb.nvidia.com"}])");
  user = Edit(user, R"("request": "container-0-request-2",)", R"("request": "container-0-request-2/mig",)");
  ASSERT_THAT(user, HasSubstr("firstAvailable"));
  ApplyClaim(s, user);
  ASSERT_EQ(s.dra().resource_claim_count(), 1u);
  const NodeOffering* no = MigOn(s, kDraNode);
  ASSERT_NE(no, nullptr);
  EXPECT_TRUE(no->units[0].user_claimed);  // 19-3
  EXPECT_EQ(no->summary.empty_units, 6);
  EXPECT_TRUE(s.Audit().problems.empty());
}

TEST(ClusterStateDra, DeviceClassEditedUnderTheState) {
  ClusterState s(BuiltIn(), DraOn());
  s.ApplyNode(Node(kDraNode, {}));
  ApplyClassAndSlice(s);
  ASSERT_EQ(MigOn(s, kDraNode)->advertised_units, 7);
  // A selector outside the understood subset: no units, the reason said, nothing guessed.
  const std::string cls = Dra("deviceclass-mig-1g-extended.json");
  for (auto& c : DecodeDra(Edit(cls, "== '1g.5gb'", "in ['1g.5gb']")).device_classes) {
    s.ApplyDeviceClass(std::move(c));
  }
  const NodeOffering* no = MigOn(s, kDraNode);
  ASSERT_NE(no, nullptr);
  EXPECT_EQ(no->advertised_units, 0);
  EXPECT_EQ(no->unusable_reason, "DeviceClass selectors not understood");
  EXPECT_THAT(no->dra_problem, HasSubstr("not understood"));
  // Another profile: no device matches, the node offers nothing of the name.
  for (auto& c : DecodeDra(Edit(cls, "== '1g.5gb'", "== '2g.10gb'")).device_classes) {
    s.ApplyDeviceClass(std::move(c));
  }
  EXPECT_EQ(MigOn(s, kDraNode), nullptr);
  // The drift kept with the classes says so at once (filters and /debug/state read it).
  auto mig_drift = [&] {
    std::vector<std::string> out;
    for (const std::string& line : s.DraDrift()) {
      if (absl::StartsWith(line, "nvidia.com/mig-1g.5gb:")) out.push_back(line);
    }
    return out;
  };
  EXPECT_THAT(mig_drift(), ElementsAre(HasSubstr("selectors differ")));
  // Back: seven units again. The class removed: the name maps to nothing on the node.
  for (auto& c : DecodeDra(cls).device_classes) s.ApplyDeviceClass(std::move(c));
  EXPECT_EQ(MigOn(s, kDraNode)->advertised_units, 7);
  EXPECT_THAT(mig_drift(), IsEmpty());
  s.RemoveDeviceClass("mig-1g-5gb.nvidia.com");
  EXPECT_EQ(MigOn(s, kDraNode), nullptr);
  EXPECT_THAT(mig_drift(), ElementsAre(HasSubstr("not found")));
  EXPECT_EQ(s.DraDrift(), s.dra().Drift(s.catalog()));
  EXPECT_TRUE(s.Audit().problems.empty());
}

TEST(ClusterStateDra, AllocatableWinsOverTheClass) {
  // KEP-5004: allocatable > 0 means device plugin, even where a class maps the name.
  ClusterState s(BuiltIn(), DraOn());
  ApplyClassAndSlice(s);
  s.ApplyNode(Node(kDraNode, {{kMig, 2}}));
  const NodeOffering* no = MigOn(s, kDraNode);
  ASSERT_NE(no, nullptr);
  EXPECT_FALSE(no->dra);
  EXPECT_EQ(no->advertised_units, 2);
}

TEST(ClusterStateDra, ReserveOnDraUnitsCountsQuotaAcrossKinds) {
  ClusterState s(BuiltIn(), DraOn());
  s.ApplyNode(Node(kDraNode, {}));
  s.ApplyNode(Node(kPluginNode, {{kMig, 7}}));
  ApplyClassAndSlice(s);
  ResourceQuotaObject q;
  q.namespace_name = "team-a";
  q.name = "gpu";
  q.hard_milli["requests.nvidia.com/mig-1g.5gb"] = 2000;
  s.ApplyQuota(q);
  const OfferingId mig = s.catalog().Find(kMig)->id;
  const PodClaim a{"team-a/p1", "u1", "team-a", "team-a"};
  const PodClaim b{"team-a/p2", "u2", "team-a", "team-a"};
  const PodClaim c{"team-a/p3", "u3", "team-a", "team-a"};
  ASSERT_TRUE(s.Reserve(a, Assignment{kDraNode, mig, {0}, 1}).ok());
  ASSERT_TRUE(s.Reserve(b, Assignment{kPluginNode, mig, {0}, 1}).ok());
  const absl::Status third = s.Reserve(c, Assignment{kDraNode, mig, {1}, 1});
  EXPECT_FALSE(third.ok());
  EXPECT_THAT(std::string(third.message()), HasSubstr("quota"));
  EXPECT_EQ(s.Usage(s.FindProject("team-a"), mig), 2);
  EXPECT_TRUE(s.Audit().problems.empty());
}

TEST(ClusterStateDra, RelistKeepsOrReplacesDraObjects) {
  Mirror mirror(BuiltIn(), DraOn());
  ObjectBatch batch;
  batch.nodes.push_back(Node(kDraNode, {}));
  DraObjectBatch dra = DecodeDra(Dra("deviceclass-mig-1g-extended.json"));
  dra.resource_slices = DecodeDra(Dra("resourceslice-a100-mig-node.json")).resource_slices;
  dra.resource_claims = DecodeDra(Dra("resourceclaim-extended-allocated.json")).resource_claims;
  batch.pods.push_back(Pod("ml-team", "cuda-infer-7d9f8b6c5-x2lqp", kClaimPodUid, kDraNode));
  mirror.ReplaceAll(batch, absl::Now(), &dra);
  auto units = [&] {
    return mirror.Read([](const ClusterState& s) {
      const PodRecord* rec = s.FindPodByUid(kClaimPodUid);
      return rec == nullptr ? std::vector<int32_t>{-1} : rec->assignment.units;
    });
  };
  EXPECT_THAT(units(), ElementsAre(0));  // 19-3, from the claim
  // A relist without DRA lists keeps the mirrored DRA objects.
  mirror.ReplaceAll(batch, absl::Now());
  EXPECT_THAT(units(), ElementsAre(0));
  EXPECT_EQ(mirror.Read([](const ClusterState& s) { return s.dra().resource_slice_count(); }), 1u);
  // One with DRA lists replaces them: no slice, no DRA units, the pod charged to a draining
  // placeholder (the API server says it runs there).
  DraObjectBatch empty;
  mirror.ReplaceAll(batch, absl::Now(), &empty);
  EXPECT_EQ(mirror.Read([](const ClusterState& s) { return s.dra().resource_slice_count(); }), 0u);
  EXPECT_TRUE(mirror.Read([](const ClusterState& s) {
    const NodeOffering* no = MigOn(s, kDraNode);
    return no != nullptr && no->advertised_units == 0 && !no->units.empty() &&
           no->units[0].draining;
  }));
}

constexpr char kMigShared[] = "nvidia.com/mig-1g.5gb.shared";

// The offering `resource` on `node` as the mirror derived it (units and, for the shared one,
// the allocator's predicted pick): what a stale index or a change that missed the node would
// leave wrong.
std::string DescribeOffering(const ClusterState& s, const std::string& node,
                             const std::string& resource) {
  const NodeState* n = s.FindNode(node);
  const NodeOffering* no = n == nullptr ? nullptr : n->Find(s.catalog().Find(resource)->id);
  if (no == nullptr) return "none";
  std::string out = absl::StrCat(no->dra, " ", no->advertised_units, " '", no->unusable_reason,
                                 "' '", no->dra_problem, "' pick ", no->dra_pick.kind, " [",
                                 absl::StrJoin(no->dra_pick.units, ","), "] '",
                                 no->dra_pick.reason, "'");
  for (size_t i = 0; i < no->units.size(); ++i) {
    absl::StrAppend(&out, " ", i < no->unit_devices.size() ? no->unit_devices[i] : "-",
                    no->units[i].user_claimed ? "(user)" : "", no->units[i].draining ? "(drain)" : "");
  }
  return out;
}

// The fact sheet's class, and a copy mapping the shared offering (whose nodes keep the
// allocator's predicted pick, NodeOffering::dra_pick).
std::vector<DraDeviceClass> MigClasses() {
  std::vector<DraDeviceClass> classes = DecodeDra(Dra("deviceclass-mig-1g-extended.json")).device_classes;
  if (classes.size() != 1) return {};
  DraDeviceClass shared = classes[0];
  shared.name = "mig-1g-5gb-shared.nvidia.com";
  shared.extended_resource_name = kMigShared;
  classes.push_back(shared);
  return classes;
}

TEST(ClusterStateDra, RandomObjectChangesLeaveEveryNodeAsAFreshDerivation) {
  const std::vector<std::string> nodes = {"n0", "n1", "n2", "n3"};
  std::vector<DraDeviceClass> classes = MigClasses();
  ASSERT_EQ(classes.size(), 2u);
  const std::string selector = classes[1].cel_selectors[0];
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    SCOPED_TRACE(absl::StrCat("seed ", seed));
    std::mt19937_64 rng(seed);
    std::map<std::string, DraResourceSlice> slices;
    std::map<std::string, DraResourceClaim> claims;
    auto batch = [&] {
      DraObjectBatch b;
      b.device_classes = classes;
      for (const auto& [name, sl] : slices) b.resource_slices.push_back(sl);
      for (const auto& [key, c] : claims) b.resource_claims.push_back(c);
      return b;
    };
    ClusterState s(BuiltIn(), DraOn());
    for (const std::string& n : nodes) s.ApplyNode(Node(n, {}));
    classes[1].cel_selectors[0] = selector;
    for (const DraDeviceClass& c : classes) s.ApplyDeviceClass(c);
    for (int step = 0; step < 80; ++step) {
      const uint64_t op = rng() % 100;
      std::string what;
      if (op < 5) {
        // The shared class edited: another profile, or back (its nodes' picks change).
        const std::string profile = rng() % 2 == 0 ? "'1g.5gb'" : "'2g.10gb'";
        classes[1].cel_selectors[0] = absl::StrReplaceAll(selector, {{"'1g.5gb'", profile}});
        what = absl::StrCat("edit shared class for ", profile);
        s.ApplyDeviceClass(classes[1]);
      } else if (op < 35) {
        DraResourceSlice sl = testing::RandomDraSlice(rng, nodes);
        what = absl::StrCat("apply slice ", sl.name, " on '", sl.node_name, "'");
        slices[sl.name] = sl;
        s.ApplyResourceSlice(std::move(sl));
      } else if (op < 45) {
        const std::string name = absl::StrCat("s", rng() % 12);
        what = absl::StrCat("remove slice ", name);
        slices.erase(name);
        s.RemoveResourceSlice(name);
      } else if (op < 80) {
        DraResourceClaim c = testing::RandomDraClaim(rng, nodes, classes[0].name);
        what = absl::StrCat("apply claim ", c.Key());
        claims[c.Key()] = c;
        s.ApplyResourceClaim(std::move(c));
      } else if (op < 95) {
        const std::string key = absl::StrCat("ns/c", rng() % 10);
        what = absl::StrCat("remove claim ", key);
        claims.erase(key);
        s.RemoveResourceClaim(key);
      } else {
        what = "relist";
        s.ReplaceDra(batch());
      }
      SCOPED_TRACE(absl::StrCat("step ", step, ": ", what));
      ClusterState fresh(BuiltIn(), DraOn());
      for (const std::string& n : nodes) fresh.ApplyNode(Node(n, {}));
      fresh.ReplaceDra(batch());
      for (const std::string& n : nodes) {
        for (const char* resource : {kMig, kMigShared}) {
          EXPECT_EQ(DescribeOffering(s, n, resource), DescribeOffering(fresh, n, resource))
              << n << " " << resource;
        }
      }
      EXPECT_THAT(s.Audit().problems, ::testing::IsEmpty());
      if (::testing::Test::HasFailure()) return;
    }
  }
}

}  // namespace
}  // namespace gse
