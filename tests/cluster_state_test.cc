// ClusterState: nodes and units from Node objects, holders from pods, projects and quotas, and
// Reserve/Confirm/Release/Audit (DESIGN.md invariants I1–I6 and cluster_state.h).
#include "state/cluster_state.h"

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "state/assignment.h"
#include "state/catalog.h"
#include "state/k8s_objects.h"
#include "testsupport/paths.h"

namespace gse {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr char kGpu[] = "nvidia.com/gpu";
constexpr char kA100[] = "nvidia.com/a100";
constexpr char kMig[] = "nvidia.com/mig-1g.5gb";
constexpr char kTs[] = "nvidia.com/mig-1g.5gb.shared";
constexpr char kMps[] = "nvidia.com/gpu.mps";
constexpr char kSolo[] = "nvidia.com/gpu.mps-solo";
constexpr char kPoolLabel[] = "gpu.example.com/pool";

std::shared_ptr<const Catalog> TestCatalog() {
  std::vector<Offering> v(6);
  v[0].resource = kGpu;
  v[1].resource = kA100;
  v[1].aliases = {"nvidia.com/gpu-a100"};
  v[1].product = "NVIDIA-A100";
  v[1].node_selector = {{kPoolLabel, "train"}};
  v[2].resource = kMig;
  v[2].unit = UnitKind::kMig;
  v[2].mig_profile = "1g.5gb";
  v[3].resource = kTs;
  v[3].unit = UnitKind::kMig;
  v[3].mig_profile = "1g.5gb";
  v[3].sharing = Sharing::kTimeSliced;
  v[3].replicas = 4;
  v[4].resource = kMps;
  v[4].sharing = Sharing::kMps;
  v[4].replicas = 4;
  v[5].resource = kSolo;
  v[5].sharing = Sharing::kMps;
  v[5].replicas = 2;
  v[5].mps_single_project = true;
  absl::StatusOr<Catalog> c = Catalog::FromOfferings(std::move(v));
  EXPECT_TRUE(c.ok()) << c.status();
  return std::make_shared<const Catalog>(*std::move(c));
}

NodeObject Node(const std::string& name, const std::map<std::string, int64_t>& allocatable,
                const std::map<std::string, std::string>& labels = {}) {
  NodeObject n;
  n.name = name;
  n.uid = name + "-uid";
  n.labels = labels;
  n.allocatable_milli["cpu"] = 64000;
  n.allocatable_milli["pods"] = 110000;
  for (const auto& [k, v] : allocatable) n.allocatable_milli[k] = v * 1000;
  return n;
}

PodObject Pod(const std::string& ns, const std::string& name, const std::string& node,
              const std::string& resource = "", int64_t quantity = 1) {
  PodObject p;
  p.namespace_name = ns;
  p.name = name;
  p.uid = ns + "-" + name + "-uid";
  p.node_name = node;
  p.phase = node.empty() ? "Pending" : "Running";
  ContainerResources c;
  c.name = "main";
  if (!resource.empty()) {
    c.requests_milli[resource] = quantity * 1000;
    c.limits_milli[resource] = quantity * 1000;
  }
  p.containers.push_back(c);
  return p;
}

PodClaim Claim(const std::string& ns, const std::string& name, const std::string& project = "") {
  return PodClaim{ns + "/" + name, ns + "-" + name + "-uid", ns, project.empty() ? ns : project};
}

// The UID (and so the mirror's id) of the pod `ns`/`name` that Pod() and Claim() build.
std::string Uid(const std::string& ns, const std::string& name) { return ns + "-" + name + "-uid"; }

// Everything observable about a state, in a canonical order (project ids replaced by names),
// so that two states can be compared for equality.
std::string Dump(const ClusterState& s) {
  auto pname = [&](ProjectId id) { return id == kNoProject ? std::string("-") : s.project(id).name; };
  std::vector<std::string> lines;
  for (const auto& [name, node] : s.nodes()) {
    lines.push_back(absl::StrCat("node ", name, " product=", node->gpu_product,
                                 " gpus=", node->gpu_count, " removed=", node->removed, " labels=",
                                 absl::StrJoin(node->labels, ",", absl::PairFormatter("="))));
    for (const NodeOffering& no : node->offerings) {
      lines.push_back(absl::StrCat("node ", name, " offering ", s.catalog().Get(no.offering).resource,
                                   " as=", no.advertised_name, " units=", no.advertised_units,
                                   " replicas=", no.replicas, " unusable=", no.unusable_reason));
      for (const Unit& u : no.units) {
        std::vector<std::string> holders;
        for (const Holding& h : u.holders) holders.push_back(absl::StrCat(h.pod_id, "x", h.amount));
        std::sort(holders.begin(), holders.end());
        lines.push_back(absl::StrCat("unit ", UnitId(name, s.catalog().Get(no.offering).resource, u.index),
                                     " cap=", u.capacity, " used=", u.used, " owner=", pname(u.owner),
                                     " draining=", u.draining, " holders=", absl::StrJoin(holders, ",")));
      }
    }
  }
  for (const auto& [key, pod] : s.pods()) {
    lines.push_back(absl::StrCat("pod ", key, " uid=", pod.uid, " ns=", pod.namespace_name,
                                 " project=", pname(pod.project), " unit=",
                                 pod.assignment.node, "/", pod.assignment.offering, "/",
                                 absl::StrJoin(pod.assignment.units, ","), " x",
                                 pod.assignment.amount_per_unit, " source=",
                                 static_cast<int>(pod.source)));
  }
  for (size_t p = 0; p < s.project_count(); ++p) {
    const ProjectState& ps = s.project(static_cast<ProjectId>(p));
    for (const auto& [off, v] : ps.usage) {
      if (v != 0) lines.push_back(absl::StrCat("usage ", ps.name, " ", off, " ", v));
    }
    for (const auto& [off, v] : ps.quota) lines.push_back(absl::StrCat("quota ", ps.name, " ", off, " ", v));
  }
  std::sort(lines.begin(), lines.end());
  return absl::StrJoin(lines, "\n");
}

class ClusterStateTest : public ::testing::Test {
 protected:
  OfferingId Id(absl::string_view name) const { return catalog_->Find(name)->id; }
  Assignment A(const std::string& node, absl::string_view offering, std::vector<int32_t> units,
               int32_t amount = 1) const {
    return Assignment{node, Id(offering), std::move(units), amount};
  }
  const NodeOffering& Offer(const std::string& node, absl::string_view offering) const {
    const NodeState* n = state_.FindNode(node);
    EXPECT_NE(n, nullptr) << node;
    const NodeOffering* no = n->Find(Id(offering));
    EXPECT_NE(no, nullptr) << node << " " << offering;
    return *no;
  }
  const Unit& U(const std::string& node, absl::string_view offering, int index) const {
    return Offer(node, offering).units.at(static_cast<size_t>(index));
  }
  int64_t UsageOf(const std::string& project, absl::string_view offering) const {
    return state_.Usage(state_.FindProject(project), Id(offering));
  }
  void ExpectClean() const {
    AuditReport r = state_.Audit();
    EXPECT_THAT(r.problems, IsEmpty());
    EXPECT_EQ(r.oversubscribed_units, 0);
    EXPECT_EQ(r.multi_owner_units, 0);
    EXPECT_EQ(r.over_quota_projects, 0);
  }
  ResourceQuotaObject QuotaObj(const std::string& ns, const std::string& name,
                               const std::map<std::string, int64_t>& hard_whole) {
    ResourceQuotaObject q;
    q.namespace_name = ns;
    q.name = name;
    for (const auto& [k, v] : hard_whole) q.hard_milli[k] = v * 1000;
    return q;
  }
  // A node with every test offering: 4 GPUs, 2 A100s, 7 MIG slices, 3 time-sliced slices x4,
  // 2 MPS GPUs x4, 1 single-project MPS GPU x2.
  void AddStandardNode(const std::string& name) {
    ASSERT_TRUE(state_.ApplyNode(Node(name,
                                      {{kGpu, 4}, {kA100, 2}, {kMig, 7}, {kTs, 12}, {kMps, 8}, {kSolo, 2}},
                                      {{"nvidia.com/a100.product", "NVIDIA-A100-SXM4-40GB"},
                                       {kPoolLabel, "train"}})));
  }

  std::shared_ptr<const Catalog> catalog_ = TestCatalog();
  ClusterState state_{catalog_, MirrorOptions{}};
};

// ---------------------------------------------------------------------------------------------
// Nodes

TEST_F(ClusterStateTest, NodeOfferingsComeFromAllocatableAndFeatureDiscoveryLabels) {
  ASSERT_TRUE(state_.ApplyNode(Node("n1", {{kGpu, 8}, {kTs, 28}, {"example.com/fpga", 2}},
                                    {{"nvidia.com/gpu.product", "NVIDIA-H100"},
                                     {"nvidia.com/gpu.count", "8"},
                                     {"nvidia.com/mig-1g.5gb.count", "7"},
                                     {"nvidia.com/mig-1g.5gb.replicas", "4"},
                                     {"unrelated", "x"},
                                     {kPoolLabel, "infer"}})));
  const NodeState* n = state_.FindNode("n1");
  ASSERT_NE(n, nullptr);
  EXPECT_EQ(n->gpu_product, "NVIDIA-H100");
  EXPECT_EQ(n->gpu_count, 8);
  EXPECT_FALSE(n->removed);
  EXPECT_EQ(n->labels, (std::map<std::string, std::string>{{kPoolLabel, "infer"}}))
      << "only labels some offering's nodeSelector uses are kept";
  ASSERT_EQ(n->offerings.size(), 2u) << "unknown resources (fpga, cpu) are not offerings";

  const NodeOffering& gpu = Offer("n1", kGpu);
  EXPECT_EQ(gpu.advertised_name, kGpu);
  EXPECT_EQ(gpu.advertised_units, 8);
  EXPECT_EQ(gpu.replicas, 1);
  EXPECT_EQ(gpu.unusable_reason, "");
  ASSERT_EQ(gpu.units.size(), 8u);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(gpu.units[i].index, i);
    EXPECT_EQ(gpu.units[i].capacity, 1);
    EXPECT_EQ(gpu.units[i].Free(), 1);
    EXPECT_FALSE(gpu.units[i].draining);
  }
  // ".shared": labels live under the original name (renameByDefault).
  const NodeOffering& ts = Offer("n1", kTs);
  EXPECT_EQ(ts.advertised_units, 7);
  EXPECT_EQ(ts.replicas, 4);
  ASSERT_EQ(ts.units.size(), 7u);
  EXPECT_EQ(ts.units[6].capacity, 4);
  EXPECT_EQ(ts.unusable_reason, "");
}

TEST_F(ClusterStateTest, CountAndReplicasFallBackToAllocatableAndCatalog) {
  // No labels: replicas from the catalog (4), count = allocatable / replicas.
  ASSERT_TRUE(state_.ApplyNode(Node("n1", {{kTs, 12}, {kMps, 8}, {kGpu, 3}})));
  EXPECT_EQ(Offer("n1", kTs).advertised_units, 3);
  EXPECT_EQ(Offer("n1", kTs).replicas, 4);
  EXPECT_EQ(Offer("n1", kMps).advertised_units, 2);
  EXPECT_EQ(Offer("n1", kGpu).advertised_units, 3);
  EXPECT_EQ(state_.FindNode("n1")->gpu_count, 0) << "no nvidia.com/gpu.count label";
  // The node's replicas label overrides the catalog; a count label changes nothing.
  ASSERT_TRUE(state_.ApplyNode(Node("n2", {{kTs, 12}},
                                    {{"nvidia.com/mig-1g.5gb.replicas", "6"},
                                     {"nvidia.com/mig-1g.5gb.count", "many"}})));
  EXPECT_EQ(Offer("n2", kTs).replicas, 6);
  EXPECT_EQ(Offer("n2", kTs).advertised_units, 2);
  EXPECT_EQ(Offer("n2", kTs).units[0].capacity, 6);
  // replicas 0 (MIG-enabled GPU in mixed strategy) is ignored: the catalog's value applies.
  ASSERT_TRUE(state_.ApplyNode(Node("n3", {{kGpu, 2}}, {{"nvidia.com/gpu.replicas", "0"}})));
  EXPECT_EQ(Offer("n3", kGpu).replicas, 1);
  EXPECT_EQ(Offer("n3", kGpu).unusable_reason, "");
  // Hostile counts are bounded (unit indices are 0..9999), and labels do not add units.
  ASSERT_TRUE(state_.ApplyNode(Node("n4", {{kGpu, 1}}, {{"nvidia.com/gpu.count", "2000000000"}})));
  EXPECT_EQ(Offer("n4", kGpu).advertised_units, 1);
  EXPECT_EQ(state_.FindNode("n4")->gpu_count, 2000000000);
  ASSERT_TRUE(state_.ApplyNode(Node("n5", {{kGpu, 2000000000}})));
  EXPECT_EQ(Offer("n5", kGpu).advertised_units, 10000);
}

// The device plugin takes unhealthy devices out of allocatable; GPU feature discovery's
// `.count` label describes the hardware. Only allocatable units can be handed out, and a held
// unit beyond it drains (issue 12, finding 6).
TEST_F(ClusterStateTest, AllocatableIsTheTruthForUnitsNotTheCountLabel) {
  // Mixed MIG strategy: the GPUs are sliced, whole GPUs are allocatable 0, the label says 4.
  ASSERT_TRUE(state_.ApplyNode(Node("mixed", {{kGpu, 0}, {kMig, 7}},
                                    {{"nvidia.com/gpu.count", "4"},
                                     {"nvidia.com/mig-1g.5gb.count", "7"}})));
  EXPECT_EQ(Offer("mixed", kGpu).advertised_units, 0);
  EXPECT_TRUE(Offer("mixed", kGpu).units.empty());
  EXPECT_EQ(state_.FindNode("mixed")->gpu_count, 4) << "the label still describes the node";
  state_.ApplyNamespace(NamespaceObject{"a", {}});
  EXPECT_EQ(state_.Reserve(Claim("a", "whole"), A("mixed", kGpu, {0})).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(state_.RoomRows(Id(kGpu))[state_.FindNode("mixed")->slot].availability,
            Availability::kNotOnNode);

  // One of 8 GPUs unhealthy: allocatable 7, label 8. Unit 7 is held: it drains.
  ASSERT_TRUE(state_.ApplyNode(Node("n8", {{kGpu, 8}}, {{"nvidia.com/gpu.count", "8"}})));
  ASSERT_TRUE(state_.Reserve(Claim("a", "on7"), A("n8", kGpu, {7})).ok());
  ASSERT_TRUE(state_.ApplyNode(Node("n8", {{kGpu, 7}}, {{"nvidia.com/gpu.count", "8"}})));
  EXPECT_EQ(Offer("n8", kGpu).advertised_units, 7);
  EXPECT_TRUE(U("n8", kGpu, 7).draining);
  EXPECT_EQ(U("n8", kGpu, 7).holders.size(), 1u) << "the holder stays";
  EXPECT_EQ(U("n8", kGpu, 7).Free(), 0);
  ASSERT_TRUE(state_.Release(Uid("a", "on7")));
  EXPECT_EQ(Offer("n8", kGpu).units.size(), 7u) << "the free unit beyond allocatable is gone";
  EXPECT_THAT(state_.Reserve(Claim("a", "again"), A("n8", kGpu, {7})).message(),
              HasSubstr("out of range"));
  // A label claiming more than allocatable hands out nothing more either.
  ASSERT_TRUE(state_.ApplyNode(Node("n9", {{kTs, 8}}, {{"nvidia.com/mig-1g.5gb.count", "7"},
                                                      {"nvidia.com/mig-1g.5gb.replicas", "4"}})));
  EXPECT_EQ(Offer("n9", kTs).advertised_units, 2) << "8 tickets / 4 replicas";
  ExpectClean();
}

TEST_F(ClusterStateTest, AliasKeyAdvertisesTheOffering) {
  ASSERT_TRUE(state_.ApplyNode(Node("n1", {{"nvidia.com/gpu-a100", 2}},
                                    {{"nvidia.com/gpu-a100.product", "NVIDIA-A100-PCIE-40GB"}})));
  const NodeOffering& a100 = Offer("n1", kA100);
  EXPECT_EQ(a100.advertised_name, "nvidia.com/gpu-a100");
  EXPECT_EQ(a100.advertised_units, 2);
  EXPECT_EQ(a100.unusable_reason, "") << "product label read under the advertised name";
}

TEST_F(ClusterStateTest, UnusableReasons) {
  ASSERT_TRUE(state_.ApplyNode(Node("n1",
                                    {{kGpu, 8}, {kTs, 2}, {kA100, 1}, {kMps, 4}},
                                    {{"nvidia.com/gpu.replicas", "4"},
                                     {"nvidia.com/mig-1g.5gb.replicas", "1"},
                                     {"nvidia.com/gpu.product", "NVIDIA-H100-80GB"}})));
  EXPECT_EQ(Offer("n1", kGpu).unusable_reason, "offering is time-sliced on node");
  EXPECT_EQ(Offer("n1", kGpu).advertised_units, 2) << "8 advertised / 4 replicas";
  EXPECT_EQ(Offer("n1", kTs).unusable_reason, "offering is not shared on node");
  EXPECT_EQ(Offer("n1", kA100).unusable_reason, "GPU product does not match offering")
      << "falls back to nvidia.com/gpu.product";
  EXPECT_EQ(Offer("n1", kMps).unusable_reason, "")
      << "no replicas label: the catalog's replicas, shared as catalogued";

  ASSERT_TRUE(state_.ApplyNode(Node("n2", {{kA100, 1}}, {{"nvidia.com/gpu.product", "NVIDIA-A100-SXM4-80GB"}})));
  EXPECT_EQ(Offer("n2", kA100).unusable_reason, "") << "product is a prefix";
  ASSERT_TRUE(state_.ApplyNode(Node("n3", {{kA100, 1}})));
  EXPECT_EQ(Offer("n3", kA100).unusable_reason, "GPU product does not match offering")
      << "no product label cannot match a product-specific offering";

  state_.ApplyNamespace(NamespaceObject{"ns", {}});
  absl::Status s = state_.Reserve(Claim("ns", "p"), A("n1", kGpu, {0}));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("offering is time-sliced on node"));
}

TEST_F(ClusterStateTest, UnchangedNodeRefreshIsANoOp) {
  NodeObject n = Node("n1", {{kGpu, 4}}, {{"nvidia.com/gpu.count", "4"}});
  EXPECT_TRUE(state_.ApplyNode(n));
  EXPECT_FALSE(state_.ApplyNode(n));
  n.resource_version = "99";
  n.allocatable_milli["ephemeral-storage"] = 1000;
  n.labels["kubernetes.io/hostname"] = "n1";
  n.taints.push_back({"k", "v", "NoSchedule"});
  EXPECT_FALSE(state_.ApplyNode(n)) << "nothing the mirror keeps changed";
  n.allocatable_milli["cpu"] = 1000;
  EXPECT_TRUE(state_.ApplyNode(n)) << "the host view keeps allocatable cpu";
  EXPECT_EQ(state_.FindNode("n1")->allocatable.cpu_milli, 1000);
  n.labels[kPoolLabel] = "train";
  EXPECT_TRUE(state_.ApplyNode(n)) << "a selector label changed";
  EXPECT_EQ(state_.FindNode("n1")->labels.at(kPoolLabel), "train");
  n.labels["nvidia.com/gpu.count"] = "5";
  EXPECT_TRUE(state_.ApplyNode(n)) << "the node's physical GPU count changed";
  EXPECT_EQ(state_.FindNode("n1")->gpu_count, 5);
  EXPECT_EQ(Offer("n1", kGpu).advertised_units, 4) << "the count label only describes";
  n.allocatable_milli[kGpu] = 5000;
  EXPECT_TRUE(state_.ApplyNode(n));
  EXPECT_EQ(Offer("n1", kGpu).advertised_units, 5);
  n.labels["nvidia.com/gpu.product"] = "X";
  EXPECT_TRUE(state_.ApplyNode(n));
  EXPECT_EQ(state_.FindNode("n1")->gpu_product, "X");
}

TEST_F(ClusterStateTest, ShrinkingNodeKeepsHeldUnitsDraining) {
  ASSERT_TRUE(state_.ApplyNode(Node("n1", {{kGpu, 6}})));
  ASSERT_TRUE(state_.Reserve(Claim("a", "p1"), A("n1", kGpu, {1})).ok());
  ASSERT_TRUE(state_.Reserve(Claim("a", "p4"), A("n1", kGpu, {4})).ok());
  ASSERT_TRUE(state_.ApplyNode(Node("n1", {{kGpu, 2}})));
  const NodeOffering& no = Offer("n1", kGpu);
  EXPECT_EQ(no.advertised_units, 2);
  ASSERT_EQ(no.units.size(), 5u) << "units 2..3 are free but below the held unit 4; 5 is gone";
  EXPECT_FALSE(no.units[1].draining);
  EXPECT_EQ(no.units[1].holders.size(), 1u) << "held unit below the count stays live";
  for (int i = 2; i < 5; ++i) EXPECT_TRUE(no.units[i].draining) << i;
  EXPECT_EQ(no.units[4].holders.at(0).pod_id, Uid("a", "p4")) << "holder kept";
  EXPECT_EQ(no.units[4].Free(), 0);
  EXPECT_EQ(UsageOf("a", kGpu), 2) << "draining units still count";
  ExpectClean();

  // No new holders on draining units, even free ones.
  absl::Status s = state_.Reserve(Claim("a", "p3"), A("n1", kGpu, {3}));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("draining"));

  // The holder leaves: the tail is trimmed back to the advertised count.
  EXPECT_TRUE(state_.Release(Uid("a", "p4")));
  EXPECT_EQ(Offer("n1", kGpu).units.size(), 2u);
  // Growing again brings live units back.
  ASSERT_TRUE(state_.ApplyNode(Node("n1", {{kGpu, 4}})));
  EXPECT_EQ(Offer("n1", kGpu).units.size(), 4u);
  EXPECT_FALSE(Offer("n1", kGpu).units[3].draining);
  EXPECT_TRUE(state_.Reserve(Claim("a", "p3"), A("n1", kGpu, {3})).ok());
  ExpectClean();
}

TEST_F(ClusterStateTest, GrowingBackUndrainsHeldUnitsAndReplicasChangeUpdatesCapacity) {
  ASSERT_TRUE(state_.ApplyNode(Node("n1", {{kTs, 8}})));  // 2 units x 4
  ASSERT_TRUE(state_.Reserve(Claim("a", "p"), A("n1", kTs, {1})).ok());
  ASSERT_TRUE(state_.ApplyNode(Node("n1", {{kTs, 4}})));  // 1 unit
  EXPECT_TRUE(U("n1", kTs, 1).draining);
  ASSERT_TRUE(state_.ApplyNode(Node("n1", {{kTs, 16}}, {{"nvidia.com/mig-1g.5gb.replicas", "8"}})));
  EXPECT_FALSE(U("n1", kTs, 1).draining);
  EXPECT_EQ(U("n1", kTs, 1).capacity, 8);
  EXPECT_EQ(U("n1", kTs, 1).Free(), 7);
  EXPECT_EQ(U("n1", kTs, 1).holders.size(), 1u);
  ExpectClean();
}

TEST_F(ClusterStateTest, OfferingThatDisappearsKeepsHeldUnitsDraining) {
  ASSERT_TRUE(state_.ApplyNode(Node("n1", {{kGpu, 2}, {kMig, 7}, {kMps, 4}})));
  ASSERT_TRUE(state_.Reserve(Claim("a", "p"), A("n1", kMig, {3})).ok());
  // MIG reconfigured away: the slices are no longer advertised.
  ASSERT_TRUE(state_.ApplyNode(Node("n1", {{kGpu, 2}})));
  const NodeState* n = state_.FindNode("n1");
  EXPECT_EQ(n->Find(Id(kMps)), nullptr) << "unheld offering is gone";
  const NodeOffering& mig = Offer("n1", kMig);
  EXPECT_EQ(mig.advertised_units, 0);
  ASSERT_EQ(mig.units.size(), 4u);
  EXPECT_EQ(mig.units[3].holders.size(), 1u);
  for (const Unit& u : mig.units) EXPECT_TRUE(u.draining);
  absl::Status s = state_.Reserve(Claim("a", "q"), A("n1", kMig, {0}));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("not on node"));
  ExpectClean();
  EXPECT_TRUE(state_.Release(Uid("a", "p")));
  EXPECT_EQ(state_.FindNode("n1")->Find(Id(kMig)), nullptr);
}

TEST_F(ClusterStateTest, RemoveNodeWithoutHoldersForgetsIt) {
  ASSERT_TRUE(state_.ApplyNode(Node("n1", {{kGpu, 2}})));
  state_.RemoveNode("n1");
  EXPECT_EQ(state_.FindNode("n1"), nullptr);
  state_.RemoveNode("never-seen");  // no effect, no crash
}

TEST_F(ClusterStateTest, RemoveNodeWithHoldersKeepsThemUntilReleased) {
  ASSERT_TRUE(state_.ApplyNode(Node("n1", {{kGpu, 4}, {kMps, 4}})));
  ASSERT_TRUE(state_.Reserve(Claim("a", "p"), A("n1", kGpu, {2})).ok());
  state_.RemoveNode("n1");
  const NodeState* n = state_.FindNode("n1");
  ASSERT_NE(n, nullptr);
  EXPECT_TRUE(n->removed);
  ASSERT_EQ(n->offerings.size(), 1u);
  EXPECT_EQ(n->offerings[0].advertised_units, 0);
  ASSERT_EQ(n->offerings[0].units.size(), 3u);
  for (const Unit& u : n->offerings[0].units) EXPECT_TRUE(u.draining);
  EXPECT_EQ(n->offerings[0].units[2].holders.size(), 1u);
  EXPECT_EQ(UsageOf("a", kGpu), 1);
  ExpectClean();

  absl::Status s = state_.Reserve(Claim("a", "q"), A("n1", kGpu, {0}));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("unknown"));

  // The node comes back before the pod is gone: its units are live again, holder kept.
  ASSERT_TRUE(state_.ApplyNode(Node("n1", {{kGpu, 4}})));
  EXPECT_FALSE(state_.FindNode("n1")->removed);
  EXPECT_FALSE(U("n1", kGpu, 2).draining);
  EXPECT_EQ(U("n1", kGpu, 2).holders.size(), 1u);
  state_.RemoveNode("n1");
  EXPECT_TRUE(state_.Release(Uid("a", "p")));
  EXPECT_EQ(state_.FindNode("n1"), nullptr) << "removed node goes with its last holder";
  ExpectClean();
}

// ---------------------------------------------------------------------------------------------
// Reserve

TEST_F(ClusterStateTest, ReserveCommitsAndCountsUsagePerSharing) {
  AddStandardNode("n1");
  ASSERT_TRUE(state_.Reserve(Claim("a", "e1"), A("n1", kGpu, {0, 2})).ok());
  EXPECT_EQ(UsageOf("a", kGpu), 2) << "exclusive: units held";
  EXPECT_EQ(U("n1", kGpu, 2).owner, state_.FindProject("a"));
  EXPECT_EQ(U("n1", kGpu, 2).Free(), 0);

  ASSERT_TRUE(state_.Reserve(Claim("a", "t1"), A("n1", kTs, {1})).ok());
  ASSERT_TRUE(state_.Reserve(Claim("a", "t2"), A("n1", kTs, {1})).ok());
  EXPECT_EQ(UsageOf("a", kTs), 4) << "time-sliced: the tickets of each slice owned, once";
  EXPECT_EQ(U("n1", kTs, 1).used, 2);
  EXPECT_EQ(U("n1", kTs, 1).Free(), 2);
  ASSERT_TRUE(state_.Reserve(Claim("a", "t3"), A("n1", kTs, {0})).ok());
  EXPECT_EQ(UsageOf("a", kTs), 8);

  ASSERT_TRUE(state_.Reserve(Claim("a", "m1"), A("n1", kMps, {0}, 3)).ok());
  ASSERT_TRUE(state_.Reserve(Claim("b", "m2"), A("n1", kMps, {0}, 1)).ok())
      << "mps units may be shared by projects";
  EXPECT_EQ(UsageOf("a", kMps), 3) << "mps: shares";
  EXPECT_EQ(UsageOf("b", kMps), 1);
  EXPECT_EQ(U("n1", kMps, 0).owner, kNoProject) << "mixed mps unit has no single owner";
  EXPECT_EQ(U("n1", kMps, 0).Free(), 0);

  const PodRecord* rec = state_.FindPod("a/t1");
  ASSERT_NE(rec, nullptr);
  EXPECT_EQ(rec->source, HoldingSource::kReserved);
  EXPECT_EQ(rec->namespace_name, "a");
  EXPECT_EQ(state_.project(rec->project).name, "a");
  EXPECT_EQ(state_.FindPodByUid("a-t1-uid"), rec);
  ExpectClean();

  // Releasing one of two tickets keeps the unit owned; the last one frees it.
  EXPECT_TRUE(state_.Release(Uid("a", "t1")));
  EXPECT_EQ(UsageOf("a", kTs), 8);
  EXPECT_TRUE(state_.Release(Uid("a", "t2")));
  EXPECT_EQ(UsageOf("a", kTs), 4) << "slice 1 given back whole";
  EXPECT_EQ(U("n1", kTs, 1).owner, kNoProject);
  EXPECT_FALSE(state_.Release(Uid("a", "t2"))) << "held nothing";
  EXPECT_EQ(state_.FindPodByUid("a-t2-uid"), nullptr);
  ExpectClean();
}

TEST_F(ClusterStateTest, ReserveIsIdempotentForTheSameAssignment) {
  AddStandardNode("n1");
  const Assignment a = A("n1", kTs, {0});
  ASSERT_TRUE(state_.Reserve(Claim("a", "p"), a).ok());
  const std::string before = Dump(state_);
  EXPECT_TRUE(state_.Reserve(Claim("a", "p"), a).ok());
  EXPECT_EQ(Dump(state_), before);
  absl::Status other = state_.Reserve(Claim("a", "p"), A("n1", kTs, {1}));
  EXPECT_EQ(other.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(Dump(state_), before);
}

TEST_F(ClusterStateTest, ReserveFailuresNameTheReasonAndChangeNothing) {
  AddStandardNode("n1");
  ASSERT_TRUE(state_.ApplyNode(Node("n2", {{kGpu, 2}}, {{"nvidia.com/gpu.replicas", "2"}})));
  ASSERT_TRUE(state_.ApplyNode(Node("n3", {{kGpu, 4}})));
  ASSERT_TRUE(state_.Reserve(Claim("a", "held"), A("n3", kGpu, {3})).ok());
  ASSERT_TRUE(state_.ApplyNode(Node("n3", {{kGpu, 2}})));  // unit 3 draining, 2 draining
  state_.ApplyQuota(QuotaObj("q", "gpu", {{"requests.nvidia.com/gpu", 1},
                                          {"requests.nvidia.com/mig-1g.5gb.shared", 4},
                                          {"requests.nvidia.com/gpu.mps", 2}}));
  ASSERT_TRUE(state_.Reserve(Claim("q", "one"), A("n1", kGpu, {0})).ok());
  ASSERT_TRUE(state_.Reserve(Claim("q", "t"), A("n1", kTs, {0})).ok());
  ASSERT_TRUE(state_.Reserve(Claim("b", "t"), A("n1", kTs, {1})).ok());
  ASSERT_TRUE(state_.Reserve(Claim("b", "full"), A("n1", kSolo, {0}, 2)).ok());
  ASSERT_TRUE(state_.Reserve(Claim("b", "s"), A("n1", kMps, {1}, 3)).ok());

  struct Case {
    std::string name;
    PodClaim claim;
    Assignment a;
    std::string reason;
  };
  const std::vector<Case> cases = {
      {"unknown node", Claim("a", "x"), A("nope", kGpu, {0}), "node nope unknown"},
      {"unknown node first", Claim("a", "x"), A("nope", kGpu, {99}, 7), "unknown"},
      {"offering not on node", Claim("a", "x"), A("n2", kMig, {0}), "not on node"},
      {"bad offering id", Claim("a", "x"), Assignment{"n1", 99, {0}, 1}, "not in the catalog"},
      {"unusable", Claim("a", "x"), A("n2", kGpu, {0}), "unusable on node n2: offering is time-sliced"},
      {"unusable before range", Claim("a", "x"), A("n2", kGpu, {42}), "unusable"},
      {"no units", Claim("a", "x"), A("n1", kGpu, {}), "no unit"},
      {"out of range", Claim("a", "x"), A("n1", kGpu, {4}), "out of range"},
      {"negative", Claim("a", "x"), A("n1", kGpu, {-1}), "out of range"},
      {"duplicate", Claim("a", "x"), A("n1", kGpu, {1, 1}), "sorted and distinct"},
      {"unsorted", Claim("a", "x"), A("n1", kGpu, {2, 1}), "sorted and distinct"},
      {"draining", Claim("a", "x"), A("n3", kGpu, {2}), "draining"},
      {"draining before amount", Claim("a", "x"), A("n3", kGpu, {2}, 5), "draining"},
      {"exclusive amount", Claim("a", "x"), A("n1", kGpu, {1}, 2), "amount 1"},
      {"ticket amount", Claim("a", "x"), A("n1", kTs, {1}, 2), "one ticket of one unit"},
      {"ticket units", Claim("a", "x"), A("n1", kTs, {0, 1}), "one ticket of one unit"},
      {"mps units", Claim("a", "x"), A("n1", kMps, {0, 1}), "one unit"},
      {"mps amount", Claim("a", "x"), A("n1", kMps, {0}, 5), "outside 1..4"},
      {"mps zero", Claim("a", "x"), A("n1", kMps, {0}, 0), "outside 1..4"},
      {"amount before capacity", Claim("a", "x"), A("n1", kGpu, {0}, 2), "amount 1"},
      {"no capacity", Claim("a", "x"), A("n1", kGpu, {0}), "not enough free capacity on unit n1/nvidia.com/gpu/0"},
      {"no shares", Claim("a", "x"), A("n1", kMps, {1}, 2), "not enough free capacity"},
      {"capacity before owner", Claim("a", "x"), A("n1", kSolo, {0}, 1), "not enough free capacity"},
      {"owned ticket", Claim("a", "x"), A("n1", kTs, {1}), "owned by another project"},
      {"owned by new project", Claim("new", "x"), A("n1", kTs, {0}), "owned by another project"},
      {"exclusive quota", Claim("q", "x"), A("n1", kGpu, {1}), "quota of project q for nvidia.com/gpu exceeded"},
      {"ts quota", Claim("q", "x"), A("n1", kTs, {2}), "quota"},
      {"mps quota", Claim("q", "x"), A("n1", kMps, {0}, 3), "quota"},
      {"empty key", PodClaim{}, A("n1", kGpu, {1}), "pod key is empty"},
  };
  const std::string before = Dump(state_);
  const AuditReport audit_before = state_.Audit();
  const size_t projects_before = state_.project_count();
  for (const Case& c : cases) {
    absl::Status s = state_.Reserve(c.claim, c.a);
    EXPECT_FALSE(s.ok()) << c.name;
    if (c.claim.key.empty()) {
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.name;
    } else {
      EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << c.name << ": " << s;
    }
    EXPECT_THAT(s.message(), HasSubstr(c.reason)) << c.name;
    EXPECT_EQ(Dump(state_), before) << c.name;
    EXPECT_EQ(state_.project_count(), projects_before) << c.name << ": failed reserve interned";
    EXPECT_EQ(state_.FindPod(c.claim.key), nullptr) << c.name;
  }
  const AuditReport audit_after = state_.Audit();
  EXPECT_EQ(audit_after.problems, audit_before.problems);
  EXPECT_THAT(audit_after.problems, IsEmpty());

  // The quota counts whole time-sliced slices, not the tickets used: q's own slice (all 4 of
  // its tickets charged) still has room.
  EXPECT_TRUE(state_.Reserve(Claim("q", "t2"), A("n1", kTs, {0})).ok());
  EXPECT_TRUE(state_.Reserve(Claim("q", "m"), A("n1", kMps, {0}, 2)).ok());
  ExpectClean();
}

TEST_F(ClusterStateTest, SingleProjectMpsRejectsSecondProjectButNotSameProject) {
  ASSERT_TRUE(state_.ApplyNode(Node("n1", {{kSolo, 4}})));  // 2 units x 2 shares
  ASSERT_TRUE(state_.Reserve(Claim("a", "p1"), A("n1", kSolo, {0}, 1)).ok());
  absl::Status s = state_.Reserve(Claim("b", "p2"), A("n1", kSolo, {0}, 1));
  EXPECT_THAT(s.message(), HasSubstr("owned by another project"));
  EXPECT_TRUE(state_.Reserve(Claim("a", "p3"), A("n1", kSolo, {0}, 1)).ok());
  EXPECT_EQ(U("n1", kSolo, 0).owner, state_.FindProject("a"));
  ExpectClean();
}

TEST_F(ClusterStateTest, ReserveUsesClaimProjectOrNamespaceProject) {
  AddStandardNode("n1");
  state_.ApplyNamespace(NamespaceObject{"ns1", {{"gpu.themelio.io/project", "alpha"}}});
  PodClaim c = Claim("ns1", "p");
  c.project = "";
  ASSERT_TRUE(state_.Reserve(c, A("n1", kGpu, {0})).ok());
  EXPECT_EQ(state_.project(state_.FindPod("ns1/p")->project).name, "alpha");
  ASSERT_TRUE(state_.Reserve(Claim("ns1", "q", "beta"), A("n1", kGpu, {1})).ok());
  EXPECT_EQ(state_.project(state_.FindPod("ns1/q")->project).name, "beta");
}

TEST_F(ClusterStateTest, ConfirmAndRelease) {
  AddStandardNode("n1");
  EXPECT_EQ(state_.Confirm(Uid("a", "p")).code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(state_.Reserve(Claim("a", "p"), A("n1", kGpu, {0})).ok());
  EXPECT_TRUE(state_.Confirm(Uid("a", "p")).ok());
  EXPECT_EQ(state_.FindPod("a/p")->source, HoldingSource::kConfirmed);
  EXPECT_TRUE(state_.Confirm(Uid("a", "p")).ok()) << "confirming twice is harmless";
  EXPECT_TRUE(state_.Release(Uid("a", "p")));
  EXPECT_EQ(U("n1", kGpu, 0).Free(), 1);
  EXPECT_EQ(UsageOf("a", kGpu), 0);
  EXPECT_EQ(state_.Confirm(Uid("a", "p")).code(), absl::StatusCode::kNotFound);
  ExpectClean();
}

// ---------------------------------------------------------------------------------------------
// Pods from the API server

PodObject Annotated(PodObject p, const Assignment& a, const Catalog& catalog,
                    const std::string& project) {
  for (auto& [k, v] : AssignmentAnnotations(a, catalog, project)) p.annotations[k] = v;
  return p;
}

TEST_F(ClusterStateTest, BoundPodWithAnnotationIsConfirmedHolder) {
  AddStandardNode("n1");
  state_.ApplyPod(Annotated(Pod("a", "p", "n1", kTs), A("n1", kTs, {1}), *catalog_, "a"));
  const PodRecord* rec = state_.FindPod("a/p");
  ASSERT_NE(rec, nullptr);
  EXPECT_EQ(rec->source, HoldingSource::kConfirmed);
  EXPECT_EQ(rec->assignment, A("n1", kTs, {1}));
  EXPECT_EQ(rec->uid, "a-p-uid");
  EXPECT_EQ(U("n1", kTs, 1).used, 1);
  EXPECT_EQ(UsageOf("a", kTs), 4) << "one ticket used, the slice's 4 charged";
  ExpectClean();
}

TEST_F(ClusterStateTest, ReservationBecomesConfirmedWhenTheBoundPodArrives) {
  AddStandardNode("n1");
  ASSERT_TRUE(state_.Reserve(Claim("a", "p"), A("n1", kGpu, {2})).ok());
  // Pending pod events while the bind is in flight keep the reservation.
  state_.ApplyPod(Pod("a", "p", "", kGpu));
  ASSERT_NE(state_.FindPod("a/p"), nullptr);
  EXPECT_EQ(state_.FindPod("a/p")->source, HoldingSource::kReserved);
  const std::string reserved = Dump(state_);
  state_.ApplyPod(Annotated(Pod("a", "p", "n1", kGpu), A("n1", kGpu, {2}), *catalog_, "a"));
  EXPECT_EQ(state_.FindPod("a/p")->source, HoldingSource::kConfirmed);
  EXPECT_EQ(U("n1", kGpu, 2).holders.size(), 1u);
  EXPECT_EQ(UsageOf("a", kGpu), 1);
  ExpectClean();
  // A bound pod with a different assignment moves the holding (the API is the truth).
  state_.ApplyPod(Annotated(Pod("a", "p", "n1", kGpu), A("n1", kGpu, {0, 1}), *catalog_, "a"));
  EXPECT_EQ(U("n1", kGpu, 2).holders.size(), 0u);
  EXPECT_EQ(U("n1", kGpu, 0).holders.size(), 1u);
  EXPECT_EQ(U("n1", kGpu, 1).holders.size(), 1u);
  EXPECT_EQ(UsageOf("a", kGpu), 2);
  ExpectClean();
}

TEST_F(ClusterStateTest, PendingTerminalAndTerminatingPodsHoldNothing) {
  AddStandardNode("n1");
  state_.ApplyPod(Pod("a", "pending", "", kGpu));
  EXPECT_EQ(state_.FindPod("a/pending"), nullptr) << "pending without reservation: nothing";

  // Terminal pods release whatever they held.
  state_.ApplyPod(Annotated(Pod("a", "done", "n1", kGpu), A("n1", kGpu, {0}), *catalog_, "a"));
  ASSERT_NE(state_.FindPod("a/done"), nullptr);
  PodObject done = Annotated(Pod("a", "done", "n1", kGpu), A("n1", kGpu, {0}), *catalog_, "a");
  done.phase = "Succeeded";
  state_.ApplyPod(done);
  EXPECT_EQ(state_.FindPod("a/done"), nullptr);
  EXPECT_EQ(U("n1", kGpu, 0).Free(), 1);
  PodObject failed = Pod("a", "f", "n1", kGpu);
  failed.phase = "Failed";
  state_.ApplyPod(failed);
  EXPECT_EQ(state_.FindPod("a/f"), nullptr);

  // A reservation whose pod is deleted before binding (terminating, unbound) is released.
  ASSERT_TRUE(state_.Reserve(Claim("a", "gone"), A("n1", kGpu, {1})).ok());
  PodObject gone = Pod("a", "gone", "", kGpu);
  gone.terminating = true;
  state_.ApplyPod(gone);
  EXPECT_EQ(state_.FindPod("a/gone"), nullptr);

  // A bound terminating pod still runs: it keeps its units.
  PodObject stopping = Annotated(Pod("a", "stopping", "n1", kGpu), A("n1", kGpu, {2}), *catalog_, "a");
  stopping.terminating = true;
  state_.ApplyPod(stopping);
  EXPECT_NE(state_.FindPod("a/stopping"), nullptr);

  state_.RemovePod(Uid("a", "stopping"), "a/stopping");
  EXPECT_EQ(state_.FindPod("a/stopping"), nullptr);
  EXPECT_EQ(UsageOf("a", kGpu), 0);
  ExpectClean();
}

// A pod recreated with the same namespace/name (a StatefulSet's notebook) and a new UID is
// another pod: not a retried bind of the old one. It takes its own ticket, and the old pod's
// deletion (by its UID) leaves the new pod's ticket held (issue 12, finding 2).
TEST_F(ClusterStateTest, RecreatedPodIsAnotherPodByUid) {
  // One time-sliced unit with 2 tickets.
  ASSERT_TRUE(state_.ApplyNode(Node("n1", {{kTs, 2}}, {{"nvidia.com/mig-1g.5gb.replicas", "2"}})));
  state_.ApplyNamespace(NamespaceObject{"a", {}});
  // The old pod runs on the unit (the watch still shows it).
  state_.ApplyPod(Annotated(Pod("a", "nb-0", "n1", kTs), A("n1", kTs, {0}), *catalog_, "a"));
  // The recreated pod is bound onto the same unit, the project's own.
  PodClaim again = Claim("a", "nb-0");
  again.uid = "nb-0-second-uid";
  ASSERT_TRUE(state_.Reserve(again, A("n1", kTs, {0})).ok());
  EXPECT_EQ(U("n1", kTs, 0).used, 2) << "the new pod holds its own ticket";
  EXPECT_EQ(U("n1", kTs, 0).holders.size(), 2u);
  EXPECT_THAT(state_.Reserve(Claim("a", "other"), A("n1", kTs, {0})).message(),
              HasSubstr("not enough free capacity"))
      << "the unit is full: no third holder";
  EXPECT_EQ(state_.FindPod("a/nb-0")->uid, "nb-0-second-uid") << "the latest pod of the name";
  ExpectClean();

  // The old pod's DELETED event carries its UID: only its ticket is freed.
  state_.RemovePod(Uid("a", "nb-0"), "a/nb-0");
  ASSERT_NE(state_.FindPodByUid("nb-0-second-uid"), nullptr);
  EXPECT_EQ(state_.FindPodByUid(Uid("a", "nb-0")), nullptr);
  EXPECT_EQ(U("n1", kTs, 0).used, 1);
  // A deletion of another UID, or without one, removes nothing of it.
  state_.RemovePod("some-other-uid", "a/nb-0");
  state_.RemovePod("", "a/nb-0");
  EXPECT_EQ(U("n1", kTs, 0).used, 1);
  // The same UID retried onto the same assignment is the same pod (idempotent).
  EXPECT_TRUE(state_.Reserve(again, A("n1", kTs, {0})).ok());
  EXPECT_EQ(U("n1", kTs, 0).used, 1);
  // A third pod of the name, shown pending, leaves the second one's record alone.
  PodObject third = Pod("a", "nb-0", "", kTs);
  third.uid = "nb-0-third-uid";
  state_.ApplyPod(third);
  EXPECT_NE(state_.FindPodByUid("nb-0-second-uid"), nullptr);
  ExpectClean();
}

TEST_F(ClusterStateTest, PodsWithoutCatalogResourcesAreIgnored) {
  AddStandardNode("n1");
  PodObject cpu = Pod("a", "web", "n1");
  cpu.containers[0].requests_milli["cpu"] = 500;
  state_.ApplyPod(cpu);
  state_.ApplyPod(Pod("a", "zero", "n1", kGpu, 0));
  PodObject other = Pod("a", "fpga", "n1", "example.com/fpga", 1);
  state_.ApplyPod(other);
  EXPECT_TRUE(state_.pods().empty());
  EXPECT_EQ(state_.FindProject("a"), kNoProject) << "ignored pods intern nothing";
}

TEST_F(ClusterStateTest, UnannotatedBoundPodsAreChargedConservatively) {
  AddStandardNode("n1");
  ASSERT_TRUE(state_.Reserve(Claim("a", "r"), A("n1", kGpu, {0})).ok());
  // Exclusive: n free units, lowest index first.
  state_.ApplyPod(Pod("x", "e", "n1", kGpu, 2));
  const PodRecord* e = state_.FindPod("x/e");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->source, HoldingSource::kCharged);
  EXPECT_EQ(e->assignment.units, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(UsageOf("x", kGpu), 2);

  // Time-sliced: one whole free unit, fully used, owned by the pod's project.
  ASSERT_TRUE(state_.Reserve(Claim("a", "t"), A("n1", kTs, {0})).ok());
  state_.ApplyPod(Pod("x", "t", "n1", kTs));
  const PodRecord* t = state_.FindPod("x/t");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->assignment.units, std::vector<int32_t>{1});
  EXPECT_EQ(t->assignment.amount_per_unit, 4);
  EXPECT_EQ(U("n1", kTs, 1).used, 4);
  EXPECT_EQ(U("n1", kTs, 1).owner, state_.FindProject("x"));
  EXPECT_EQ(UsageOf("x", kTs), 4);
  absl::Status s = state_.Reserve(Claim("x", "t2"), A("n1", kTs, {1}));
  EXPECT_THAT(s.message(), HasSubstr("not enough free capacity")) << "nobody shares an unknown slice";

  // MPS: one whole unit too.
  state_.ApplyPod(Pod("x", "m", "n1", kMps, 1));
  EXPECT_EQ(state_.FindPod("x/m")->assignment.units, std::vector<int32_t>{0});
  EXPECT_EQ(U("n1", kMps, 0).used, 4);
  EXPECT_EQ(UsageOf("x", kMps), 4);

  // Status updates do not move the charge.
  const std::string before = Dump(state_);
  PodObject again = Pod("x", "e", "n1", kGpu, 2);
  again.resource_version = "2";
  state_.ApplyPod(again);
  state_.ApplyPod(Pod("x", "t", "n1", kTs));
  EXPECT_EQ(Dump(state_), before);
  ExpectClean();

  // Malformed annotations are treated as none.
  PodObject bad = Pod("y", "bad", "n1", kGpu, 1);
  bad.annotations[std::string(kAnnotationUnit)] = "n1/nvidia.com/gpu/01";
  state_.ApplyPod(bad);
  EXPECT_EQ(state_.FindPod("y/bad")->source, HoldingSource::kCharged);
  EXPECT_EQ(state_.FindPod("y/bad")->assignment.units, std::vector<int32_t>{3});
  PodObject elsewhere = Pod("y", "elsewhere", "n1", kMig, 1);
  elsewhere.annotations[std::string(kAnnotationUnit)] = "n2/nvidia.com/mig-1g.5gb/0";
  state_.ApplyPod(elsewhere);
  EXPECT_EQ(state_.FindPod("y/elsewhere")->source, HoldingSource::kCharged);
  EXPECT_EQ(state_.FindPod("y/elsewhere")->assignment.node, "n1");
  ExpectClean();
}

TEST_F(ClusterStateTest, ChargeUsesKubeSchedulerEffectiveRequest) {
  AddStandardNode("n1");
  PodObject p = Pod("x", "init", "n1");
  ContainerResources c1{"a", {{kGpu, 1000}}, {}};
  ContainerResources c2{"b", {}, {{kGpu, 1000}}};  // limit only: counts as request
  ContainerResources i1{"i", {{kGpu, 3000}}, {}};
  p.containers = {c1, c2};
  p.init_containers = {i1};
  state_.ApplyPod(p);
  EXPECT_EQ(state_.FindPod("x/init")->assignment.units, (std::vector<int32_t>{0, 1, 2}))
      << "max(sum 2, init max 3)";
  // An alias counts for its offering.
  PodObject alias = Pod("x", "alias", "n1", "nvidia.com/gpu-a100", 1);
  state_.ApplyPod(alias);
  EXPECT_EQ(state_.FindPod("x/alias")->assignment.offering, Id(kA100));
}

TEST_F(ClusterStateTest, ChargeCountsASidecarsUnitsBesideTheAppContainers) {
  AddStandardNode("n1");
  PodObject p = Pod("x", "sidecar", "n1");
  ContainerResources app{"a", {{kGpu, 1000}}, {}};
  ContainerResources setup{"setup", {{kGpu, 1000}}, {}};
  ContainerResources proxy{"proxy", {{kGpu, 1000}}, {}};
  proxy.restartable = true;
  p.containers = {app};
  p.init_containers = {setup, proxy};
  state_.ApplyPod(p);
  EXPECT_EQ(state_.FindPod("x/sidecar")->assignment.units.size(), 2u)
      << "app 1 + sidecar 1; setup's GPU is reused";
}

TEST_F(ClusterStateTest, ChargeBeyondFreeCapacityIsChargedAndAudited) {
  ASSERT_TRUE(state_.ApplyNode(Node("n1", {{kGpu, 2}})));
  ASSERT_TRUE(state_.Reserve(Claim("a", "r"), A("n1", kGpu, {0, 1})).ok());
  state_.ApplyPod(Pod("x", "intruder", "n1", kGpu, 1));
  const PodRecord* rec = state_.FindPod("x/intruder");
  ASSERT_NE(rec, nullptr);
  EXPECT_EQ(rec->assignment.units.size(), 1u);
  AuditReport r = state_.Audit();
  EXPECT_EQ(r.oversubscribed_units, 1);
  EXPECT_EQ(r.multi_owner_units, 1);
  ASSERT_FALSE(r.problems.empty());
  EXPECT_THAT(absl::StrJoin(r.problems, "\n"), HasSubstr("x/intruder"));
  // Our reservation fails (bind error): the unit stays charged to the intruder, not free.
  EXPECT_TRUE(state_.Release(Uid("a", "r")));
  EXPECT_EQ(Offer("n1", kGpu).units[0].Free() + Offer("n1", kGpu).units[1].Free(), 1);
  ExpectClean();
}

TEST_F(ClusterStateTest, FactsOnUnknownNodesAreKeptAsDrainingUntilTheNodeArrives) {
  state_.ApplyPod(Annotated(Pod("a", "p", "late", kTs), A("late", kTs, {2}), *catalog_, "a"));
  state_.ApplyPod(Pod("a", "c", "late", kGpu, 2));
  const NodeState* n = state_.FindNode("late");
  ASSERT_NE(n, nullptr);
  EXPECT_TRUE(n->removed);
  EXPECT_TRUE(U("late", kTs, 2).draining);
  EXPECT_EQ(U("late", kTs, 2).used, 1);
  EXPECT_EQ(state_.FindPod("a/c")->assignment.units, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(UsageOf("a", kGpu), 2);
  ExpectClean();
  absl::Status s = state_.Reserve(Claim("a", "q"), A("late", kTs, {2}));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);

  ASSERT_TRUE(state_.ApplyNode(Node("late", {{kTs, 16}, {kGpu, 4}})));
  EXPECT_FALSE(state_.FindNode("late")->removed);
  EXPECT_FALSE(U("late", kTs, 2).draining);
  EXPECT_EQ(U("late", kTs, 2).Free(), 3);
  EXPECT_EQ(U("late", kGpu, 1).holders.at(0).pod_id, Uid("a", "c"));
  EXPECT_TRUE(state_.Reserve(Claim("a", "q"), A("late", kTs, {2})).ok());
  ExpectClean();
}

TEST_F(ClusterStateTest, ApiFactsThatBreakTheRulesAreRecordedAndAudited) {
  ASSERT_TRUE(state_.ApplyNode(Node("n1", {{kGpu, 2}, {kTs, 4}})));
  state_.ApplyQuota(QuotaObj("a", "q", {{"requests.nvidia.com/gpu", 1}}));
  state_.ApplyPod(Annotated(Pod("a", "p1", "n1", kGpu), A("n1", kGpu, {0}), *catalog_, "a"));
  state_.ApplyPod(Annotated(Pod("b", "p2", "n1", kGpu), A("n1", kGpu, {0}), *catalog_, "b"));
  state_.ApplyPod(Annotated(Pod("a", "p3", "n1", kGpu), A("n1", kGpu, {1}), *catalog_, "a"));
  state_.ApplyPod(Annotated(Pod("a", "t1", "n1", kTs), A("n1", kTs, {0}), *catalog_, "a"));
  state_.ApplyPod(Annotated(Pod("b", "t2", "n1", kTs), A("n1", kTs, {0}), *catalog_, "b"));
  EXPECT_EQ(U("n1", kGpu, 0).used, 2) << "recorded although over capacity";
  EXPECT_EQ(U("n1", kGpu, 0).Free(), 0);
  AuditReport r = state_.Audit();
  EXPECT_EQ(r.oversubscribed_units, 1);
  EXPECT_EQ(r.multi_owner_units, 2);  // gpu/0 (a,b) and the time-sliced unit (a,b)
  EXPECT_EQ(r.over_quota_projects, 1);
  const std::string all = absl::StrJoin(r.problems, "\n");
  EXPECT_THAT(all, HasSubstr("unit n1/nvidia.com/gpu/0 oversubscribed"));
  EXPECT_THAT(all, HasSubstr("unit n1/nvidia.com/mig-1g.5gb.shared/0 has holders of 2 projects"));
  EXPECT_THAT(all, HasSubstr("project a holds 2 of nvidia.com/gpu, over its quota 1"));
  // Releasing the facts clears the report.
  state_.RemovePod(Uid("b", "p2"), "b/p2");
  state_.RemovePod(Uid("b", "t2"), "b/t2");
  state_.RemovePod(Uid("a", "p3"), "a/p3");
  ExpectClean();
}

TEST_F(ClusterStateTest, AuditProblemsAreCapped) {
  ASSERT_TRUE(state_.ApplyNode(Node("n1", {{kGpu, 300}})));
  for (int i = 0; i < 300; ++i) {
    for (const char* ns : {"a", "b"}) {
      state_.ApplyPod(Annotated(Pod(ns, absl::StrCat("p", i), "n1", kGpu), A("n1", kGpu, {i}),
                                *catalog_, ns));
    }
  }
  AuditReport r = state_.Audit();
  EXPECT_EQ(r.oversubscribed_units, 300);
  EXPECT_EQ(r.multi_owner_units, 300);
  EXPECT_EQ(r.problems.size(), 100u);
}

// ---------------------------------------------------------------------------------------------
// Projects and quotas

TEST_F(ClusterStateTest, ProjectOfNamespaceIsLabelElseName) {
  EXPECT_EQ(state_.ProjectOfNamespace("team-x"), "team-x");
  state_.ApplyNamespace(NamespaceObject{"team-x", {{"gpu.themelio.io/project", "proj"}}});
  EXPECT_EQ(state_.ProjectOfNamespace("team-x"), "proj");
  state_.ApplyNamespace(NamespaceObject{"team-y", {{"gpu.themelio.io/project", ""}}});
  EXPECT_EQ(state_.ProjectOfNamespace("team-y"), "team-y") << "empty label value";
  state_.RemoveNamespace("team-x");
  EXPECT_EQ(state_.ProjectOfNamespace("team-x"), "team-x");

  MirrorOptions o;
  o.project_label = "example.com/tenant";
  ClusterState other(catalog_, o);
  other.ApplyNamespace(NamespaceObject{"ns", {{"example.com/tenant", "t"}, {"gpu.themelio.io/project", "p"}}});
  EXPECT_EQ(other.ProjectOfNamespace("ns"), "t");
}

TEST_F(ClusterStateTest, PodProjectIsFixedWhenFirstRecorded) {
  AddStandardNode("n1");
  state_.ApplyNamespace(NamespaceObject{"ns", {{"gpu.themelio.io/project", "old"}}});
  state_.ApplyPod(Annotated(Pod("ns", "p", "n1", kGpu), A("n1", kGpu, {0}), *catalog_, "old"));
  state_.ApplyNamespace(NamespaceObject{"ns", {{"gpu.themelio.io/project", "new"}}});
  state_.ApplyPod(Annotated(Pod("ns", "p", "n1", kGpu), A("n1", kGpu, {0}), *catalog_, "old"));
  state_.ApplyPod(Annotated(Pod("ns", "q", "n1", kGpu), A("n1", kGpu, {1}), *catalog_, "new"));
  EXPECT_EQ(state_.project(state_.FindPod("ns/p")->project).name, "old");
  EXPECT_EQ(state_.project(state_.FindPod("ns/q")->project).name, "new");
  EXPECT_EQ(UsageOf("old", kGpu), 1);
  EXPECT_EQ(UsageOf("new", kGpu), 1);
  ExpectClean();
}

// The project an annotated pod was charged to is the one its gpu.themelio.io/project
// annotation records: a relist or a restart (a fresh state from the API's objects) reads it
// back instead of re-deriving it from the namespace's current label, so a relabelled namespace
// moves new pods only (issue 12, finding 3).
TEST_F(ClusterStateTest, ProjectAnnotationIsAuthoritativeForBoundPodsAcrossRestarts) {
  // Two namespaces of project "shared" hold tickets of one time-sliced unit (legal: one owner).
  ObjectBatch batch;
  batch.nodes.push_back(Node("n1", {{kTs, 4}}));  // 1 unit x 4 tickets
  batch.namespaces.push_back(NamespaceObject{"ns1", {{"gpu.themelio.io/project", "shared"}}});
  batch.namespaces.push_back(NamespaceObject{"ns2", {{"gpu.themelio.io/project", "shared"}}});
  batch.quotas.push_back(QuotaObj("ns2", "q", {{"requests.nvidia.com/mig-1g.5gb.shared", 4}}));
  batch.pods.push_back(Annotated(Pod("ns1", "a", "n1", kTs), A("n1", kTs, {0}), *catalog_, "shared"));
  batch.pods.push_back(Annotated(Pod("ns2", "b", "n1", kTs), A("n1", kTs, {0}), *catalog_, "shared"));
  // Then ns2 is relabelled to project "other", and the extender restarts (or relists).
  batch.namespaces[1].labels["gpu.themelio.io/project"] = "other";
  ClusterState restarted(catalog_, MirrorOptions{});
  restarted.ApplyBatch(batch);
  const PodRecord* b = restarted.FindPod("ns2/b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(restarted.project(b->project).name, "shared") << "the annotation, not the label";
  const AuditReport audit = restarted.Audit();
  EXPECT_EQ(audit.multi_owner_units, 0) << absl::StrJoin(audit.problems, "; ");
  EXPECT_THAT(audit.problems, IsEmpty());
  EXPECT_EQ(restarted.Usage(restarted.FindProject("shared"), Id(kTs)), 4) << "one slice";
  EXPECT_EQ(restarted.Usage(restarted.FindProject("other"), Id(kTs)), 0)
      << "the relabel moved the quota, not the running pods' usage";
  // A new pod of ns2 is the new project's: it may not join "shared"'s unit.
  EXPECT_THAT(restarted.Reserve(PodClaim{"ns2/c", "ns2-c-uid", "ns2", ""}, A("n1", kTs, {0})).message(),
              HasSubstr("owned by another project"));

  // The same through the watch: an annotated pod first seen after the relabel.
  state_.ApplyBatch(batch);
  state_.ApplyPod(Annotated(Pod("ns2", "late", "n1", kTs), A("n1", kTs, {0}), *catalog_, "shared"));
  EXPECT_EQ(state_.project(state_.FindPod("ns2/late")->project).name, "shared");
  // An annotation that is not a project name is ignored: the namespace's project counts.
  PodObject odd = Annotated(Pod("ns1", "odd", "n1", kTs), A("n1", kTs, {0}), *catalog_, "shared");
  odd.annotations["gpu.themelio.io/project"] = std::string("bad\x01name");
  state_.ApplyPod(odd);
  EXPECT_EQ(state_.project(state_.FindPod("ns1/odd")->project).name, "shared");
  ExpectClean();
}

// Issue 12: a time-sliced slice has the tickets its node gives it (`<resource>.replicas`),
// which may disagree with the catalog's replicas (4 here). The quota (hard, in tickets) buys
// whole slices with their real ticket count: a new slice while the project's slices hold
// fewer tickets than its quota. With the catalog's count the project on 2-ticket slices got
// one slice (2 pods for a quota of 4), and on 8-ticket slices two (16 for a quota of 5).
TEST_F(ClusterStateTest, TimeSlicedQuotaCountsEachSlicesRealTickets) {
  ASSERT_TRUE(state_.ApplyNode(
      Node("small", {{kTs, 6}}, {{"nvidia.com/mig-1g.5gb.replicas", "2"}})));  // 3 x 2 tickets
  ASSERT_TRUE(state_.ApplyNode(
      Node("big", {{kTs, 16}}, {{"nvidia.com/mig-1g.5gb.replicas", "8"}})));  // 2 x 8 tickets
  ASSERT_EQ(U("small", kTs, 0).capacity, 2);
  ASSERT_EQ(U("big", kTs, 0).capacity, 8);
  state_.ApplyQuota(QuotaObj("a", "q", {{"requests.nvidia.com/mig-1g.5gb.shared", 4}}));
  state_.ApplyQuota(QuotaObj("b", "q", {{"requests.nvidia.com/mig-1g.5gb.shared", 5}}));

  ASSERT_TRUE(state_.Reserve(Claim("a", "t1"), A("small", kTs, {0})).ok());
  ASSERT_TRUE(state_.Reserve(Claim("a", "t2"), A("small", kTs, {0})).ok());
  EXPECT_EQ(UsageOf("a", kTs), 2) << "one slice of 2 tickets";
  absl::Status second = state_.Reserve(Claim("a", "t3"), A("small", kTs, {1}));
  EXPECT_TRUE(second.ok()) << "2 tickets owned < quota 4: a second slice: " << second;
  EXPECT_EQ(UsageOf("a", kTs), 4);
  absl::Status third = state_.Reserve(Claim("a", "t4"), A("small", kTs, {2}));
  EXPECT_THAT(third.message(),
              HasSubstr("quota of project a for nvidia.com/mig-1g.5gb.shared exceeded (its "
                        "slices hold 4 tickets, quota 4 tickets: no new slice)"));
  EXPECT_TRUE(state_.Reserve(Claim("a", "t4"), A("small", kTs, {1})).ok())
      << "a ticket on an owned slice costs no quota";

  ASSERT_TRUE(state_.Reserve(Claim("b", "t1"), A("big", kTs, {0})).ok());
  EXPECT_EQ(UsageOf("b", kTs), 8) << "one slice of 8 tickets";
  EXPECT_THAT(state_.Reserve(Claim("b", "t2"), A("big", kTs, {1})).message(),
              HasSubstr("its slices hold 8 tickets, quota 5 tickets")) << "8 >= 5: no second";
  ExpectClean();

  // The node's label changes under held slices: the charge follows the slices' new size
  // (a fact: a holds 8 tickets then, over its quota of 4, and the audit says so).
  ASSERT_TRUE(state_.ApplyNode(
      Node("small", {{kTs, 12}}, {{"nvidia.com/mig-1g.5gb.replicas", "4"}})));
  EXPECT_EQ(UsageOf("a", kTs), 8);
  const AuditReport r = state_.Audit();
  EXPECT_EQ(r.over_quota_projects, 1) << absl::StrJoin(r.problems, "; ");
  EXPECT_EQ(r.oversubscribed_units, 0);
  EXPECT_EQ(r.stale_summaries, 0);
  EXPECT_THAT(absl::StrJoin(r.problems, "; "), HasSubstr("project a holds 8 of "));
  EXPECT_TRUE(state_.Release(Uid("a", "t3")));
  EXPECT_TRUE(state_.Release(Uid("a", "t4")));
  EXPECT_EQ(UsageOf("a", kTs), 4) << "slice 1 given back whole";
  ExpectClean();
}

TEST_F(ClusterStateTest, QuotaConversionPerSharing) {
  state_.ApplyQuota(QuotaObj("a", "gpu", {{"requests.nvidia.com/gpu", 3},
                                          {"requests.nvidia.com/mig-1g.5gb.shared", 9},
                                          {"requests.nvidia.com/gpu.mps", 6},
                                          {"requests.nvidia.com/gpu.mps-solo", 1},
                                          {"requests.cpu", 10}}));
  const ProjectId a = state_.FindProject("a");
  ASSERT_NE(a, kNoProject);
  EXPECT_EQ(state_.Quota(a, Id(kGpu)), 3) << "exclusive: units";
  EXPECT_EQ(state_.Quota(a, Id(kTs)), 9) << "time-sliced: tickets, as the hard value";
  EXPECT_EQ(state_.Quota(a, Id(kMps)), 6) << "mps: shares";
  EXPECT_EQ(state_.Quota(a, Id(kSolo)), 1);
  EXPECT_EQ(state_.Quota(a, Id(kMig)), -1) << "no entry: unlimited by default";
  EXPECT_EQ(state_.Quota(kNoProject, Id(kMig)), -1);
  // Fractions of a unit floor (Kubernetes rejects them for extended resources anyway).
  ResourceQuotaObject frac = QuotaObj("f", "q", {});
  frac.hard_milli["requests.nvidia.com/gpu"] = 2500;
  state_.ApplyQuota(frac);
  EXPECT_EQ(state_.Quota(state_.FindProject("f"), Id(kGpu)), 2);

  state_.RemoveQuota("a", "gpu");
  EXPECT_EQ(state_.Quota(a, Id(kGpu)), -1);

  MirrorOptions strict;
  strict.unlimited_without_quota = false;
  ClusterState s(catalog_, strict);
  EXPECT_EQ(s.Quota(kNoProject, Id(kGpu)), 0);
  s.ApplyQuota(QuotaObj("a", "q", {{"requests.nvidia.com/gpu", 1}}));
  EXPECT_EQ(s.Quota(s.FindProject("a"), Id(kGpu)), 1);
  EXPECT_EQ(s.Quota(s.FindProject("a"), Id(kMig)), 0);
  ASSERT_TRUE(s.ApplyNode(Node("n1", {{kMig, 7}})));
  absl::Status st = s.Reserve(Claim("a", "p"), A("n1", kMig, {0}));
  EXPECT_THAT(st.message(), HasSubstr("quota")) << "no quota entry and not unlimited";
}

TEST_F(ClusterStateTest, QuotaKeysAliasesNamespacesAndProjects) {
  // Name and alias in one object: the tightest applies.
  state_.ApplyQuota(QuotaObj("a", "q", {{"requests.nvidia.com/a100", 4},
                                        {"requests.nvidia.com/gpu-a100", 2}}));
  EXPECT_EQ(state_.Quota(state_.FindProject("a"), Id(kA100)), 2);
  // Two objects in one namespace: Kubernetes enforces both, so the tighter one.
  state_.ApplyQuota(QuotaObj("a", "q2", {{"requests.nvidia.com/gpu-a100", 1}}));
  EXPECT_EQ(state_.Quota(state_.FindProject("a"), Id(kA100)), 1);
  // Namespaces of one project add up.
  state_.ApplyNamespace(NamespaceObject{"ns1", {{"gpu.themelio.io/project", "p"}}});
  state_.ApplyNamespace(NamespaceObject{"ns2", {{"gpu.themelio.io/project", "p"}}});
  state_.ApplyQuota(QuotaObj("ns1", "q", {{"requests.nvidia.com/gpu", 2}}));
  state_.ApplyQuota(QuotaObj("ns2", "q", {{"requests.nvidia.com/gpu", 3}}));
  const ProjectId p = state_.FindProject("p");
  EXPECT_EQ(state_.Quota(p, Id(kGpu)), 5);
  // Relabelling a namespace moves its quota.
  state_.ApplyNamespace(NamespaceObject{"ns2", {}});
  EXPECT_EQ(state_.Quota(p, Id(kGpu)), 2);
  EXPECT_EQ(state_.Quota(state_.FindProject("ns2"), Id(kGpu)), 3);
  state_.RemoveNamespace("ns1");
  EXPECT_EQ(state_.Quota(p, Id(kGpu)), -1);
  EXPECT_EQ(state_.Quota(state_.FindProject("ns1"), Id(kGpu)), 2);
}

TEST_F(ClusterStateTest, CustomQuotaKeyIsRead) {
  std::vector<Offering> v(1);
  v[0].resource = "nvidia.com/gpu";
  v[0].quota_key = "requests.example.com/gpu-units";
  auto c = Catalog::FromOfferings(v);
  ASSERT_TRUE(c.ok()) << c.status();
  ClusterState s(std::make_shared<const Catalog>(*std::move(c)), MirrorOptions{});
  s.ApplyQuota(QuotaObj("a", "q", {{"requests.example.com/gpu-units", 7}}));
  EXPECT_EQ(s.Quota(s.FindProject("a"), 0), 7);
}

// ---------------------------------------------------------------------------------------------
// Rebuild from the API server

TEST_F(ClusterStateTest, StateRebuiltFromAnnotationsEqualsTheStateThatWroteThem) {
  for (const char* n : {"n1", "n2", "n3"}) AddStandardNode(n);
  for (const char* ns : {"a", "b", "c"}) state_.ApplyNamespace(NamespaceObject{ns, {}});
  state_.ApplyQuota(QuotaObj("a", "q", {{"requests.nvidia.com/gpu", 5}}));
  // Reserve a mix of pods through Reserve (the only way capacity is handed out).
  std::vector<std::pair<PodClaim, Assignment>> made;
  int k = 0;
  for (const char* node : {"n1", "n2", "n3"}) {
    for (const char* ns : {"a", "b", "c"}) {
      const std::vector<Assignment> tries = {
          A(node, kGpu, {k % 4}),      A(node, kTs, {k % 2}),   A(node, kTs, {k % 2}),
          A(node, kMps, {k % 2}, 1 + k % 3), A(node, kMig, {k % 6, k % 6 + 1}),
          A(node, kSolo, {0}, 1),
      };
      for (const Assignment& a : tries) {
        PodClaim c = Claim(ns, absl::StrCat("p", k++));
        Assignment sorted = a;
        std::sort(sorted.units.begin(), sorted.units.end());
        sorted.units.erase(std::unique(sorted.units.begin(), sorted.units.end()), sorted.units.end());
        if (state_.Reserve(c, sorted).ok()) made.push_back({c, sorted});
      }
    }
  }
  ASSERT_GT(made.size(), 20u);
  ExpectClean();

  // What the API server would hold after the binds: bound pods carrying our annotations.
  ObjectBatch batch;
  for (const char* n : {"n1", "n2", "n3"}) {
    batch.nodes.push_back(Node(n, {{kGpu, 4}, {kA100, 2}, {kMig, 7}, {kTs, 12}, {kMps, 8}, {kSolo, 2}},
                               {{"nvidia.com/a100.product", "NVIDIA-A100-SXM4-40GB"}, {kPoolLabel, "train"}}));
  }
  for (const char* ns : {"a", "b", "c"}) batch.namespaces.push_back(NamespaceObject{ns, {}});
  batch.quotas.push_back(QuotaObj("a", "q", {{"requests.nvidia.com/gpu", 5}}));
  for (const auto& [claim, a] : made) {
    const Offering& o = catalog_->Get(a.offering);
    PodObject p = Pod(claim.namespace_name, claim.key.substr(claim.key.find('/') + 1), a.node,
                      o.resource, o.sharing == Sharing::kExclusive ? static_cast<int64_t>(a.units.size())
                                                                   : a.amount_per_unit);
    batch.pods.push_back(Annotated(p, a, *catalog_, claim.project));
    ASSERT_TRUE(state_.Confirm(PodIdOf(claim.uid, claim.key)).ok());
  }
  // Pods of other kinds in the list change nothing.
  batch.pods.push_back(Pod("a", "web", "n1"));

  ClusterState rebuilt(catalog_, MirrorOptions{});
  rebuilt.ApplyBatch(batch);
  EXPECT_EQ(Dump(rebuilt), Dump(state_));
  EXPECT_THAT(rebuilt.Audit().problems, IsEmpty());
  // And every unit individually (the dump is the summary; this names the unit on failure).
  for (const auto& [name, node] : state_.nodes()) {
    const NodeState* other = rebuilt.FindNode(name);
    ASSERT_NE(other, nullptr);
    for (const NodeOffering& no : node->offerings) {
      const NodeOffering* ono = other->Find(no.offering);
      ASSERT_NE(ono, nullptr);
      ASSERT_EQ(ono->units.size(), no.units.size());
      for (size_t i = 0; i < no.units.size(); ++i) {
        EXPECT_EQ(ono->units[i].used, no.units[i].used) << name << " " << i;
        EXPECT_EQ(ono->units[i].capacity, no.units[i].capacity);
        EXPECT_EQ(ono->units[i].holders.size(), no.units[i].holders.size());
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The real objects recorded from kube-apiserver 1.26 (protocol/kube-api-1.26)

// Filter and prioritize read the per-offering summary and the per-project index instead of
// the units; they must follow every change of the units (Audit() also recounts them).
TEST_F(ClusterStateTest, SummaryAndOwnedIndexFollowEveryChange) {
  ASSERT_TRUE(state_.ApplyNode(Node("n1", {{kTs, 8}, {kGpu, 2}})));  // 2 units x 4 tickets
  const OfferingId ts = Id(kTs);
  {
    const OfferingSummary& s = Offer("n1", kTs).summary;
    EXPECT_TRUE(s.open);
    EXPECT_EQ(s.live_units, 2);
    EXPECT_EQ(s.live_capacity, 8);
    EXPECT_EQ(s.empty_units, 2);
    EXPECT_EQ(s.max_free_empty, 4);
    EXPECT_THAT(s.owned, IsEmpty());
  }
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(state_.Reserve(Claim("a", absl::StrCat("t", i)), A("n1", kTs, {0})).ok());
  }
  const ProjectId a = state_.FindProject("a");
  {
    const OfferingSummary& s = Offer("n1", kTs).summary;
    EXPECT_EQ(s.empty_units, 1);
    EXPECT_EQ(s.held_units, 1);
    ASSERT_NE(s.Owned(a), nullptr);
    EXPECT_EQ(s.Owned(a)->units, 1);
    EXPECT_EQ(s.Owned(a)->with_room, 1);
    EXPECT_EQ(s.Owned(a)->max_free, 1);
    EXPECT_EQ(state_.OwnedUnitsWithRoom(a, ts), 1);
    EXPECT_EQ(state_.FindNode("n1")->held_units, 1);
  }
  // The fourth ticket fills the unit: still owned, no room, gone from the index.
  ASSERT_TRUE(state_.Reserve(Claim("a", "t3"), A("n1", kTs, {0})).ok());
  EXPECT_EQ(Offer("n1", kTs).summary.Owned(a)->with_room, 0);
  EXPECT_EQ(state_.OwnedUnitsWithRoom(a, ts), 0);
  ASSERT_TRUE(state_.Release(Uid("a", "t1")));
  EXPECT_EQ(state_.OwnedUnitsWithRoom(a, ts), 1);
  // An exclusive GPU counts as held on the node, not as room for anyone.
  ASSERT_TRUE(state_.Reserve(Claim("b", "g"), A("n1", kGpu, {1})).ok());
  EXPECT_EQ(state_.FindNode("n1")->held_units, 2);
  EXPECT_EQ(Offer("n1", kGpu).summary.empty_units, 1);
  ExpectClean();
  // A node deleted while held: its units drain, nothing is open, the index forgets them.
  state_.RemoveNode("n1");
  EXPECT_FALSE(Offer("n1", kTs).summary.open);
  EXPECT_EQ(Offer("n1", kTs).summary.empty_units, 0);
  EXPECT_EQ(state_.OwnedUnitsWithRoom(a, ts), 0);
  ExpectClean();
  // Back again: the held unit has room for project a once more.
  ASSERT_TRUE(state_.ApplyNode(Node("n1", {{kTs, 8}, {kGpu, 2}})));
  EXPECT_EQ(state_.OwnedUnitsWithRoom(a, ts), 1);
  for (const auto& [ns, pod] : {std::pair<const char*, const char*>{"a", "t0"}, {"a", "t2"},
                                {"a", "t3"}, {"b", "g"}}) {
    ASSERT_TRUE(state_.Release(Uid(ns, pod)));
  }
  EXPECT_EQ(state_.OwnedUnitsWithRoom(a, ts), 0);
  EXPECT_EQ(state_.FindNode("n1")->held_units, 0);
  EXPECT_EQ(Offer("n1", kTs).summary.empty_units, 2);
  ExpectClean();
}

// fgd weighs the mix's demand against each pool's open capacity (ClusterState::open_units):
// the live units of the offerings that can take new holders, summed over the cluster, kept
// as nodes come, change and go (Audit() recounts it).
TEST_F(ClusterStateTest, OpenUnitsCountEachOfferingsLiveUnitsOnOpenNodes) {
  const size_t ts = static_cast<size_t>(Id(kTs)), gpu = static_cast<size_t>(Id(kGpu));
  ASSERT_EQ(state_.open_units().size(), catalog_->size());
  EXPECT_EQ(state_.open_units()[ts], 0);
  ASSERT_TRUE(state_.ApplyNode(Node("n1", {{kTs, 8}, {kGpu, 2}})));  // 2 slices x 4 tickets
  ASSERT_TRUE(state_.ApplyNode(Node("n2", {{kTs, 4}, {kGpu, 1}})));
  EXPECT_EQ(state_.open_units()[ts], 3);
  EXPECT_EQ(state_.open_units()[gpu], 3);
  // Holders do not change the capacity.
  ASSERT_TRUE(state_.Reserve(Claim("a", "t0"), A("n1", kTs, {0})).ok());
  EXPECT_EQ(state_.open_units()[ts], 3);
  // A node that advertises fewer units, and one that is deleted.
  ASSERT_TRUE(state_.ApplyNode(Node("n2", {{kTs, 4}})));
  EXPECT_EQ(state_.open_units()[gpu], 2);
  state_.RemoveNode("n1");
  EXPECT_EQ(state_.open_units()[ts], 1);
  EXPECT_EQ(state_.open_units()[gpu], 0);
  ExpectClean();
  ASSERT_TRUE(state_.ApplyNode(Node("n1", {{kTs, 8}, {kGpu, 2}})));
  EXPECT_EQ(state_.open_units()[ts], 3);
  EXPECT_EQ(state_.open_units()[gpu], 2);
  ExpectClean();
}

// The dense room tables that filters read instead of the nodes: each node's row says what its
// summary says (or why the offering is not open there), rows follow every change, and a slot
// freed by an erased node is empty again before the next node takes it.
TEST_F(ClusterStateTest, RoomRowsFollowNodesAndTheirUnits) {
  auto row = [&](const std::string& node, absl::string_view offering) {
    const NodeState* n = state_.FindNode(node);
    const uint32_t slot = n == nullptr ? ClusterState::kUnknownSlot : n->slot;
    return state_.RoomRows(Id(offering))[slot];
  };
  ASSERT_TRUE(state_.ApplyNode(Node("n1", {{kTs, 8}, {kA100, 2}},  // no pool label
                                    {{"nvidia.com/a100.product", "NVIDIA-A100-SXM4-40GB"}})));
  // The pool, but no product label: the A100 offering cannot be served as catalogued.
  ASSERT_TRUE(state_.ApplyNode(Node("n2", {{kGpu, 2}, {kA100, 2}}, {{kPoolLabel, "train"}})));
  EXPECT_NE(state_.FindNode("n1")->slot, state_.FindNode("n2")->slot);
  EXPECT_EQ(row("n1", kTs).availability, Availability::kOpen);
  EXPECT_EQ(row("n1", kTs).empty_units, 2);
  EXPECT_EQ(row("n1", kTs).max_free_empty, 4);
  EXPECT_EQ(row("n1", kA100).availability, Availability::kNotSelected);
  EXPECT_EQ(row("n1", kGpu).availability, Availability::kNotOnNode);
  EXPECT_EQ(row("n2", kTs).availability, Availability::kNotOnNode);
  EXPECT_EQ(row("n2", kA100).availability, Availability::kUnusable);
  EXPECT_EQ(row("nobody", kTs).availability, Availability::kNodeUnknown);

  ASSERT_TRUE(state_.Reserve(Claim("a", "t0"), A("n1", kTs, {0})).ok());
  const ProjectId a = state_.FindProject("a");
  EXPECT_EQ(row("n1", kTs).empty_units, 1);
  EXPECT_EQ(row("n1", kTs).max_free, 4);
  EXPECT_EQ(row("n1", kTs).low_with_room, uint64_t{1} << a);
  EXPECT_EQ(row("n1", kTs).low_owners, uint64_t{1} << a);
  EXPECT_EQ(row("n1", kTs).live_units, 2);
  // Held units anywhere on the node show in every offering's row; not on other nodes.
  EXPECT_TRUE(row("n1", kTs).node_busy);
  EXPECT_TRUE(row("n1", kA100).node_busy);
  EXPECT_FALSE(row("n2", kGpu).node_busy);
  ExpectClean();

  // Deleted while held: every row of the node says unknown; erased once released, and the
  // slot goes to the next new node with that node's rows only.
  const uint32_t n1_slot = state_.FindNode("n1")->slot;
  state_.RemoveNode("n1");
  EXPECT_EQ(row("n1", kTs).availability, Availability::kNodeUnknown);
  ExpectClean();
  ASSERT_TRUE(state_.Release(Uid("a", "t0")));
  EXPECT_EQ(state_.FindNode("n1"), nullptr);
  ExpectClean();
  ASSERT_TRUE(state_.ApplyNode(Node("n3", {{kGpu, 1}})));
  EXPECT_EQ(state_.FindNode("n3")->slot, n1_slot);
  EXPECT_EQ(row("n3", kGpu).availability, Availability::kOpen);
  EXPECT_EQ(row("n3", kTs).availability, Availability::kNotOnNode);
  EXPECT_EQ(row("n3", kTs).low_with_room, 0u);
  ExpectClean();
  // A node known only from a bound pod's annotation (its Node object not seen yet) has a
  // slot too, unknown until the object arrives.
  state_.ApplyPod(Annotated(Pod("b", "x", "n4", kGpu), A("n4", kGpu, {0}), *catalog_, "b"));
  ASSERT_NE(state_.FindNode("n4"), nullptr);
  EXPECT_EQ(row("n4", kGpu).availability, Availability::kNodeUnknown);
  ASSERT_TRUE(state_.ApplyNode(Node("n4", {{kGpu, 2}})));
  EXPECT_EQ(row("n4", kGpu).availability, Availability::kOpen);
  EXPECT_EQ(row("n4", kGpu).empty_units, 1);
  ExpectClean();
}

// The summary answers "owns a unit (with room) here" from bits for project ids below 64 and
// from the owner list above; no project may be taken for another whatever its id.
TEST_F(ClusterStateTest, OwnershipQueriesAreExactBeyondSixtyFourProjects) {
  constexpr int kNodes = 12;  // 7 time-sliced units each: 84 projects, one unit apiece
  for (int n = 0; n < kNodes; ++n) {
    ASSERT_TRUE(state_.ApplyNode(Node(absl::StrCat("n", n), {{kTs, 28}})));
  }
  for (int p = 0; p < kNodes * 7; ++p) {
    const std::string ns = absl::StrCat("p", p);
    ASSERT_TRUE(state_.Reserve(Claim(ns, "a"), A(absl::StrCat("n", p / 7), kTs, {p % 7})).ok());
  }
  // Fill every unit of node 0 but the one of its first project.
  for (int p = 1; p < 7; ++p) {
    for (int t = 0; t < 3; ++t) {
      const std::string ns = absl::StrCat("p", p);
      ASSERT_TRUE(state_.Reserve(Claim(ns, absl::StrCat("f", t)), A("n0", kTs, {p})).ok());
    }
  }
  for (int p = 0; p < kNodes * 7; ++p) {
    const ProjectId id = state_.FindProject(absl::StrCat("p", p));
    ASSERT_NE(id, kNoProject);
    for (int n = 0; n < kNodes; ++n) {
      const OfferingSummary& s = Offer(absl::StrCat("n", n), kTs).summary;
      const bool owns = n == p / 7;
      EXPECT_EQ(s.Owns(id), owns) << "project " << p << " (id " << id << ") node " << n;
      EXPECT_EQ(s.OwnsWithRoom(id), owns && !(n == 0 && p > 0)) << "project " << p;
      EXPECT_EQ(s.Owned(id) != nullptr, owns) << "project " << p;
    }
  }
  EXPECT_GE(state_.project_count(), 84u);
  ExpectClean();
}

TEST(ClusterStateRealObjects, MirrorFromRecordedApiServerLists) {
  auto catalog = std::shared_ptr<const Catalog>(&Catalog::BuiltIn(), [](const Catalog*) {});
  ClusterState state(catalog, MirrorOptions{});
  ObjectBatch all;
  for (const char* file : {"list-namespaces.json", "list-resourcequotas.json", "list-nodes.json",
                           "pod-after-binding.json"}) {
    absl::StatusOr<ObjectBatch> b = DecodeObjects(
        testing::ReadFileOrDie(testing::SharedPath(absl::StrCat("protocol/kube-api-1.26/", file))));
    ASSERT_TRUE(b.ok()) << file << ": " << b.status();
    for (auto& x : b->namespaces) all.namespaces.push_back(x);
    for (auto& x : b->quotas) all.quotas.push_back(x);
    for (auto& x : b->nodes) all.nodes.push_back(x);
    for (auto& x : b->pods) all.pods.push_back(x);
  }
  state.ApplyBatch(all);

  const Offering* ts = catalog->Find("nvidia.com/mig-1g.5gb.shared");
  ASSERT_NE(ts, nullptr);
  const NodeState* node = state.FindNode("mig-a");
  ASSERT_NE(node, nullptr);
  EXPECT_EQ(node->gpu_product, "NVIDIA-A100-SXM4-40GB");
  const NodeOffering* no = node->Find(ts->id);
  ASSERT_NE(no, nullptr);
  EXPECT_EQ(no->advertised_name, "nvidia.com/mig-1g.5gb.shared");
  EXPECT_EQ(no->advertised_units, 7) << "label nvidia.com/mig-1g.5gb.count";
  EXPECT_EQ(no->replicas, 4) << "label nvidia.com/mig-1g.5gb.replicas";
  EXPECT_EQ(no->unusable_reason, "");

  // requests.nvidia.com/mig-1g.5gb.shared: 8 tickets (two slices of the node's 4).
  const ProjectId team = state.FindProject("team-a");
  ASSERT_NE(team, kNoProject);
  EXPECT_EQ(state.Quota(team, ts->id), 8);

  const PodRecord* pod = state.FindPod("team-a/nb-0");
  ASSERT_NE(pod, nullptr);
  EXPECT_EQ(pod->source, HoldingSource::kConfirmed);
  EXPECT_EQ(pod->assignment.units, std::vector<int32_t>{0});
  EXPECT_EQ(pod->project, team);
  EXPECT_EQ(state.FindPodByUid("de697f1e-d915-473c-a8ba-f0eadff79666"), pod);
  EXPECT_EQ(no->units[0].used, 1);
  EXPECT_EQ(no->units[0].owner, team);
  EXPECT_EQ(state.Usage(team, ts->id), 4) << "the slice's 4 tickets";
  EXPECT_THAT(state.Audit().problems, IsEmpty());

  // Quota in slices: one more slice is allowed, a third is not, tickets on own slices are.
  ASSERT_TRUE(state.Reserve(PodClaim{"team-a/nb-1", "u1", "team-a", "team-a"},
                            Assignment{"mig-a", ts->id, {1}, 1}).ok());
  absl::Status third = state.Reserve(PodClaim{"team-a/nb-2", "u2", "team-a", "team-a"},
                                     Assignment{"mig-a", ts->id, {2}, 1});
  EXPECT_THAT(third.message(), HasSubstr("quota"));
  EXPECT_TRUE(state.Reserve(PodClaim{"team-a/nb-3", "u3", "team-a", "team-a"},
                            Assignment{"mig-a", ts->id, {0}, 1}).ok());
  EXPECT_THAT(state.Audit().problems, IsEmpty());
}

}  // namespace
}  // namespace gse
