// The mirror's host view (cluster_state.h "the host view"): allocatable cpu, memory and pods
// per node from status.allocatable, and the summed requests of the non-terminal pods bound
// there, GPU or not, under add, update, rebind, terminal phases, deletes, relists and node
// removal; PodHostRequest as kube-scheduler counts it; decoding errors; a random run against
// a recount.
#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "state/catalog.h"
#include "state/cluster_state.h"
#include "state/k8s_objects.h"
#include "state/mirror.h"

namespace gse {
namespace {

using ::testing::HasSubstr;

constexpr char kGpu[] = "nvidia.com/gpu";

std::shared_ptr<const Catalog> TestCatalog() {
  std::vector<Offering> v(1);
  v[0].resource = kGpu;
  absl::StatusOr<Catalog> c = Catalog::FromOfferings(std::move(v));
  EXPECT_TRUE(c.ok()) << c.status();
  return std::make_shared<const Catalog>(*std::move(c));
}

NodeObject Node(const std::string& name, int64_t cpu_milli = 8000,
                int64_t memory_bytes = int64_t{32} << 30, int64_t pods = 110) {
  NodeObject n;
  n.name = name;
  n.uid = name + "-uid";
  if (cpu_milli >= 0) n.allocatable_milli["cpu"] = cpu_milli;
  if (memory_bytes >= 0) n.allocatable_milli["memory"] = memory_bytes * 1000;
  if (pods >= 0) n.allocatable_milli["pods"] = pods * 1000;
  n.allocatable_milli[kGpu] = 2000;
  return n;
}

PodObject Pod(const std::string& name, const std::string& node, int64_t cpu_milli,
              int64_t memory_bytes, bool gpu = false) {
  PodObject p;
  p.namespace_name = "ns";
  p.name = name;
  p.uid = name + "-uid";
  p.node_name = node;
  p.phase = node.empty() ? "Pending" : "Running";
  ContainerResources c;
  c.name = "c";
  c.requests_milli["cpu"] = cpu_milli;
  c.requests_milli["memory"] = memory_bytes * 1000;
  if (gpu) c.requests_milli[kGpu] = 1000;
  p.containers.push_back(c);
  return p;
}

HostResources H(int64_t cpu, int64_t mem, int64_t pods) { return HostResources{cpu, mem, pods}; }

void ExpectClean(const ClusterState& s) {
  AuditReport r = s.Audit();
  EXPECT_EQ(r.stale_summaries, 0) << ::testing::PrintToString(r.problems);
}

class HostRequestsTest : public ::testing::Test {
 protected:
  ClusterState s_{TestCatalog(), MirrorOptions{}};
};

// ---- PodHostRequest ----

TEST(PodHostRequestTest, MaxOfContainersSumAndEachInitContainerPlusOverhead) {
  PodObject p = Pod("p", "n", 500, 1000);
  ContainerResources c2;
  c2.requests_milli["cpu"] = 250;
  c2.requests_milli["memory"] = 3000 * 1000;
  p.containers.push_back(c2);  // containers: cpu 750m, memory 4000
  ContainerResources init_big_cpu;
  init_big_cpu.requests_milli["cpu"] = 2000;
  ContainerResources init_big_mem;
  init_big_mem.requests_milli["memory"] = 9000 * 1000;
  p.init_containers = {init_big_cpu, init_big_mem};
  p.overhead_milli["cpu"] = 100;
  p.overhead_milli["memory"] = 10 * 1000;
  const HostRequest r = PodHostRequest(p);
  EXPECT_EQ(r.cpu_milli, 2000 + 100);     // the cpu-heavy init container wins, per resource
  EXPECT_EQ(r.memory_bytes, 9000 + 10);   // the memory-heavy one wins for memory
  p.init_containers.clear();
  EXPECT_EQ(PodHostRequest(p), (HostRequest{750 + 100, 4000 + 10}));
}

// KEP-753's rule: sidecars (init containers with restartPolicy Always) run beside everything
// started after them, so they add to the app containers and to every later init container.
TEST(PodHostRequestTest, SidecarsAddToTheAppContainersAndToLaterInitContainers) {
  PodObject p = Pod("p", "n", 1000, 1000);  // app: cpu 1, memory 1000
  ContainerResources sidecar_a;
  sidecar_a.requests_milli["cpu"] = 1000;
  sidecar_a.restartable = true;
  ContainerResources init_big;
  init_big.requests_milli["cpu"] = 5000;
  init_big.requests_milli["memory"] = 500 * 1000;
  ContainerResources sidecar_b;
  sidecar_b.requests_milli["cpu"] = 2000;
  sidecar_b.requests_milli["memory"] = 4000 * 1000;
  sidecar_b.restartable = true;
  p.init_containers = {sidecar_a, init_big, sidecar_b};
  // cpu: app 1 + sidecars 1 + 2 = 4 running, but init_big needs 5 beside sidecar_a's 1 = 6.
  // memory: app 1000 + sidecar_b 4000 = 5000 running; init_big 500 (sidecar_a asks none).
  EXPECT_EQ(PodHostRequest(p), (HostRequest{6000, 5000}));
  // Without restartPolicy they are plain init containers: max(app, each init container).
  for (ContainerResources& c : p.init_containers) c.restartable = false;
  EXPECT_EQ(PodHostRequest(p), (HostRequest{5000, 4000}));
}

TEST(AggregatePodRequestTest, SaturatesAtTheCap) {
  PodObject p;
  ContainerResources c;
  c.restartable = true;
  p.containers = {c, c};
  p.init_containers = {c, c};
  constexpr int64_t kCap = int64_t{1} << 62;
  EXPECT_EQ(AggregatePodRequest(p, [](const ContainerResources&) { return kCap; }, kCap), kCap);
  EXPECT_EQ(AggregatePodRequest(p, [](const ContainerResources&) { return int64_t{3}; }, kCap), 12);
}

TEST(PodHostRequestTest, NoRequestsIsZeroAndMemoryRoundsUpToBytes) {
  PodObject p;
  p.containers.push_back(ContainerResources{});
  EXPECT_EQ(PodHostRequest(p), (HostRequest{0, 0}));
  p.containers[0].requests_milli["memory"] = 1;  // "1m" of memory: one byte, rounded up
  EXPECT_EQ(PodHostRequest(p).memory_bytes, 1);
  p.containers[0].limits_milli["cpu"] = 4000;  // limits are not requests
  EXPECT_EQ(PodHostRequest(p).cpu_milli, 0);
}

TEST(PodHostRequestTest, HugeRequestsAreCapped) {
  PodObject p;
  ContainerResources c;
  c.requests_milli["cpu"] = INT64_MAX;
  c.requests_milli["memory"] = INT64_MAX;
  p.containers = {c, c, c};
  p.overhead_milli["cpu"] = INT64_MAX;
  const HostRequest r = PodHostRequest(p);
  EXPECT_EQ(r.cpu_milli, kMaxHostRequest);
  EXPECT_EQ(r.memory_bytes, kMaxHostRequest);  // the cap is on bytes, not milli-bytes
}

// The cap leaves every real pod alone: 24 GiB of memory (openb asks up to 400 GiB) once counted
// as the 16 GiB that 2^44 milli-bytes are.
TEST(PodHostRequestTest, LargeMemoryRequestsCountWhole) {
  PodObject p;
  ContainerResources c;
  c.requests_milli["memory"] = (int64_t{24} << 30) * 1000;
  c.requests_milli["cpu"] = 96000;
  p.containers = {c, c};
  EXPECT_EQ(PodHostRequest(p), (HostRequest{192000, int64_t{48} << 30}));
}

// ---- decoding ----

TEST(HostDecodeTest, AllocatableAndOverheadQuantities) {
  absl::StatusOr<ObjectBatch> b = DecodeObjects(R"({"kind":"List","items":[
    {"kind":"Node","metadata":{"name":"n1"},
     "status":{"allocatable":{"cpu":"127500m","memory":"1Gi","pods":"110"}}},
    {"kind":"Pod","metadata":{"name":"p","namespace":"ns","uid":"u1"},
     "spec":{"nodeName":"n1","overhead":{"cpu":"250m","memory":"120Mi"},
             "initContainers":[{"name":"i","resources":{"requests":{"cpu":"2"}}}],
             "containers":[{"name":"c","resources":{"requests":{"cpu":"1","memory":"1.5Gi"}}}]},
     "status":{"phase":"Running"}}]})");
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(b->pods.size(), 1u);
  EXPECT_EQ(b->pods[0].overhead_milli.at("cpu"), 250);
  EXPECT_EQ(PodHostRequest(b->pods[0]), (HostRequest{2250, (int64_t{3} << 29) + 120 * 1024 * 1024}));
  ClusterState s(TestCatalog(), MirrorOptions{});
  s.ApplyBatch(*b);
  const NodeState* n = s.FindNode("n1");
  ASSERT_NE(n, nullptr);
  EXPECT_EQ(n->allocatable, H(127500, int64_t{1} << 30, 110));
  EXPECT_EQ(s.HostRequested("n1"), H(2250, (int64_t{3} << 29) + 120 * 1024 * 1024, 1));
  int64_t cpu = 0, mem = 0, pods = 0;
  ASSERT_TRUE(s.HostFree(*n, &cpu, &mem, &pods));
  EXPECT_EQ(cpu, 127500 - 2250);
  EXPECT_EQ(pods, 109);
  ExpectClean(s);
}

TEST(HostDecodeTest, MissingAllocatableIsUnknownNotZero) {
  absl::StatusOr<ObjectBatch> b = DecodeObjects(
      R"({"kind":"Node","metadata":{"name":"n1"},"status":{"allocatable":{"cpu":"4"}}})");
  ASSERT_TRUE(b.ok()) << b.status();
  ClusterState s(TestCatalog(), MirrorOptions{});
  s.ApplyBatch(*b);
  const NodeState* n = s.FindNode("n1");
  ASSERT_NE(n, nullptr);
  EXPECT_EQ(n->allocatable, H(4000, kHostUnknown, kHostUnknown));
  int64_t cpu = -7;
  EXPECT_FALSE(s.HostFree(*n, &cpu, nullptr, nullptr));
  EXPECT_EQ(cpu, -7) << "outputs untouched";
}

TEST(HostDecodeTest, MalformedQuantitiesNameTheField) {
  const std::pair<std::string, std::string> cases[] = {
      {R"({"kind":"Node","metadata":{"name":"n"},"status":{"allocatable":{"cpu":"-1"}}})",
       R"(status.allocatable["cpu"])"},
      {R"({"kind":"Node","metadata":{"name":"n"},"status":{"allocatable":{"memory":"12Qi"}}})",
       R"(status.allocatable["memory"])"},
      {R"({"kind":"Node","metadata":{"name":"n"},"status":{"allocatable":{"pods":110}}})",
       R"(status.allocatable["pods"])"},
      {R"({"kind":"Node","metadata":{"name":"n"},"status":{"allocatable":{"cpu":"1e999"}}})",
       R"(status.allocatable["cpu"])"},
      {R"({"kind":"Node","metadata":{"name":"n"},"status":{"allocatable":["cpu"]}})",
       "status.allocatable"},
      {R"({"kind":"Pod","metadata":{"name":"p","namespace":"ns"},"spec":{"overhead":{"cpu":"x"}}})",
       R"(spec.overhead["cpu"])"},
      {R"({"kind":"Pod","metadata":{"name":"p","namespace":"ns"},"spec":{"overhead":7}})",
       "spec.overhead"},
      {R"({"kind":"Pod","metadata":{"name":"p","namespace":"ns"},"spec":{"containers":[
          {"name":"c","resources":{"requests":{"memory":"-5Mi"}}}]}})",
       R"(spec.containers[0].resources.requests["memory"])"},
      {R"({"kind":"Pod","metadata":{"name":"p","namespace":"ns"},"spec":{"initContainers":[
          {"name":"c","resources":{"requests":{"cpu":""}}}]}})",
       R"(spec.initContainers[0].resources.requests["cpu"])"},
  };
  for (const auto& [json, field] : cases) {
    absl::StatusOr<ObjectBatch> b = DecodeObjects(json);
    ASSERT_FALSE(b.ok()) << json;
    EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(b.status().message()), HasSubstr(field)) << json;
  }
}

TEST(HostDecodeTest, AFailedDocumentLeavesTheStateUnchanged) {
  Mirror mirror(TestCatalog(), MirrorOptions{});
  mirror.Write([&](ClusterState& s) {
    s.ApplyNode(Node("n1"));
    s.ApplyPod(Pod("a", "n1", 500, 1000));
  });
  // The second item is malformed: nothing of the document is applied.
  absl::StatusOr<ObjectBatch> b = DecodeObjects(R"({"kind":"List","items":[
    {"kind":"Pod","metadata":{"name":"b","namespace":"ns","uid":"b-uid"},
     "spec":{"nodeName":"n1","containers":[{"name":"c","resources":{"requests":{"cpu":"1"}}}]}},
    {"kind":"Node","metadata":{"name":"n1"},"status":{"allocatable":{"cpu":"lots"}}}]})");
  ASSERT_FALSE(b.ok());
  mirror.Read([&](const ClusterState& s) {
    EXPECT_EQ(s.HostRequested("n1"), H(500, 1000, 1));
    EXPECT_EQ(s.FindNode("n1")->allocatable, H(8000, int64_t{32} << 30, 110));
  });
}

// ---- sums ----

TEST_F(HostRequestsTest, NonGpuAndGpuPodsBothCountOnce) {
  s_.ApplyNode(Node("n1"));
  s_.ApplyPod(Pod("web", "n1", 500, 1 << 20));
  s_.ApplyPod(Pod("train", "n1", 2000, 4 << 20, /*gpu=*/true));
  EXPECT_EQ(s_.HostRequested("n1"), H(2500, 5 << 20, 2));
  // Watch replays and relist-style reapplication change nothing.
  s_.ApplyPod(Pod("web", "n1", 500, 1 << 20));
  s_.ApplyPod(Pod("train", "n1", 2000, 4 << 20, true));
  EXPECT_EQ(s_.HostRequested("n1"), H(2500, 5 << 20, 2));
  EXPECT_EQ(s_.host_pod_count(), 2u);
  ExpectClean(s_);
}

TEST_F(HostRequestsTest, PendingPodsDoNotCountUntilBound) {
  s_.ApplyNode(Node("n1"));
  s_.ApplyPod(Pod("web", "", 500, 1000));
  EXPECT_EQ(s_.HostRequested("n1"), H(0, 0, 0));
  EXPECT_EQ(s_.host_pod_count(), 0u);
  s_.ApplyPod(Pod("web", "n1", 500, 1000));
  EXPECT_EQ(s_.HostRequested("n1"), H(500, 1000, 1));
}

TEST_F(HostRequestsTest, UpdateRebindTerminalAndDelete) {
  s_.ApplyNode(Node("n1"));
  s_.ApplyNode(Node("n2"));
  s_.ApplyPod(Pod("web", "n1", 500, 1000));
  s_.ApplyPod(Pod("web", "n1", 700, 3000));  // resized: replaced, not added
  EXPECT_EQ(s_.HostRequested("n1"), H(700, 3000, 1));
  s_.ApplyPod(Pod("web", "n2", 700, 3000));  // rebound (recreated elsewhere with the same uid)
  EXPECT_EQ(s_.HostRequested("n1"), H(0, 0, 0));
  EXPECT_EQ(s_.HostRequested("n2"), H(700, 3000, 1));
  EXPECT_EQ(s_.host_requested().count("n1"), 0u) << "an empty entry is dropped";
  PodObject done = Pod("web", "n2", 700, 3000);
  done.phase = "Succeeded";
  s_.ApplyPod(done);
  EXPECT_EQ(s_.HostRequested("n2"), H(0, 0, 0));
  s_.ApplyPod(done);  // replayed terminal event
  done.phase = "Failed";
  s_.ApplyPod(done);
  EXPECT_EQ(s_.host_pod_count(), 0u);
  s_.ApplyPod(Pod("db", "n2", 1000, 1000));
  PodObject terminating = Pod("db", "n2", 1000, 1000);
  terminating.terminating = true;
  s_.ApplyPod(terminating);
  EXPECT_EQ(s_.HostRequested("n2"), H(1000, 1000, 1)) << "counts until deleted";
  s_.RemovePod("db-uid", "ns/db");
  s_.RemovePod("db-uid", "ns/db");  // a replayed delete
  EXPECT_EQ(s_.HostRequested("n2"), H(0, 0, 0));
  ExpectClean(s_);
}

TEST_F(HostRequestsTest, ARecreatedPodWithANewUidIsAnotherPod) {
  s_.ApplyNode(Node("n1"));
  s_.ApplyPod(Pod("web", "n1", 500, 1000));
  PodObject again = Pod("web", "n1", 300, 1000);
  again.uid = "web-uid-2";
  s_.ApplyPod(again);
  EXPECT_EQ(s_.HostRequested("n1"), H(800, 2000, 2));
  s_.RemovePod("web-uid", "ns/web");
  EXPECT_EQ(s_.HostRequested("n1"), H(300, 1000, 1));
}

TEST_F(HostRequestsTest, NodeRemovalAndReturn) {
  s_.ApplyNode(Node("n1"));
  s_.ApplyPod(Pod("web", "n1", 500, 1000));
  s_.RemoveNode("n1");
  EXPECT_EQ(s_.FindNode("n1"), nullptr);
  // The pod's deletion has not arrived: it still counts there (and shows when the node returns).
  EXPECT_EQ(s_.HostRequested("n1"), H(500, 1000, 1));
  s_.ApplyNode(Node("n1", 4000));
  const NodeState* n = s_.FindNode("n1");
  ASSERT_NE(n, nullptr);
  int64_t cpu = 0;
  ASSERT_TRUE(s_.HostFree(*n, &cpu, nullptr, nullptr));
  EXPECT_EQ(cpu, 3500);
  // A node kept removed because a GPU pod still holds a unit there knows no allocatable.
  s_.ApplyPod(Pod("train", "n1", 1000, 1000, true));
  s_.RemoveNode("n1");
  n = s_.FindNode("n1");
  ASSERT_NE(n, nullptr);
  EXPECT_TRUE(n->removed);
  EXPECT_FALSE(s_.HostFree(*n, &cpu, nullptr, nullptr));
  ExpectClean(s_);
}

TEST_F(HostRequestsTest, AllocatableChangesAreApplied) {
  EXPECT_TRUE(s_.ApplyNode(Node("n1", 8000)));
  EXPECT_FALSE(s_.ApplyNode(Node("n1", 8000)));
  EXPECT_TRUE(s_.ApplyNode(Node("n1", 6000))) << "only the host view changed";
  EXPECT_EQ(s_.FindNode("n1")->allocatable.cpu_milli, 6000);
  EXPECT_TRUE(s_.ApplyNode(Node("n1", 6000, -1)));
  EXPECT_EQ(s_.FindNode("n1")->allocatable.memory_bytes, kHostUnknown);
}

TEST(HostRelistTest, ReplaceAllRebuildsTheSums) {
  Mirror mirror(TestCatalog(), MirrorOptions{});
  mirror.Write([&](ClusterState& s) {
    s.ApplyNode(Node("n1"));
    s.ApplyPod(Pod("gone", "n1", 100, 100));   // deleted while the watch was down
    s.ApplyPod(Pod("web", "n1", 500, 1000));
  });
  ObjectBatch batch;
  batch.nodes.push_back(Node("n1"));
  batch.pods.push_back(Pod("web", "n1", 500, 1000));
  batch.pods.push_back(Pod("new", "n1", 250, 250));
  PodObject done = Pod("old", "n1", 9000, 9000);
  done.phase = "Succeeded";
  batch.pods.push_back(done);
  mirror.ReplaceAll(batch, absl::Now());
  mirror.ReplaceAll(batch, absl::Now());  // a second relist of the same objects
  mirror.Read([&](const ClusterState& s) {
    EXPECT_EQ(s.HostRequested("n1"), H(750, 1250, 2));
    ExpectClean(s);
  });
}

// ---- recent host demand (ClusterState::recent_host_demand) ----

TEST(RecentHostDemandTest, EachPodCountsOnceWhenFirstBoundByWhetherItAsksForAGpu) {
  MirrorOptions options;
  options.host_demand_half_life_pods = 1;  // each newer pod halves the earlier ones
  ClusterState s(TestCatalog(), options);
  s.ApplyNode(Node("n1"));
  s.ApplyPod(Pod("web", "", 4000, 1000));  // pending: not an arrival on a host yet
  EXPECT_EQ(s.recent_host_demand().other_cpu_milli, 0);
  s.ApplyPod(Pod("web", "n1", 4000, 1000));
  s.ApplyPod(Pod("web", "n1", 4000, 1000));  // a watch replay of the same pod
  s.ApplyPod(Pod("train", "n1", 2000, 3000, /*gpu=*/true));
  const ClusterState::RecentHostDemand& d = s.recent_host_demand();
  EXPECT_DOUBLE_EQ(d.gpu_cpu_milli, 2000);
  EXPECT_DOUBLE_EQ(d.gpu_memory_bytes, 3000);
  EXPECT_DOUBLE_EQ(d.other_cpu_milli, 4000 / 2.0);  // halved by the one newer pod
  EXPECT_DOUBLE_EQ(d.other_memory_bytes, 1000 / 2.0);

  // Our reservation counts the pod as it arrives on the host; the watch showing it bound
  // afterwards is the same pod.
  PodObject reserved = Pod("infer", "n1", 1000, 1000, /*gpu=*/true);
  Assignment a;
  a.node = "n1";
  a.offering = 0;
  a.units = {1};
  ASSERT_TRUE(s.Reserve(PodClaim{"ns/infer", reserved.uid, "ns", "ns"}, a, HoldingSource::kReserved,
                        PodHostRequest(reserved))
                  .ok());
  s.ApplyPod(reserved);
  EXPECT_DOUBLE_EQ(s.recent_host_demand().gpu_cpu_milli, 2000 / 2.0 + 1000);
  EXPECT_DOUBLE_EQ(s.recent_host_demand().other_cpu_milli, 4000 / 4.0);
}

TEST(RecentHostDemandTest, ABindTheApiServerRefusedIsNoArrivalTheRetryCountsOnce) {
  MirrorOptions options;
  options.host_demand_half_life_pods = 1;  // each newer pod halves the earlier ones
  ClusterState s(TestCatalog(), options);
  s.ApplyNode(Node("n1"));
  PodObject retried = Pod("infer", "n1", 1000, 1000, /*gpu=*/true);
  const PodClaim claim{"ns/infer", retried.uid, "ns", "ns"};
  const std::string id = PodIdOf(retried.uid, claim.key);
  Assignment a;
  a.node = "n1";
  a.offering = 0;
  a.units = {1};
  ASSERT_TRUE(s.Reserve(claim, a, HoldingSource::kReserved, PodHostRequest(retried)).ok());
  s.ApplyPod(Pod("web", "n1", 4000, 1000));  // a pod without a GPU arrives meanwhile
  EXPECT_DOUBLE_EQ(s.recent_host_demand().gpu_cpu_milli, 1000 / 2.0);
  // The API server refused the bind: the pod did not arrive, and its weight leaves the window.
  ASSERT_TRUE(s.ReleaseReservation(id, a));
  EXPECT_DOUBLE_EQ(s.recent_host_demand().gpu_cpu_milli, 0);
  EXPECT_DOUBLE_EQ(s.recent_host_demand().other_cpu_milli, 4000);
  // kube-scheduler retries, and the retry binds: one GPU pod in the window, the newest.
  ASSERT_TRUE(s.Reserve(claim, a, HoldingSource::kReserved, PodHostRequest(retried)).ok());
  s.ApplyPod(retried);
  EXPECT_DOUBLE_EQ(s.recent_host_demand().gpu_cpu_milli, 1000);
  EXPECT_DOUBLE_EQ(s.recent_host_demand().other_cpu_milli, 4000 / 2.0);
  EXPECT_EQ(s.HostRequested("n1"), H(5000, 2000, 2));
}

TEST(RecentHostDemandTest, ARelistKeepsTheWindowItDoesNotRebuildIt) {
  Mirror mirror(TestCatalog(), MirrorOptions{});
  ObjectBatch batch;
  batch.nodes.push_back(Node("n1"));
  batch.pods.push_back(Pod("web", "n1", 500, 1000));
  mirror.ReplaceAll(batch, absl::Now());
  ClusterState::RecentHostDemand before;
  mirror.Read([&](const ClusterState& s) { before = s.recent_host_demand(); });
  ASSERT_DOUBLE_EQ(before.other_cpu_milli, 500);  // what the first list counted
  // A relist shows the pods already counted, and a GPU pod that arrived while the watch was
  // down: its arrival cannot be told from the others' in a list, so the window stays.
  batch.pods.push_back(Pod("train", "n1", 2000, 1000, /*gpu=*/true));
  mirror.ReplaceAll(batch, absl::Now());
  mirror.Read([&](const ClusterState& s) {
    EXPECT_DOUBLE_EQ(s.recent_host_demand().other_cpu_milli, before.other_cpu_milli);
    EXPECT_DOUBLE_EQ(s.recent_host_demand().gpu_cpu_milli, 0);
    EXPECT_EQ(s.HostRequested("n1"), H(2500, 2000, 2));  // the host view itself is rebuilt
  });
}

// ---- random run against a recount ----

TEST(HostRandomTest, SumsMatchARecountOfTheLatestObjects) {
  std::mt19937 rng(20261202);
  ClusterState s(TestCatalog(), MirrorOptions{});
  const std::vector<std::string> nodes = {"n0", "n1", "n2", "n3"};
  std::map<std::string, PodObject> live;  // by uid: what the API holds now
  for (int step = 0; step < 4000; ++step) {
    const int op = static_cast<int>(rng() % 10);
    const std::string name = absl::StrCat("p", rng() % 40);
    if (op == 0) {
      s.RemovePod(name + "-uid", "ns/" + name);
      live.erase(name + "-uid");
    } else if (op == 1) {
      const std::string& n = nodes[rng() % nodes.size()];
      if (rng() % 2 == 0) {
        s.RemoveNode(n);
      } else {
        s.ApplyNode(Node(n, static_cast<int64_t>(rng() % 16000)));
      }
    } else {
      const int where = static_cast<int>(rng() % (nodes.size() + 1));
      PodObject p = Pod(name, where == 0 ? "" : nodes[where - 1],
                        static_cast<int64_t>(rng() % 4000), static_cast<int64_t>(rng() % 100000),
                        rng() % 3 == 0);
      if (rng() % 5 == 0) p.phase = rng() % 2 ? "Succeeded" : "Failed";
      if (rng() % 4 == 0) p.init_containers.push_back(p.containers[0]);
      if (rng() % 4 == 0) p.overhead_milli["cpu"] = 100;
      s.ApplyPod(p);
      live[p.uid] = p;
    }
    if (step % 97 == 0) ExpectClean(s);
  }
  std::map<std::string, HostResources> want;
  for (const auto& [uid, p] : live) {
    if (p.node_name.empty() || p.Terminal()) continue;
    const HostRequest r = PodHostRequest(p);
    HostResources& w = want[p.node_name];
    w.cpu_milli += r.cpu_milli;
    w.memory_bytes += r.memory_bytes;
    ++w.pods;
  }
  for (const std::string& n : nodes) {
    EXPECT_EQ(s.HostRequested(n), want[n]) << n;
  }
  EXPECT_EQ(s.host_requested().size(),
            static_cast<size_t>(std::count_if(want.begin(), want.end(),
                                              [](const auto& kv) { return kv.second.pods > 0; })));
  ExpectClean(s);
}

}  // namespace
}  // namespace gse
