// The node agent against the test kubelet (testsupport/kubelet/): real gRPC over unix
// sockets, kubelet's admission order and allocation rules. Pods come from a fixed pod source
// here (agent_api tests use the local test API server). What is asserted is what a user
// relies on: a container gets the unit annotated on its pod, or admission fails visibly.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "agent/admission_guard.h"
#include "agent/agent_metrics.h"
#include "agent/device_health.h"
#include "agent/device_plugin_service.h"
#include "agent/inventory.h"
#include "agent/plugin_registrar.h"
#include "agent/pod_resources.h"
#include "agent/unit_map.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "state/assignment.h"
#include "testsupport/fake_apiserver.h"
#include "testsupport/kubelet/fixed_pod_source.h"
#include "testsupport/kubelet/test_kubelet.h"

namespace gse::agent {
namespace {

using ::testing::HasSubstr;
using testsupport::AdmitResult;
using testsupport::TestKubelet;
using testsupport::TestPod;

constexpr char kNode[] = "node-a";
constexpr char kShared[] = "nvidia.com/mig-1g.5gb.shared";
constexpr char kGpu[] = "nvidia.com/gpu";
constexpr char kMps[] = "nvidia.com/gpu.mps";

// GPU 0: three 1g.5gb slices (enumerated out of placement order); GPUs 1 and 2 whole.
constexpr char kInventory[] = R"({"gpus": [
  {"index": 0, "uuid": "GPU-0000", "product": "NVIDIA A100-SXM4-40GB", "memoryMiB": 40960,
   "migEnabled": true, "migDevices": [
     {"uuid": "MIG-0002", "profile": "1g.5gb", "memoryMiB": 4864, "placementStart": 2},
     {"uuid": "MIG-0000", "profile": "1g.5gb", "memoryMiB": 4864, "placementStart": 0},
     {"uuid": "MIG-0001", "profile": "1g.5gb", "memoryMiB": 4864, "placementStart": 1}]},
  {"index": 1, "uuid": "GPU-1111", "product": "NVIDIA A100-SXM4-40GB", "memoryMiB": 40960},
  {"index": 2, "uuid": "GPU-2222", "product": "NVIDIA A100-SXM4-40GB", "memoryMiB": 40960}]})";

using FixedPodSource = testsupport::FixedPodSource;

class AgentAdmission : public ::testing::Test {
 protected:
  void StartAgent(const std::string& resources, PluginOptions plugin_options = {}) {
    kubelet_ = std::make_unique<TestKubelet>(
        TestKubelet::Options{dir_.path() + "/kubelet", 7, start_backoff_});
    ASSERT_TRUE(kubelet_->Start().ok());
    auto inv = ParseInventoryJson(kInventory);
    ASSERT_TRUE(inv.ok()) << inv.status();
    auto specs = ParseServedSpecs(resources);
    ASSERT_TRUE(specs.ok()) << specs.status();
    auto map = UnitMap::Build(*inv, Catalog::BuiltIn(), *specs);
    ASSERT_TRUE(map.ok()) << map.status();
    units_ = std::make_unique<UnitMap>(*std::move(map));
    pod_resources_ = std::make_unique<PodResourcesClient>(kubelet_->pod_resources_socket());
    AdmissionOptions ao;
    ao.node = kNode;
    guard_ = std::make_unique<AdmissionGuard>(&Catalog::BuiltIn(), &pods_, pod_resources_.get(), ao);
    RegistrarOptions ro;
    ro.device_plugin_dir = kubelet_->device_plugin_dir();
    ro.poll_interval = absl::Milliseconds(20);
    metrics_ = std::make_unique<AgentMetrics>(*units_);
    registrar_ = std::make_unique<PluginRegistrar>(units_.get(), guard_.get(), &health_,
                                                   plugin_options, metrics_.get(), ro);
    ASSERT_TRUE(registrar_->Start().ok());
    for (const ServedOffering& o : units_->offerings()) {
      ASSERT_TRUE(kubelet_->WaitForResource(o.resource(), o.device_count(), absl::Seconds(30)))
          << o.resource();
    }
  }
  void TearDown() override {
    if (registrar_) registrar_->Stop();
    if (kubelet_) kubelet_->Stop();
  }

  // A pod requesting `count` of `resource`, annotated as the extender would (unit "" = none).
  NodePod MakePod(const std::string& ns, const std::string& name, const std::string& resource,
                  int count, const std::string& units, int amount = 1) {
    NodePod p;
    p.namespace_name = ns;
    p.name = name;
    p.uid = "uid-" + name;
    p.node = kNode;
    p.phase = "Pending";
    p.creation_timestamp = absl::StrCat("2026-01-01T00:00:", 10 + static_cast<int>(pods_.Snapshot().size()), "Z");
    p.device_needs[resource] = count;
    if (!units.empty()) {
      p.annotations[std::string(kAnnotationUnit)] = absl::StrCat(kNode, "/", resource, "/", units);
      p.annotations[std::string(kAnnotationAmount)] = absl::StrCat(amount);
      p.annotations[std::string(kAnnotationProject)] = ns;
    }
    return p;
  }
  static TestPod KubeletPod(const NodePod& p) {
    TestPod t{p.namespace_name, p.name, {}};
    testsupport::TestContainer c{"main", {}};
    for (const auto& [r, n] : p.device_needs) c.devices[r] = static_cast<int32_t>(n);
    t.containers.push_back(c);
    return t;
  }
  // Binds (the pod appears on the node) and admits, as kubelet does after the binding.
  AdmitResult BindAndAdmit(const NodePod& p) {
    pods_.Put(p);
    return kubelet_->Admit(KubeletPod(p));
  }
  static std::string Visible(const AdmitResult& r) {
    auto it = r.containers.find("main");
    if (it == r.containers.end()) return "";
    auto env = it->second.envs.find("NVIDIA_VISIBLE_DEVICES");
    return env == it->second.envs.end() ? "" : env->second;
  }

  gse::testing::ScratchDir dir_;
  absl::Duration start_backoff_ = absl::Seconds(10);  // the test kubelet's start retries
  FixedPodSource pods_;
  DeviceHealth health_;
  std::unique_ptr<TestKubelet> kubelet_;
  std::unique_ptr<UnitMap> units_;
  std::unique_ptr<PodResourcesClient> pod_resources_;
  std::unique_ptr<AdmissionGuard> guard_;
  std::unique_ptr<AgentMetrics> metrics_;
  std::unique_ptr<PluginRegistrar> registrar_;
};

TEST_F(AgentAdmission, AdvertisesUnitsInPlacementOrderWithEvidentIds) {
  StartAgent(absl::StrCat(kShared, ",", kGpu));
  auto shared = kubelet_->Devices(kShared);
  EXPECT_EQ(shared.size(), 12u);  // 3 slices x 4 tickets
  EXPECT_EQ(shared.count("MIG-0000::0"), 1u);
  EXPECT_EQ(shared.count("MIG-0002::3"), 1u);
  const ServedOffering* o = units_->Find(kShared, Catalog::BuiltIn());
  ASSERT_NE(o, nullptr);
  EXPECT_EQ(o->units()[0].uuid, "MIG-0000");
  EXPECT_EQ(o->units()[1].uuid, "MIG-0001");
  EXPECT_EQ(o->units()[2].uuid, "MIG-0002");
  auto gpus = kubelet_->Devices(kGpu);
  EXPECT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus.count("GPU-1111"), 1u);
}

TEST_F(AgentAdmission, TimeSlicedPodsGetTheirAnnotatedUnit) {
  StartAgent(kShared);
  struct Case {
    const char* ns;
    const char* name;
    const char* unit;
    const char* uuid;
  };
  const std::vector<Case> burst = {{"team-a", "a1", "0", "MIG-0000"}, {"team-b", "b1", "1", "MIG-0001"},
                                   {"team-a", "a2", "0", "MIG-0000"}, {"team-c", "c1", "2", "MIG-0002"},
                                   {"team-b", "b2", "1", "MIG-0001"}, {"team-a", "a3", "0", "MIG-0000"}};
  for (const Case& c : burst) {
    AdmitResult r = BindAndAdmit(MakePod(c.ns, c.name, kShared, 1, c.unit));
    ASSERT_TRUE(r.status.ok()) << c.name << ": " << r.status;
    EXPECT_TRUE(r.preferred_called);
    EXPECT_EQ(Visible(r), c.uuid) << c.name;
    auto ids = kubelet_->AllocatedIds(absl::StrCat(c.ns, "/", c.name));
    ASSERT_EQ(ids["main"].size(), 1u);
    EXPECT_TRUE(absl::StartsWith(ids["main"][0], absl::StrCat(c.uuid, "::"))) << ids["main"][0];
  }
}

TEST_F(AgentAdmission, PodsOfDifferentUnitsPendingTogetherAreRefused) {
  StartAgent(kShared);
  NodePod b = MakePod("team-b", "b1", kShared, 1, "1");
  NodePod c = MakePod("team-c", "c1", kShared, 1, "2");
  pods_.Put(b);
  pods_.Put(c);
  AdmitResult r = kubelet_->Admit(KubeletPod(b));
  ASSERT_FALSE(r.status.ok());
  EXPECT_THAT(std::string(r.status.message()), HasSubstr("cannot tell which pod kubelet is admitting"));
  EXPECT_THAT(std::string(r.status.message()), HasSubstr("team-b/b1 (unit 1)"));
  EXPECT_THAT(std::string(r.status.message()), HasSubstr("team-c/c1 (unit 2)"));
  EXPECT_TRUE(kubelet_->AllocatedIds("team-b/b1").empty());
  EXPECT_GE(pods_.resyncs(), 1);  // it looked again before refusing
  EXPECT_THAT(metrics_->Serialize(),
              HasSubstr("gse_agent_identification_failures_total{reason=\"ambiguous\",resource=\"nvidia.com/mig-1g.5gb.shared\"} 1"));
  // Once only one of them waits (the other was recreated later), admission succeeds.
  pods_.Remove("team-c/c1");
  r = kubelet_->Admit(KubeletPod(b));
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(Visible(r), "MIG-0001");
}

TEST_F(AgentAdmission, EquivalentPendingPodsShareTheirUnit) {
  StartAgent(kShared);
  NodePod a1 = MakePod("team-a", "a1", kShared, 1, "1");
  NodePod a2 = MakePod("team-a", "a2", kShared, 1, "1");
  pods_.Put(a1);
  pods_.Put(a2);
  AdmitResult r2 = kubelet_->Admit(KubeletPod(a2));  // kubelet may admit either first
  AdmitResult r1 = kubelet_->Admit(KubeletPod(a1));
  ASSERT_TRUE(r1.status.ok()) << r1.status;
  ASSERT_TRUE(r2.status.ok()) << r2.status;
  EXPECT_EQ(Visible(r1), "MIG-0001");
  EXPECT_EQ(Visible(r2), "MIG-0001");
}

TEST_F(AgentAdmission, KubeletOfferingAnotherUnitIsRefused) {
  StartAgent(kShared);
  // A kubelet that ignores the preferred allocation and picks a ticket of unit 2.
  kubelet_->SetPicker([](const std::vector<std::string>& available, const std::vector<std::string>&,
                         int32_t) {
    for (const std::string& id : available) {
      if (absl::StartsWith(id, "MIG-0002::")) return std::vector<std::string>{id};
    }
    return std::vector<std::string>{};
  });
  AdmitResult r = BindAndAdmit(MakePod("team-a", "a1", kShared, 1, "0"));
  ASSERT_FALSE(r.status.ok());
  EXPECT_THAT(std::string(r.status.message()), HasSubstr("is unit 2 (MIG-0002)"));
  EXPECT_THAT(std::string(r.status.message()), HasSubstr("team-a/a1 is annotated with unit(s) 0"));
  EXPECT_TRUE(kubelet_->AllocatedIds("team-a/a1").empty());
  EXPECT_THAT(metrics_->Serialize(),
              HasSubstr("gse_agent_allocations_total{outcome=\"refused\",resource=\"nvidia.com/mig-1g.5gb.shared\"} 1"));
}

TEST_F(AgentAdmission, HostileAnnotationsGetNothing) {
  StartAgent(absl::StrCat(kShared, ",", kGpu));
  const std::string unit(kAnnotationUnit), amount(kAnnotationAmount);
  struct Case {
    const char* name;
    std::map<std::string, std::string> annotations;
    const char* error;
  };
  const std::vector<Case> cases = {
      {"other-node", {{unit, "node-b/nvidia.com/mig-1g.5gb.shared/0"}}, "names node"},
      {"missing-unit", {{unit, "node-a/nvidia.com/mig-1g.5gb.shared/7"}}, "names unit 7"},
      {"garbage", {{unit, "\x01\xff/zzz"}}, "annotation gpu.themelio.io/unit"},
      {"other-resource", {{unit, "node-a/nvidia.com/gpu/0"}}, "names nvidia.com/gpu but the pod requests"},
      {"two-units", {{unit, "node-a/nvidia.com/mig-1g.5gb.shared/0,1"}}, "tickets or shares of one unit"},
      {"amount", {{unit, "node-a/nvidia.com/mig-1g.5gb.shared/0"}, {amount, "9"}}, "has 4 per unit"},
      {"huge", {{unit, std::string(1 << 20, '7')}}, "annotation gpu.themelio.io/unit"},
      {"negative", {{unit, "node-a/nvidia.com/mig-1g.5gb.shared/-1"}}, "not a decimal"},
  };
  for (const Case& c : cases) {
    NodePod p = MakePod("team-h", c.name, kShared, 1, "");
    p.annotations = c.annotations;
    AdmitResult r = BindAndAdmit(p);
    ASSERT_FALSE(r.status.ok()) << c.name;
    EXPECT_THAT(std::string(r.status.message()), HasSubstr(c.error)) << c.name;
    EXPECT_TRUE(kubelet_->AllocatedIds(p.Key()).empty()) << c.name;
    pods_.Remove(p.Key());  // rejected pods turn Failed; gone from the pending set
  }
}

TEST_F(AgentAdmission, UnknownPodIsRefused) {
  StartAgent(kShared);
  NodePod p = MakePod("team-a", "ghost", kShared, 1, "0");
  AdmitResult r = kubelet_->Admit(KubeletPod(p));  // never shown to the agent
  ASSERT_FALSE(r.status.ok());
  EXPECT_THAT(std::string(r.status.message()), HasSubstr("no pod bound to node node-a waits for"));
}

TEST_F(AgentAdmission, UnannotatedPodGetsAUnitNobodyHolds) {
  StartAgent(kShared);
  ASSERT_TRUE(BindAndAdmit(MakePod("team-a", "a1", kShared, 1, "0")).status.ok());
  ASSERT_TRUE(BindAndAdmit(MakePod("team-b", "b1", kShared, 1, "1")).status.ok());
  // Bound by another scheduler: no annotation. Unit 2 is the only unit nobody holds.
  AdmitResult r = BindAndAdmit(MakePod("team-x", "x1", kShared, 1, ""));
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(Visible(r), "MIG-0002");
  // A second such pod of another project would have to share a unit: refused.
  r = BindAndAdmit(MakePod("team-y", "y1", kShared, 1, ""));
  ASSERT_FALSE(r.status.ok());
  EXPECT_THAT(std::string(r.status.message()), HasSubstr("has no unit annotation and that unit is not free"));
}

TEST_F(AgentAdmission, ExclusiveGpusAreHandedOutOnce) {
  StartAgent(kGpu);
  AdmitResult r = BindAndAdmit(MakePod("team-a", "g1", kGpu, 1, "1"));
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(Visible(r), "GPU-2222");
  r = BindAndAdmit(MakePod("team-b", "g2", kGpu, 1, "0"));
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(Visible(r), "GPU-1111");
  // An annotation naming a unit that is already in use: kubelet has only other IDs to offer.
  r = BindAndAdmit(MakePod("team-c", "g3", kGpu, 1, "0"));
  ASSERT_FALSE(r.status.ok());
}

TEST_F(AgentAdmission, MpsSharesGetProportionalCaps) {
  StartAgent(kMps);
  AdmitResult r = BindAndAdmit(MakePod("team-a", "m1", kMps, 2, "1", 2));
  ASSERT_TRUE(r.status.ok()) << r.status;
  const auto& envs = r.containers["main"].envs;
  EXPECT_EQ(envs.at("NVIDIA_VISIBLE_DEVICES"), "GPU-2222");
  EXPECT_EQ(envs.at("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "50");
  EXPECT_EQ(envs.at("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), "0=20480M");
  ASSERT_EQ(kubelet_->AllocatedIds("team-a/m1")["main"].size(), 2u);
}

TEST_F(AgentAdmission, CdiStrategiesNameTheUnit) {
  PluginOptions po;
  po.strategy = *ParseDeviceListStrategy("cdi-annotations,cdi-cri");
  StartAgent(kShared, po);
  AdmitResult r = BindAndAdmit(MakePod("team-a", "a1", kShared, 1, "2"));
  ASSERT_TRUE(r.status.ok()) << r.status;
  const auto& c = r.containers["main"];
  EXPECT_EQ(c.envs.count("NVIDIA_VISIBLE_DEVICES"), 0u);
  EXPECT_THAT(c.cdi_devices, ::testing::ElementsAre("nvidia.com/gpu=MIG-0002"));
  ASSERT_EQ(c.annotations.size(), 1u);
  EXPECT_EQ(c.annotations.begin()->second, "nvidia.com/gpu=MIG-0002");
  EXPECT_FALSE(ParseDeviceListStrategy("volume-mounts").ok());
}

// Kubelet's watch can be ahead of the agent's: kubelet admits team-a/p1 (older, so first in
// its batch) while the agent's watch has delivered only team-b/q1, bound a moment earlier and
// waiting for unit 1. Deciding on the watch alone gave p1 q1's unit at Allocate; the start
// check then refused it on every retry, so the pod neither ran nor failed. Allocate decides
// on a fresh list, sees both pods waiting for different units, and refuses visibly.
TEST_F(AgentAdmission, PodKubeletSawBeforeTheAgentsWatchIsNotGivenAnotherPodsUnit) {
  StartAgent(kShared);
  NodePod q = MakePod("team-b", "q1", kShared, 1, "1");
  pods_.Put(q);
  NodePod p = MakePod("team-a", "p1", kShared, 1, "0");
  p.creation_timestamp = "2026-01-01T00:00:00Z";
  pods_.PutUnseen(p);
  AdmitResult r = kubelet_->Admit(KubeletPod(p));
  ASSERT_FALSE(r.status.ok()) << "p1 was given " << Visible(r);
  EXPECT_THAT(std::string(r.status.message()), HasSubstr("cannot tell which pod kubelet is admitting"));
  EXPECT_THAT(std::string(r.status.message()), HasSubstr("team-a/p1 (unit 0)"));
  EXPECT_THAT(std::string(r.status.message()), HasSubstr("team-b/q1 (unit 1)"));
  EXPECT_TRUE(kubelet_->AllocatedIds("team-a/p1").empty());
  // p1's rejection reaches the agent; q1 is admitted on its own unit.
  p.phase = "Failed";
  pods_.Put(p);
  r = kubelet_->Admit(KubeletPod(q));
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(Visible(r), "MIG-0001");
  EXPECT_TRUE(kubelet_->StartContainer("team-b/q1", "main").ok());
}

// Without a fresh list of the node's pods the agent cannot rule out a pod its watch has not
// delivered: Allocate refuses, even when the watch shows exactly one waiting pod.
TEST_F(AgentAdmission, AllocateRefusesWhenTheNodesPodsCannotBeListed) {
  StartAgent(kShared);
  NodePod a = MakePod("team-a", "a1", kShared, 1, "0");
  pods_.Put(a);
  pods_.SetResyncError(absl::DeadlineExceededError("no fresh list within 2s"));
  AdmitResult r = kubelet_->Admit(KubeletPod(a));
  ASSERT_FALSE(r.status.ok()) << Visible(r);
  EXPECT_THAT(std::string(r.status.message()), HasSubstr("cannot list the pods bound to node node-a"));
  EXPECT_THAT(std::string(r.status.message()), HasSubstr("no fresh list within 2s"));
  EXPECT_TRUE(kubelet_->AllocatedIds("team-a/a1").empty());
  pods_.SetResyncError(absl::OkStatus());
  r = kubelet_->Admit(KubeletPod(a));
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(Visible(r), "MIG-0000");
}

// A container start that the agent refuses is retried by kubelet (the test kubelet's retry
// thread) with the same devices, and runs once the check passes.
TEST_F(AgentAdmission, RefusedStartIsRetriedWithTheSameDevices) {
  start_backoff_ = absl::Milliseconds(50);
  StartAgent(kShared);
  absl::Mutex mu;
  std::vector<std::string> outcomes;
  kubelet_->SetStartListener([&](const std::string& key, const std::string&, const absl::Status& s) {
    absl::MutexLock lock(&mu);
    outcomes.push_back(key + (s.ok() ? " ok" : " failed"));
  });
  absl::Cleanup forget = [&] { kubelet_->SetStartListener(nullptr); };
  NodePod a = MakePod("team-a", "a1", kShared, 1, "0");
  ASSERT_TRUE(BindAndAdmit(a).status.ok());
  // The annotation names another unit for a while: the start is refused, and retried.
  a.annotations[std::string(kAnnotationUnit)] = absl::StrCat(kNode, "/", kShared, "/1");
  pods_.Put(a);
  ASSERT_FALSE(kubelet_->StartContainer("team-a/a1", "main").ok());
  EXPECT_THAT(kubelet_->StartsWaiting(), ::testing::ElementsAre("team-a/a1/main"));
  const std::vector<std::string> ids = kubelet_->AllocatedIds("team-a/a1")["main"];
  a.annotations[std::string(kAnnotationUnit)] = absl::StrCat(kNode, "/", kShared, "/0");
  pods_.Put(a);
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  bool started = false;
  while (!started && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
    absl::MutexLock lock(&mu);
    started = !outcomes.empty() && outcomes.back() == "team-a/a1 ok";
  }
  EXPECT_TRUE(started);
  EXPECT_TRUE(kubelet_->StartsWaiting().empty());
  EXPECT_EQ(kubelet_->AllocatedIds("team-a/a1")["main"], ids);  // not allocated again
  // A pod kubelet did not admit (or killed) does not start, and is not retried.
  kubelet_->RemovePod("team-a/a1");
  absl::Status gone = kubelet_->StartContainer("team-a/a1", "main");
  EXPECT_THAT(std::string(gone.message()), HasSubstr("not admitted on this kubelet"));
  EXPECT_TRUE(kubelet_->StartsWaiting().empty());
}

// A kubelet whose view is older than a deletion admits the deleted pod x: the one pod waiting
// (y) is taken to be the pod admitted, so x's container gets y's unit, and kubelet kills x
// before pod-resources ever listed it. y's own admission must still get its unit: kubelet
// records an allocation before its next admission call, so the unit handed to x is not y's.
TEST_F(AgentAdmission, UnitHandedToAPodKubeletKilledStaysAvailableToItsOwner) {
  StartAgent(kShared);
  NodePod y = MakePod("team-b", "y", kShared, 1, "1");
  pods_.Put(y);
  NodePod x = MakePod("team-a", "x", kShared, 1, "");  // deleted: the agent no longer lists it
  AdmitResult stale = kubelet_->Admit(KubeletPod(x));
  ASSERT_TRUE(stale.status.ok()) << stale.status;
  EXPECT_EQ(Visible(stale), "MIG-0001");  // y's unit, attributed to y
  kubelet_->RemovePod("team-a/x");
  AdmitResult r = kubelet_->Admit(KubeletPod(y));
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(Visible(r), "MIG-0001");
  EXPECT_TRUE(kubelet_->StartContainer("team-b/y", "main").ok());
  EXPECT_EQ(guard_->bookings(), 0u);
}

TEST_F(AgentAdmission, PreStartContainerChecksThePodThatKubeletRecorded) {
  StartAgent(kShared);
  NodePod a = MakePod("team-a", "a1", kShared, 1, "0");
  ASSERT_TRUE(BindAndAdmit(a).status.ok());
  EXPECT_TRUE(kubelet_->StartContainer("team-a/a1", "main").ok());
  // The annotation was rewritten after admission: the devices no longer match it.
  a.annotations[std::string(kAnnotationUnit)] = absl::StrCat(kNode, "/", kShared, "/1");
  pods_.Put(a);
  absl::Status s = kubelet_->StartContainer("team-a/a1", "main");
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("CreateContainerConfigError"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("annotated with unit(s) 1"));
}

TEST_F(AgentAdmission, KubeletRestartReRegistersWithTheSameIds) {
  StartAgent(absl::StrCat(kShared, ",", kGpu));
  const auto before = kubelet_->Devices(kShared);
  ASSERT_EQ(kubelet_->Registrations(kShared), 1);
  ASSERT_TRUE(BindAndAdmit(MakePod("team-a", "a1", kShared, 1, "0")).status.ok());
  ASSERT_TRUE(kubelet_->Restart().ok());
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while ((kubelet_->Registrations(kShared) < 2 || kubelet_->Registrations(kGpu) < 2) &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(kubelet_->Registrations(kShared), 2);
  EXPECT_EQ(kubelet_->Registrations(kGpu), 2);
  ASSERT_TRUE(kubelet_->WaitForResource(kShared, 12, absl::Seconds(30)));
  EXPECT_EQ(kubelet_->Devices(kShared), before);
  // Admission works again, and the allocation from before the restart is still respected.
  AdmitResult r = BindAndAdmit(MakePod("team-a", "a2", kShared, 1, "0"));
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(Visible(r), "MIG-0000");
}

TEST_F(AgentAdmission, UnhealthyMigDeviceStopsBeingOffered) {
  StartAgent(kShared);
  health_.MarkUnhealthy("MIG-0001", "critical Xid 79");
  ASSERT_TRUE(kubelet_->WaitForDevices(
      kShared,
      [](const std::map<std::string, bool>& d) {
        return d.count("MIG-0001::0") && !d.at("MIG-0001::0") && d.at("MIG-0000::0");
      },
      absl::Seconds(30)));
  for (const auto& [id, healthy] : kubelet_->Devices(kShared)) {
    EXPECT_EQ(healthy, !absl::StartsWith(id, "MIG-0001")) << id;
  }
  // A pod annotated with the broken slice is refused rather than given another one.
  AdmitResult r = BindAndAdmit(MakePod("team-b", "b1", kShared, 1, "1"));
  ASSERT_FALSE(r.status.ok());
  EXPECT_THAT(std::string(r.status.message()), HasSubstr("annotated with unit(s) 1"));
}

}  // namespace
}  // namespace gse::agent
