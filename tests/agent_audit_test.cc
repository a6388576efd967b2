// The node agent's audit of kubelet's pod-resources against the unit annotations.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "agent/inventory.h"
#include "agent/node_audit.h"
#include "agent/unit_map.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "state/assignment.h"

namespace gse::agent {
namespace {

using ::testing::HasSubstr;

constexpr char kNode[] = "node-a";
constexpr char kShared[] = "nvidia.com/mig-1g.5gb.shared";

class NodeAuditTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto inv = ParseInventoryJson(R"({"gpus": [{"index": 0, "uuid": "GPU-0", "product": "NVIDIA A100-SXM4-40GB",
      "migEnabled": true, "migDevices": [
        {"uuid": "MIG-0", "profile": "1g.5gb", "placementStart": 0},
        {"uuid": "MIG-1", "profile": "1g.5gb", "placementStart": 1}]}]})");
    ASSERT_TRUE(inv.ok()) << inv.status();
    auto map = UnitMap::Build(*inv, Catalog::BuiltIn(), {ServedSpec{kShared, 4}});
    ASSERT_TRUE(map.ok()) << map.status();
    units_ = std::make_unique<UnitMap>(*std::move(map));
  }
  void Pod(const std::string& ns, const std::string& name, int unit, const std::string& ids,
           const std::string& allocated = "") {
    NodePod p;
    p.namespace_name = ns;
    p.name = name;
    p.node = kNode;
    p.phase = "Running";
    p.device_needs[kShared] = 1;
    if (unit >= 0) {
      p.annotations[std::string(kAnnotationUnit)] = absl::StrCat(kNode, "/", kShared, "/", unit);
      p.annotations[std::string(kAnnotationProject)] = ns;
    }
    if (!allocated.empty()) p.annotations[std::string(kAnnotationAllocated)] = allocated;
    pods_.push_back(p);
    view_.push_back(ContainerDeviceIds{ns, name, "main", kShared, {ids}});
  }
  AuditReport Run() { return AuditNode(kNode, *units_, Catalog::BuiltIn(), pods_, view_); }

  std::unique_ptr<UnitMap> units_;
  std::vector<NodePod> pods_;
  std::vector<ContainerDeviceIds> view_;
};

TEST_F(NodeAuditTest, CleanNodeConfirmsEachPodOnce) {
  Pod("team-a", "a1", 0, "MIG-0::0");
  Pod("team-a", "a2", 0, "MIG-0::1", "MIG-0::1");  // already confirmed
  Pod("team-b", "b1", 1, "MIG-1::3");
  AuditReport r = Run();
  EXPECT_EQ(r.containers_checked, 3);
  EXPECT_TRUE(r.findings.empty());
  ASSERT_EQ(r.confirmations.size(), 2u);
  EXPECT_EQ(r.confirmations[0].pod_key, "team-a/a1");
  EXPECT_EQ(r.confirmations[0].ids, "MIG-0::0");
  EXPECT_EQ(r.confirmations[1].pod_key, "team-b/b1");
}

TEST_F(NodeAuditTest, DeviceOutsideTheAnnotatedUnitIsAFinding) {
  Pod("team-a", "a1", 0, "MIG-1::0");
  AuditReport r = Run();
  ASSERT_EQ(r.findings.size(), 1u);
  EXPECT_EQ(r.findings[0].pod_key, "team-a/a1");
  EXPECT_THAT(r.findings[0].message, HasSubstr("holds MIG-1::0 (unit 1, MIG-1) but is annotated with unit(s) 0"));
  EXPECT_TRUE(r.confirmations.empty());
}

TEST_F(NodeAuditTest, UnitServingTwoProjectsIsAFindingForEachPod) {
  Pod("team-a", "a1", 0, "MIG-0::0");
  Pod("team-b", "x1", -1, "MIG-0::1");  // unannotated, another project, same slice
  AuditReport r = Run();
  int two_projects = 0;
  for (const auto& f : r.findings) {
    if (f.message.find("serves projects team-a, team-b") != std::string::npos) ++two_projects;
  }
  EXPECT_EQ(two_projects, 2);
}

TEST_F(NodeAuditTest, TicketHeldTwiceAndUnknownDevicesAreFindings) {
  Pod("team-a", "a1", 0, "MIG-0::0");
  Pod("team-a", "a2", 0, "MIG-0::0");
  Pod("team-a", "a3", 0, "GPU-elsewhere");
  AuditReport r = Run();
  int twice = 0, unknown = 0;
  for (const auto& f : r.findings) {
    twice += f.message.find("is held by 2 pods") != std::string::npos;
    unknown += f.message.find("is not a device of") != std::string::npos;
  }
  EXPECT_EQ(twice, 2);
  EXPECT_EQ(unknown, 1);
  EXPECT_TRUE(r.confirmations.empty());
}

TEST_F(NodeAuditTest, TerminatedPodsAreNotAudited) {
  Pod("team-a", "a1", 0, "MIG-1::0");
  pods_.back().phase = "Succeeded";
  AuditReport r = Run();
  EXPECT_EQ(r.containers_checked, 0);
  EXPECT_TRUE(r.findings.empty());
}

}  // namespace
}  // namespace gse::agent
