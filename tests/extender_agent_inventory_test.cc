// The extender reading the node agent's published inventory (gpu.themelio.io/inventory,
// state/agent_inventory.h, docs/agent.md "Published inventory"): each unit's UUID in
// /debug/state, unhealthy units never chosen, and an inventory that disagrees with the node's
// allocatable flagged (metric, one log line) instead of trusted.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "extender/extender_service.h"
#include "extender/metrics.h"
#include "extender/mirror_metrics.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kube/binder.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"
#include "scoring/feasibility.h"
#include "scoring/policies.h"
#include "scoring/pod_request.h"
#include "state/agent_inventory.h"
#include "state/cluster_state.h"
#include "state/k8s_objects.h"
#include "state/mirror.h"

namespace gse {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr char kGpu[] = "nvidia.com/gpu";
constexpr char kTs[] = "nvidia.com/mig-1g.5gb.shared";

std::shared_ptr<const Catalog> TestCatalog() {
  std::vector<Offering> v(2);
  v[0].resource = kGpu;
  v[1].resource = kTs;
  v[1].unit = UnitKind::kMig;
  v[1].mig_profile = "1g.5gb";
  v[1].sharing = Sharing::kTimeSliced;
  v[1].replicas = 4;
  absl::StatusOr<Catalog> c = Catalog::FromOfferings(std::move(v));
  EXPECT_TRUE(c.ok()) << c.status();
  return std::make_shared<const Catalog>(*std::move(c));
}

std::string Uuid(int i) { return absl::StrCat("MIG-0000000", i, "-aaaa-bbbb-cccc-dddddddddddd"); }

// The agent's annotation for 7 time-sliced slices (4 replicas) and 2 whole GPUs; `broken`
// slice is unhealthy (-1: none).
std::string Inventory(int broken, int replicas = 4) {
  std::vector<std::string> units;
  for (int i = 0; i < 7; ++i) {
    units.push_back(absl::StrCat(R"({"uuid":")", Uuid(i), R"(","gpu":0,"profile":"1g.5gb","placementStart":)", i,
                                 R"(,"healthy":)", i == broken ? "false" : "true", "}"));
  }
  return absl::StrCat(R"({"version":1,"resources":{")", kTs, R"(":{"sharing":"time-sliced","replicas":)", replicas,
                      R"(,"units":[)", absl::StrJoin(units, ","), R"(]},")", kGpu,
                      R"(":{"sharing":"exclusive","replicas":1,"units":[{"uuid":"GPU-1","gpu":1,"healthy":true},)",
                      R"({"uuid":"GPU-2","gpu":2,"healthy":true}]}}})");
}

// The Node: `tickets` time-sliced IDs allocatable (kubelet counts healthy devices only).
NodeObject Node(const std::string& name, int tickets, const std::optional<std::string>& inventory) {
  NodeObject n;
  n.name = name;
  n.uid = name + "-uid";
  n.allocatable_milli[kTs] = tickets * 1000;
  n.allocatable_milli[kGpu] = 2000;
  n.agent_inventory = inventory;
  return n;
}

const NodeOffering& Offer(const ClusterState& s, const std::string& node, const char* resource) {
  return *s.FindNode(node)->Find(s.catalog().Find(resource)->id);
}

// ---- the parser

TEST(PublishedInventoryTest, ReadsUuidsHealthAndReplicas) {
  absl::StatusOr<PublishedInventory> inv = ParsePublishedInventory(Inventory(3));
  ASSERT_TRUE(inv.ok()) << inv.status();
  ASSERT_EQ(inv->count(kTs), 1u);
  const PublishedOffering& ts = inv->at(kTs);
  EXPECT_EQ(ts.replicas, 4);
  ASSERT_EQ(ts.units.size(), 7u);
  EXPECT_EQ(ts.units[3].uuid, Uuid(3));
  EXPECT_FALSE(ts.units[3].healthy);
  EXPECT_TRUE(ts.units[4].healthy);
  EXPECT_EQ(inv->at(kGpu).units[1].uuid, "GPU-2");
}

TEST(PublishedInventoryTest, HostileDocumentsNameThePath) {
  auto error = [](const std::string& json) {
    absl::StatusOr<PublishedInventory> inv = ParsePublishedInventory(json);
    if (inv.ok()) return std::string("<parsed>");
    EXPECT_EQ(inv.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(inv.status().message());
  };
  EXPECT_THAT(error("{"), HasSubstr("gpu.themelio.io/inventory: "));
  EXPECT_EQ(error("[]"), "gpu.themelio.io/inventory: (document): expected an object, got an array");
  EXPECT_EQ(error(R"({"version":2,"resources":{}})"), "gpu.themelio.io/inventory: version: expected 1");
  EXPECT_EQ(error(R"({"version":1})"), "gpu.themelio.io/inventory: resources: missing");
  EXPECT_EQ(error(R"({"version":1,"resources":{"r":{"units":[]}}})"),
            R"(gpu.themelio.io/inventory: resources["r"].replicas: missing)");
  EXPECT_EQ(error(R"({"version":1,"resources":{"r":{"replicas":0,"units":[]}}})"),
            R"(gpu.themelio.io/inventory: resources["r"].replicas: expected an integer 1-1024)");
  EXPECT_EQ(error(R"({"version":1,"resources":{"r":{"replicas":1,"units":[{"healthy":true}]}}})"),
            R"(gpu.themelio.io/inventory: resources["r"].units[0].uuid: missing)");
  EXPECT_EQ(error(R"({"version":1,"resources":{"r":{"replicas":1,"units":[{"uuid":"a::1","healthy":true}]}}})"),
            R"(gpu.themelio.io/inventory: resources["r"].units[0].uuid: only printable characters other than ':' and ',')");
  EXPECT_EQ(error(R"({"version":1,"resources":{"r":{"replicas":1,"units":[{"uuid":"a","healthy":true},{"uuid":"a","healthy":true}]}}})"),
            R"(gpu.themelio.io/inventory: resources["r"].units[1].uuid: "a" appears twice)");
  EXPECT_EQ(error(R"({"version":1,"resources":{"r":{"replicas":1,"units":[{"uuid":"a","healthy":"yes"}]}}})"),
            R"(gpu.themelio.io/inventory: resources["r"].units[0].healthy: expected a boolean, got a string)");
  EXPECT_EQ(error(absl::StrCat(R"({"version":1,"resources":{"r":{"replicas":1,"units":[{"uuid":")",
                               std::string(57, 'x'), R"(","healthy":true}]}}})")),
            R"(gpu.themelio.io/inventory: resources["r"].units[0].uuid: 57 bytes, at most 56)");
  std::vector<std::string> many;
  for (size_t i = 0; i <= kMaxPublishedUnits; ++i) many.push_back(absl::StrCat(R"({"uuid":"u)", i, R"(","healthy":true})"));
  EXPECT_EQ(error(absl::StrCat(R"({"version":1,"resources":{"r":{"replicas":1,"units":[)", absl::StrJoin(many, ","), "]}}}")),
            R"(gpu.themelio.io/inventory: resources["r"].units: 1025 units, at most 1024)");
}

// ---- the mirror

class AgentInventoryTest : public ::testing::Test {
 protected:
  AgentInventoryTest() : state_(TestCatalog(), MirrorOptions{}) {}

  FitReason Filter(const std::string& ns, const std::string& node) const {
    PodObject p;
    p.namespace_name = ns;
    p.name = "candidate";
    ContainerResources c;
    c.name = "main";
    c.requests_milli[kTs] = 1000;
    p.containers.push_back(c);
    const PodRequest request = ResolvePodRequest(state_.catalog(), p, ns);
    return FilterNodes(state_, request, {state_.FindNode(node)}).fits[0].reason;
  }

  ClusterState state_;
};

TEST_F(AgentInventoryTest, AgreeingInventoryGivesEachUnitItsUuidAndHealth) {
  // Slice 3 unhealthy: kubelet advertises 6 x 4 tickets; the agent publishes all 7.
  state_.ApplyNode(Node("n1", 24, Inventory(3)));
  const NodeOffering& no = Offer(state_, "n1", kTs);
  EXPECT_THAT(no.inventory_problem, IsEmpty());
  ASSERT_EQ(no.units.size(), 7u) << "unit i is the agent's unit i, the unhealthy one included";
  ASSERT_EQ(no.unit_uuids.size(), 7u);
  EXPECT_EQ(no.unit_uuids[3], Uuid(3));
  EXPECT_TRUE(no.units[3].unhealthy);
  EXPECT_EQ(no.units[3].Free(), 0);
  EXPECT_FALSE(no.units[6].unhealthy);
  EXPECT_EQ(no.summary.empty_units, 6);
  EXPECT_EQ(Offer(state_, "n1", kGpu).unit_uuids, (std::vector<std::string>{"GPU-1", "GPU-2"}));
  EXPECT_THAT(state_.Audit().problems, IsEmpty());
}

TEST_F(AgentInventoryTest, UnhealthyUnitsAreNeverChosen) {
  state_.ApplyNode(Node("n1", 24, Inventory(3)));
  absl::StatusOr<std::unique_ptr<PlacementPolicy>> policy = MakePolicy("affinity-pack");
  ASSERT_TRUE(policy.ok());
  std::vector<int32_t> chosen;
  for (int p = 0; p < 6; ++p) {  // six projects, one slice each: every healthy slice
    const std::string ns = absl::StrCat("team-", p);
    ASSERT_EQ(Filter(ns, "n1"), FitReason::kFits) << ns;
    PodObject pod;
    pod.namespace_name = ns;
    pod.name = "nb";
    ContainerResources c;
    c.name = "main";
    c.requests_milli[kTs] = 1000;
    pod.containers.push_back(c);
    absl::StatusOr<Assignment> a =
        (*policy)->ChooseUnits(state_, ResolvePodRequest(state_.catalog(), pod, ns), *state_.FindNode("n1"));
    ASSERT_TRUE(a.ok()) << a.status();
    chosen.push_back(a->units.front());
    ASSERT_TRUE(state_.Reserve(PodClaim{ns + "/nb", ns + "-uid", ns, ns}, *a).ok());
    // The node has an agent: its gate holds other projects back until the pod is confirmed
    // (placement_agent_gate_test); here every wait simply ends.
    state_.ExpireAgentWaits(absl::InfiniteFuture(), absl::ZeroDuration());
  }
  EXPECT_THAT(chosen, ::testing::Not(::testing::Contains(3)));
  EXPECT_EQ(Filter("team-6", "n1"), FitReason::kNoFreeTicket) << "the unhealthy slice is no free unit";
  Assignment broken;
  broken.node = "n1";
  broken.offering = state_.catalog().Find(kTs)->id;
  broken.units = {3};
  const absl::Status s = state_.Reserve(PodClaim{"team-6/nb", "team-6-uid", "team-6", "team-6"}, broken);
  EXPECT_THAT(s.message(), HasSubstr("unhealthy"));
}

TEST_F(AgentInventoryTest, DisagreeingInventoryIsFlaggedNotTrusted) {
  // The agent says 7 healthy slices, allocatable says 6: one of the two is wrong.
  state_.ApplyNode(Node("n1", 24, Inventory(-1)));
  const NodeOffering& no = Offer(state_, "n1", kTs);
  EXPECT_EQ(no.inventory_problem,
            "the node agent publishes 7 unit(s) (7 healthy) x 4 replicas; allocatable and labels "
            "say 6 unit(s) x 4 replicas");
  EXPECT_THAT(no.unit_uuids, IsEmpty());
  EXPECT_EQ(no.units.size(), 6u) << "units from allocatable alone, as without an agent";
  for (const Unit& u : no.units) EXPECT_FALSE(u.unhealthy);
  // Other replicas than the node's labels: flagged too.
  state_.ApplyNode(Node("n2", 28, Inventory(-1, 8)));
  EXPECT_THAT(Offer(state_, "n2", kTs).inventory_problem, HasSubstr("x 8 replicas"));
  // An annotation that does not parse: every offering flagged, naming the annotation.
  state_.ApplyNode(Node("n3", 28, std::string(R"({"version":1,"resources":[]})")));
  EXPECT_THAT(Offer(state_, "n3", kTs).inventory_problem,
              HasSubstr("gpu.themelio.io/inventory: resources: expected an object"));
  EXPECT_THAT(Offer(state_, "n3", kGpu).inventory_problem, HasSubstr("gpu.themelio.io/inventory"));
  // Fixed by the next Node update: trusted again.
  state_.ApplyNode(Node("n1", 28, Inventory(-1)));
  EXPECT_THAT(Offer(state_, "n1", kTs).inventory_problem, IsEmpty());
  EXPECT_EQ(Offer(state_, "n1", kTs).unit_uuids.size(), 7u);
  EXPECT_THAT(state_.Audit().problems, IsEmpty());
}

// ---- what an operator sees

TEST(AgentInventoryExtenderTest, DebugStateShowsUuidsAndMetricsFlagMismatchesOnce) {
  Mirror mirror(TestCatalog(), MirrorOptions{});
  mirror.Write([](ClusterState& s) {
    s.ApplyNode(Node("good", 24, Inventory(3)));
    s.ApplyNode(Node("bad", 24, Inventory(-1)));
    return 0;
  });
  RecordOnlyBinder binder;
  ExtenderService service(&mirror, MakePolicy("affinity-pack").value(), &binder, ServiceOptions{});
  const std::string state = service.DebugStateJson();
  EXPECT_THAT(state, HasSubstr(absl::StrCat(R"("id":"good/nvidia.com/mig-1g.5gb.shared/3")")));
  EXPECT_THAT(state, HasSubstr(absl::StrCat(R"("uuid":")", Uuid(3), R"(","healthy":false)")));
  EXPECT_THAT(state, HasSubstr(absl::StrCat(R"("uuid":")", Uuid(4), R"(","healthy":true)")));
  EXPECT_THAT(state, HasSubstr(R"("inventory_problem":"the node agent publishes 7 unit(s))"));

  prometheus::Registry registry;
  std::vector<std::string> log;
  MirrorMetrics metrics(registry, &mirror, [&](const std::string& line) { log.push_back(line); });
  metrics.Refresh();
  metrics.Refresh();  // the same mismatch again: not logged twice
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(log[0],
            R"({"component":"extender","event":"agent_inventory_mismatch","node":"bad","resource":"nvidia.com/mig-1g.5gb.shared",)"
            R"("problem":"the node agent publishes 7 unit(s) (7 healthy) x 4 replicas; allocatable and labels say 6 unit(s) x 4 replicas"})"
            "\n");
  const std::string text = prometheus::TextSerializer().Serialize(registry.Collect());
  EXPECT_THAT(text, HasSubstr("gse_agent_inventory_mismatches 1\n"));

  mirror.Write([](ClusterState& s) { return s.ApplyNode(Node("bad", 28, Inventory(-1))); });
  metrics.Refresh();
  EXPECT_THAT(prometheus::TextSerializer().Serialize(registry.Collect()),
              HasSubstr("gse_agent_inventory_mismatches 0\n"));
  EXPECT_EQ(log.size(), 1u);
}

}  // namespace
}  // namespace gse
