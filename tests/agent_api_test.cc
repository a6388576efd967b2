// The node agent against the local test API server: the node's pods from list + watch with
// spec.nodeName field selector (ApiPodSource), and what the agent writes back (AuditLoop +
// ApiWriter): the gpu.themelio.io/allocated confirmations, the Node's inventory annotation,
// and one Event and one metric increment per audit mismatch.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "agent/admission_guard.h"
#include "agent/agent_log.h"
#include "agent/agent_metrics.h"
#include "agent/api_pod_source.h"
#include "agent/api_writer.h"
#include "agent/audit_loop.h"
#include "agent/device_health.h"
#include "agent/inventory.h"
#include "agent/node_pods.h"
#include "agent/published_inventory.h"
#include "agent/unit_map.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rapidjson/document.h"
#include "state/assignment.h"
#include "testsupport/fake_apiserver.h"
#include "tests/testing/eventually.h"

namespace gse::agent {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using testing::Eventually;
using testing::FakeApiServer;
using testing::PodJson;
using testing::PodSpec;

constexpr char kNode[] = "node-a";
constexpr char kShared[] = "nvidia.com/mig-1g.5gb.shared";

std::unique_ptr<KubeClient> ClientFor(const FakeApiServer& fake) {
  KubeConfig config;
  config.server = fake.url();
  config.token = "test-token";
  auto client = KubeClient::Create(config);
  EXPECT_TRUE(client.ok()) << client.status();
  return std::move(*client);
}

std::string Pod(const std::string& ns, const std::string& name, const std::string& node,
                const std::string& unit = "") {
  PodSpec spec;
  spec.namespace_name = ns;
  spec.name = name;
  spec.node = node;
  spec.requests = {{kShared, "1"}};
  if (!unit.empty()) {
    spec.annotations = {{std::string(kAnnotationUnit), absl::StrCat(node, "/", kShared, "/", unit)},
                        {std::string(kAnnotationProject), ns}};
  }
  return PodJson(spec);
}

std::vector<std::string> Keys(const std::vector<NodePod>& pods) {
  std::vector<std::string> out;
  for (const NodePod& p : pods) out.push_back(p.Key());
  std::sort(out.begin(), out.end());
  return out;
}

// ---------------------------------------------------------------- DecodeNodePod

// The devices kubelet's device manager hands the pod out, which the agent must match to the
// extender's units: a plain init container's pass to later containers, a sidecar's stay its own.
TEST(DecodeNodePodTest, DeviceNeedsCountSidecarsBesideTheAppContainers) {
  auto needs = [](const std::string& init) {
    rapidjson::Document d;
    const std::string json = absl::StrCat(
        R"({"metadata":{"name":"p","namespace":"ns","uid":"u"},"spec":{"nodeName":"node-a",)",
        R"("initContainers":[)", init, R"(],"containers":[{"name":"app","resources":)",
        R"({"limits":{"nvidia.com/gpu":"1"}}}]}})");
    d.Parse(json.c_str());
    absl::StatusOr<NodePod> pod = DecodeNodePod(d, "Pod");
    EXPECT_TRUE(pod.ok()) << pod.status();
    return pod.ok() ? pod->device_needs : std::map<std::string, int64_t>{};
  };
  constexpr char kSetup[] = R"({"name":"setup","resources":{"limits":{"nvidia.com/gpu":"1"}}})";
  constexpr char kProxy[] =
      R"({"name":"proxy","restartPolicy":"Always","resources":{"limits":{"nvidia.com/gpu":"1"}}})";
  EXPECT_EQ(needs(kSetup), (std::map<std::string, int64_t>{{"nvidia.com/gpu", 1}}));
  EXPECT_EQ(needs(absl::StrCat(kSetup, ",", kProxy)), (std::map<std::string, int64_t>{{"nvidia.com/gpu", 2}}));
  EXPECT_EQ(needs(absl::StrCat(kProxy, ",", kSetup)), (std::map<std::string, int64_t>{{"nvidia.com/gpu", 2}}));
}

// ---------------------------------------------------------------- ApiPodSource

class ApiPodSourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fake_.Start().ok());
    client_ = ClientFor(fake_);
  }
  std::unique_ptr<ApiPodSource> StartSource() {
    ApiPodSourceOptions o;
    o.node = kNode;
    o.backoff_initial = absl::Milliseconds(20);
    auto source = std::make_unique<ApiPodSource>(client_.get(), o);
    source->Start();
    EXPECT_TRUE(source->WaitForSync(absl::Seconds(20)));
    // The watch must be open on the server before a test drops or delays it: a watch request
    // still on its way would miss both and deliver the very events the test hides.
    EXPECT_TRUE(Eventually([&] { return fake_.open_watches("pods") >= 1; }, absl::Seconds(20)));
    return source;
  }

  FakeApiServer fake_;
  std::unique_ptr<KubeClient> client_;
};

TEST_F(ApiPodSourceTest, ListsAndWatchesOnlyThisNodesPods) {
  ASSERT_TRUE(fake_.Apply("pods", Pod("team-a", "a1", kNode, "0")).ok());
  ASSERT_TRUE(fake_.Apply("pods", Pod("team-b", "b1", "node-b", "0")).ok());
  ASSERT_TRUE(fake_.Apply("pods", Pod("team-c", "c1", "")).ok());
  auto source = StartSource();
  EXPECT_THAT(Keys(source->Snapshot()), ElementsAre("team-a/a1"));
  const std::vector<NodePod> first = source->Snapshot();
  EXPECT_EQ(first[0].device_needs.at(kShared), 1);
  EXPECT_EQ(first[0].annotations.at(std::string(kAnnotationUnit)), "node-a/nvidia.com/mig-1g.5gb.shared/0");
  // A binding to this node arrives through the watch; so do deletions and phase changes.
  ASSERT_TRUE(fake_.Mutate("pods", "team-c", "c1", [](rapidjson::Document& d) {
                    d["spec"].AddMember("nodeName", rapidjson::Value(kNode), d.GetAllocator());
                  }).ok());
  ASSERT_TRUE(Eventually([&] { return Keys(source->Snapshot()).size() == 2; }));
  ASSERT_TRUE(fake_.SetPodPhase("team-c", "c1", "Failed").ok());
  ASSERT_TRUE(Eventually([&] {
    for (const NodePod& p : source->Snapshot()) {
      if (p.Key() == "team-c/c1") return p.Terminal();
    }
    return false;
  }));
  ASSERT_TRUE(fake_.Delete("pods", "team-a", "a1"));
  ASSERT_TRUE(Eventually([&] { return Keys(source->Snapshot()) == std::vector<std::string>{"team-c/c1"}; }));
  EXPECT_EQ(source->counters().lists, 1);
  // The selector is on the wire: the server filters, not the agent.
  EXPECT_GE(fake_.RequestCount("GET", "/api/v1/pods"), 2);
}

TEST_F(ApiPodSourceTest, ResyncSeesABindingTheWatchHasNotDeliveredYet) {
  auto source = StartSource();
  // The watch is held up (a slow API server): only a fresh list can see the new pod.
  FakeApiServer::Fault slow;
  slow.method = "GET";
  slow.query_contains = "watch";
  slow.delay_before = absl::Seconds(30);
  slow.times = -1;
  fake_.AddFault(slow);
  fake_.DropWatches();
  absl::SleepFor(absl::Milliseconds(100));
  ASSERT_TRUE(fake_.Apply("pods", Pod("team-a", "late", kNode, "1")).ok());
  EXPECT_THAT(Keys(source->Snapshot()), IsEmpty());
  absl::Status s = source->Resync(absl::Seconds(10));
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_THAT(Keys(source->Snapshot()), ElementsAre("team-a/late"));
  EXPECT_EQ(source->counters().lists, 2);
  fake_.ClearFaults();
}

TEST_F(ApiPodSourceTest, ResyncIsBoundedWhenTheApiServerDoesNotAnswer) {
  ASSERT_TRUE(fake_.Apply("pods", Pod("team-a", "a1", kNode, "0")).ok());
  auto source = StartSource();
  FakeApiServer::Fault down;
  down.method = "GET";
  down.path_contains = "/api/v1/pods";
  down.status = 503;
  down.times = -1;
  fake_.AddFault(down);
  const absl::Time start = absl::Now();
  absl::Status s = source->Resync(absl::Milliseconds(300));
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));  // bounded, not stuck (generous for TSan)
  // The old view stays: a failed refresh can only make the guard refuse more.
  EXPECT_THAT(Keys(source->Snapshot()), ElementsAre("team-a/a1"));
  EXPECT_GE(source->counters().list_errors, 1);
  fake_.ClearFaults();
  ASSERT_TRUE(source->Resync(absl::Seconds(10)).ok());
}

TEST_F(ApiPodSourceTest, CompactedHistoryMeansARelist) {
  auto source = StartSource();
  // The watch reconnects only after the pod's event has been compacted away: it resumes
  // from a resourceVersion that is gone and gets 410.
  FakeApiServer::Fault late;
  late.method = "GET";
  late.query_contains = "watch";
  late.delay_before = absl::Seconds(1);
  fake_.AddFault(late);
  fake_.DropWatches();
  ASSERT_TRUE(fake_.Apply("pods", Pod("team-a", "a1", kNode, "0")).ok());
  fake_.Compact();
  ASSERT_TRUE(Eventually([&] { return Keys(source->Snapshot()).size() == 1; }, absl::Seconds(20)));
  ASSERT_TRUE(Eventually([&] { return source->counters().expired >= 1; }, absl::Seconds(20)));
  EXPECT_GE(source->counters().lists, 2);
}

TEST_F(ApiPodSourceTest, HostilePodsAreLeftOutAndCounted) {
  ASSERT_TRUE(fake_.Apply("pods", Pod("team-a", "ok", kNode, "0")).ok());
  std::string bad = Pod("team-a", "bad", kNode, "0");
  // A quantity that is not one: the project's decoder rejects the whole pod.
  const std::string from = R"("nvidia.com/mig-1g.5gb.shared":"1")";
  ASSERT_NE(bad.find(from), std::string::npos);
  bad.replace(bad.find(from), from.size(), R"("nvidia.com/mig-1g.5gb.shared":"1e999999")");
  ASSERT_TRUE(fake_.Apply("pods", bad).ok());
  auto source = StartSource();
  EXPECT_THAT(Keys(source->Snapshot()), ElementsAre("team-a/ok"));
  EXPECT_EQ(source->counters().decode_errors, 1);
}

// ---------------------------------------------------------------- bodies

TEST(ApiWriterBodies, AnnotationPatchCarriesTheUidPrecondition) {
  EXPECT_EQ(AnnotationPatch("gpu.themelio.io/allocated", "MIG-1::0,MIG-1::1", "u-1"),
            R"({"metadata":{"uid":"u-1","annotations":{"gpu.themelio.io/allocated":"MIG-1::0,MIG-1::1"}}})");
  EXPECT_EQ(AnnotationPatch("k", "v\"\n", ""), R"({"metadata":{"annotations":{"k":"v\"\n"}}})");
}

TEST(ApiWriterBodies, EventIsACoreV1EventOnThePod) {
  const std::string long_message(3000, 'x');
  const std::string json = PodEventJson(PodRef{"team-a", "a1", "uid-1"}, kNode, "Warning",
                                        "GpuUnitMismatch", long_message,
                                        absl::FromUnixSeconds(1767225600), 0xabc);
  rapidjson::Document d;
  d.Parse(json.c_str());
  ASSERT_FALSE(d.HasParseError()) << json;
  EXPECT_STREQ(d["kind"].GetString(), "Event");
  EXPECT_STREQ(d["metadata"]["name"].GetString(), "a1.0000000000000abc");
  EXPECT_STREQ(d["involvedObject"]["uid"].GetString(), "uid-1");
  EXPECT_STREQ(d["involvedObject"]["namespace"].GetString(), "team-a");
  EXPECT_STREQ(d["source"]["component"].GetString(), "gpu-slice-agent");
  EXPECT_STREQ(d["source"]["host"].GetString(), kNode);
  EXPECT_STREQ(d["firstTimestamp"].GetString(), "2026-01-01T00:00:00Z");
  EXPECT_EQ(d["message"].GetStringLength(), kMaxEventMessage);
  // A pod name at the limit still gives a valid object name.
  const std::string json2 = PodEventJson(PodRef{"ns", std::string(253, 'p'), ""}, kNode, "Warning",
                                         "R", "m", absl::Now(), 1);
  d.Parse(json2.c_str());
  EXPECT_LE(d["metadata"]["name"].GetStringLength(), 253u);
}

TEST(PublishedInventory, UnitsInContractOrderWithHealth) {
  auto inv = ParseInventoryJson(R"({"gpus": [
    {"index": 0, "uuid": "GPU-0", "product": "NVIDIA A100-SXM4-40GB", "migEnabled": true, "migDevices": [
      {"uuid": "MIG-b", "profile": "1g.5gb", "memoryMiB": 4864, "placementStart": 1},
      {"uuid": "MIG-a", "profile": "1g.5gb", "memoryMiB": 4864, "placementStart": 0}]},
    {"index": 1, "uuid": "GPU-1", "product": "NVIDIA A100-SXM4-40GB"}]})");
  ASSERT_TRUE(inv.ok()) << inv.status();
  auto units = UnitMap::Build(*inv, Catalog::BuiltIn(), {ServedSpec{kShared, 0}, ServedSpec{"nvidia.com/gpu", 0}});
  ASSERT_TRUE(units.ok()) << units.status();
  DeviceHealth health;
  health.MarkUnhealthy("MIG-b", "Xid 79");
  EXPECT_EQ(PublishedInventoryJson(*units, health),
            R"({"version":1,"resources":{)"
            R"("nvidia.com/mig-1g.5gb.shared":{"sharing":"time-sliced","replicas":4,"units":[)"
            R"({"uuid":"MIG-a","gpu":0,"profile":"1g.5gb","placementStart":0,"healthy":true},)"
            R"({"uuid":"MIG-b","gpu":0,"profile":"1g.5gb","placementStart":1,"healthy":false}]},)"
            R"("nvidia.com/gpu":{"sharing":"exclusive","replicas":1,"units":[{"uuid":"GPU-1","gpu":1,"healthy":true}]}}})");
}

// ---------------------------------------------------------------- AuditLoop

// Kubelet's pod-resources as a test sets it.
class SetPodResources : public PodResourcesSource {
 public:
  absl::StatusOr<std::vector<ContainerDeviceIds>> List(absl::Duration) override {
    absl::MutexLock lock(&mu_);
    return view_;
  }
  void Set(std::vector<ContainerDeviceIds> view) {
    absl::MutexLock lock(&mu_);
    view_ = std::move(view);
  }

 private:
  absl::Mutex mu_;
  std::vector<ContainerDeviceIds> view_ ABSL_GUARDED_BY(mu_);
};

class AuditLoopTest : public ApiPodSourceTest {
 protected:
  void SetUp() override {
    ApiPodSourceTest::SetUp();
    ASSERT_TRUE(fake_.Apply("nodes", R"({"metadata":{"name":"node-a"}})").ok());
    auto inv = ParseInventoryJson(R"({"gpus": [{"index": 0, "uuid": "GPU-0", "product": "NVIDIA A100-SXM4-40GB",
      "migEnabled": true, "migDevices": [
        {"uuid": "MIG-0", "profile": "1g.5gb", "memoryMiB": 4864, "placementStart": 0},
        {"uuid": "MIG-1", "profile": "1g.5gb", "memoryMiB": 4864, "placementStart": 1}]}]})");
    ASSERT_TRUE(inv.ok());
    auto units = UnitMap::Build(*inv, Catalog::BuiltIn(), {ServedSpec{kShared, 4}});
    ASSERT_TRUE(units.ok());
    units_ = std::make_unique<UnitMap>(*std::move(units));
    metrics_ = std::make_unique<AgentMetrics>(*units_);
    writer_ = std::make_unique<ApiWriter>(client_.get(), kNode);
    SetLogSinkForTest([this](const std::string& line) {
      absl::MutexLock lock(&log_mu_);
      log_.push_back(line);
    });
  }
  void TearDown() override { SetLogSinkForTest(nullptr); }
  void MakeLoop() {
    source_ = StartSource();
    AdmissionOptions ao;
    ao.node = kNode;
    guard_ = std::make_unique<AdmissionGuard>(&Catalog::BuiltIn(), source_.get(), &kubelet_, ao);
    AuditLoopOptions lo;
    lo.node = kNode;
    loop_ = std::make_unique<AuditLoop>(units_.get(), &Catalog::BuiltIn(), source_.get(), &kubelet_,
                                        guard_.get(), &health_, metrics_.get(), writer_.get(), lo);
  }
  std::vector<std::string> LogLines(absl::string_view event) {
    absl::MutexLock lock(&log_mu_);
    std::vector<std::string> out;
    for (const std::string& l : log_) {
      if (absl::StrContains(l, absl::StrCat("\"event\":\"", event, "\""))) out.push_back(l);
    }
    return out;
  }
  std::map<std::string, std::string> Annotations(const std::string& key) {
    for (const auto& p : fake_.Pods()) {
      if (p.key == key) return p.annotations;
    }
    return {};
  }

  std::unique_ptr<UnitMap> units_;
  std::unique_ptr<AgentMetrics> metrics_;
  std::unique_ptr<ApiWriter> writer_;
  DeviceHealth health_;
  SetPodResources kubelet_;
  std::unique_ptr<ApiPodSource> source_;
  std::unique_ptr<AdmissionGuard> guard_;
  std::unique_ptr<AuditLoop> loop_;
  absl::Mutex log_mu_;
  std::vector<std::string> log_ ABSL_GUARDED_BY(log_mu_);
};

TEST_F(AuditLoopTest, ConfirmsVerifiedAllocationsOnThePodOnce) {
  ASSERT_TRUE(fake_.Apply("pods", Pod("team-a", "a1", kNode, "1")).ok());
  MakeLoop();
  kubelet_.Set({ContainerDeviceIds{"team-a", "a1", "main", kShared, {"MIG-1::2"}}});
  AuditRound r = loop_->RunOnce();
  ASSERT_TRUE(r.pod_resources_ok);
  EXPECT_THAT(r.report.findings, IsEmpty());
  EXPECT_EQ(r.confirmed, 1);
  EXPECT_EQ(Annotations("team-a/a1")[std::string(kAnnotationAllocated)], "MIG-1::2");
  // Not written again, whether or not the watch has delivered the annotation yet.
  EXPECT_EQ(loop_->RunOnce().confirmed, 0);
  ASSERT_TRUE(Eventually([&] { return loop_->RunOnce().report.confirmations.empty(); }));
  EXPECT_EQ(fake_.RequestCount("PATCH", "/pods/a1"), 1);
  EXPECT_THAT(metrics_->Serialize(), HasSubstr("gse_agent_confirmations_total 1"));
}

TEST_F(AuditLoopTest, ConfirmationOfARecreatedPodFails) {
  ASSERT_TRUE(fake_.Apply("pods", Pod("team-a", "a1", kNode, "1")).ok());
  MakeLoop();
  ASSERT_EQ(source_->Snapshot().size(), 1u);
  // The pod is deleted and created again under the same name, and the agent has not seen it.
  FakeApiServer::Fault hold;
  hold.method = "GET";
  hold.query_contains = "watch";
  hold.times = -1;
  hold.delay_before = absl::Seconds(30);
  fake_.AddFault(hold);
  fake_.DropWatches();
  ASSERT_TRUE(fake_.Delete("pods", "team-a", "a1"));
  ASSERT_TRUE(fake_.Apply("pods", Pod("team-a", "a1", kNode, "0")).ok());
  kubelet_.Set({ContainerDeviceIds{"team-a", "a1", "main", kShared, {"MIG-1::0"}}});
  AuditRound r = loop_->RunOnce();
  EXPECT_EQ(r.confirmed, 0);
  EXPECT_EQ(r.write_errors, 1);
  EXPECT_EQ(Annotations("team-a/a1").count(std::string(kAnnotationAllocated)), 0u);
  EXPECT_THAT(metrics_->Serialize(), HasSubstr("gse_agent_api_errors_total{call=\"patch_pod\"} 1"));
  fake_.ClearFaults();
}

TEST_F(AuditLoopTest, MismatchIsLoggedCountedAndAnEventOnThePodOnce) {
  ASSERT_TRUE(fake_.Apply("pods", Pod("team-a", "a1", kNode, "0")).ok());
  MakeLoop();
  kubelet_.Set({ContainerDeviceIds{"team-a", "a1", "main", kShared, {"MIG-1::0"}}});
  AuditRound r = loop_->RunOnce();
  ASSERT_EQ(r.report.findings.size(), 1u);
  EXPECT_EQ(r.new_findings, 1);
  EXPECT_EQ(r.confirmed, 0);  // a wrong allocation is never confirmed
  EXPECT_EQ(loop_->RunOnce().new_findings, 0);
  std::vector<std::string> events = fake_.Events();
  ASSERT_EQ(events.size(), 1u);
  rapidjson::Document ev;
  ev.Parse(events[0].c_str());
  EXPECT_STREQ(ev["reason"].GetString(), "GpuUnitMismatch");
  EXPECT_STREQ(ev["type"].GetString(), "Warning");
  EXPECT_STREQ(ev["involvedObject"]["name"].GetString(), "a1");
  EXPECT_FALSE(std::string(ev["involvedObject"]["uid"].GetString()).empty());
  EXPECT_THAT(ev["message"].GetString(), HasSubstr("holds MIG-1::0 (unit 1, MIG-1) but is annotated with unit(s) 0"));
  auto lines = LogLines("audit_mismatch");
  ASSERT_EQ(lines.size(), 1u);
  rapidjson::Document line;
  line.Parse(lines[0].c_str());
  ASSERT_FALSE(line.HasParseError()) << lines[0];
  EXPECT_STREQ(line["pod"].GetString(), "team-a/a1");
  EXPECT_STREQ(line["resource"].GetString(), kShared);
  EXPECT_THAT(metrics_->Serialize(),
              HasSubstr("gse_agent_audit_mismatches_total{resource=\"nvidia.com/mig-1g.5gb.shared\"} 1"));
}

TEST_F(AuditLoopTest, PublishesTheNodeInventoryAndAgainWhenHealthChanges) {
  MakeLoop();
  AuditRound r = loop_->RunOnce();
  EXPECT_TRUE(r.inventory_published);
  auto annotation = [&] {
    std::optional<std::string> node = fake_.Get("nodes", "", kNode);
    rapidjson::Document d;
    d.Parse(node->c_str());
    const auto& ann = d["metadata"]["annotations"];
    return std::string(ann[std::string(kAnnotationInventory).c_str()].GetString());
  };
  EXPECT_EQ(annotation(), PublishedInventoryJson(*units_, health_));
  EXPECT_FALSE(loop_->RunOnce().inventory_published);  // unchanged: not written again
  health_.MarkUnhealthy("MIG-1", "Xid 79");
  EXPECT_TRUE(loop_->RunOnce().inventory_published);
  EXPECT_THAT(annotation(), HasSubstr(R"({"uuid":"MIG-1","gpu":0,"profile":"1g.5gb","placementStart":1,"healthy":false})"));
  EXPECT_THAT(metrics_->Serialize(),
              HasSubstr("gse_agent_unhealthy_units{resource=\"nvidia.com/mig-1g.5gb.shared\"} 1"));
}

TEST_F(AuditLoopTest, FailedPublishIsRetriedNextRound) {
  MakeLoop();
  FakeApiServer::Fault fail;
  fail.method = "PATCH";
  fail.path_contains = "/api/v1/nodes/";
  fail.status = 500;
  fake_.AddFault(fail);
  AuditRound r = loop_->RunOnce();
  EXPECT_FALSE(r.inventory_published);
  EXPECT_EQ(r.write_errors, 1);
  EXPECT_TRUE(loop_->RunOnce().inventory_published);
}

TEST_F(AuditLoopTest, KickedLoopConfirmsSoonAfterKubeletRecordsTheIds) {
  ASSERT_TRUE(fake_.Apply("pods", Pod("team-a", "a1", kNode, "0")).ok());
  MakeLoop();
  loop_->Start();  // interval 10 s: only a kick makes it look before then
  ASSERT_TRUE(Eventually([&] { return loop_->rounds() >= 1; }));
  kubelet_.Set({ContainerDeviceIds{"team-a", "a1", "main", kShared, {"MIG-0::1"}}});
  loop_->Kick();
  EXPECT_TRUE(Eventually([&] {
    return Annotations("team-a/a1")[std::string(kAnnotationAllocated)] == "MIG-0::1";
  }));
  loop_->Stop();
}

}  // namespace
}  // namespace gse::agent
