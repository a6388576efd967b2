// The trace replayer (perf/): its trace format, the openb importer, the driver's outcomes on
// hand-checked traces, determinism, HTTP = in-process placements, the independent audit, and
// the fragmentation policy's arithmetic.
#include <algorithm>
#include <cstdlib>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "perf/openb_import.h"
#include "perf/in_process_placer.h"
#include "perf/replay_engine.h"
#include "perf/replay_http.h"
#include "perf/replay_report.h"
#include "perf/trace.h"
#include "scoring/fragmentation_policy.h"
#include "scoring/task_mix.h"
#include "testsupport/paths.h"

namespace gse::replay {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kCatalog[] = R"(apiVersion: gpu.themelio.io/v1
kind: GpuCatalog
offerings:
- resource: nvidia.com/gpu
- resource: nvidia.com/gpu.mps
  sharing: mps
  replicas: 100
- resource: nvidia.com/mig-1g.5gb.shared
  unit: mig
  migProfile: 1g.5gb
  sharing: time-sliced
  replicas: 2
)";

std::string NodeJson(const std::string& name, int gpus, int cpu = 8, int mig_slices = 0) {
  std::string alloc = absl::StrCat("\"cpu\":\"", cpu, "\",\"memory\":\"64Gi\",\"pods\":\"110\"");
  std::string labels = absl::StrCat("\"nvidia.com/gpu.count\":\"", gpus, "\"");
  if (gpus > 0) absl::StrAppend(&alloc, ",\"nvidia.com/gpu\":\"", gpus, "\"");
  if (mig_slices > 0) {
    absl::StrAppend(&alloc, ",\"nvidia.com/mig-1g.5gb.shared\":\"", mig_slices * 2, "\"");
  }
  return absl::StrCat("{\"apiVersion\":\"v1\",\"kind\":\"Node\",\"metadata\":{\"name\":\"", name,
                      "\",\"labels\":{", labels, "}},\"status\":{\"allocatable\":{", alloc, "}}}");
}

std::string Arrive(const std::string& name, const std::string& resources, const std::string& ns = "team-a") {
  return absl::StrCat("{\"type\":\"pod_arrive\",\"namespace\":\"", ns, "\",\"name\":\"", name,
                      "\",\"resources\":{", resources, "}}");
}

std::string Header() {
  Trace t;
  t.header.catalog = kCatalog;
  return HeaderJson(t.header);
}

ReplayInput InputOf(const std::string& text) {
  absl::StatusOr<Trace> trace = ParseTrace(text, "test.jsonl");
  EXPECT_TRUE(trace.ok()) << trace.status();
  absl::StatusOr<ReplayInput> in = PrepareInput(*std::move(trace), "", "");
  EXPECT_TRUE(in.ok()) << in.status();
  return *std::move(in);
}

RunResult RunInProcess(const ReplayInput& in, const std::string& policy, ReplayOptions o = {}) {
  absl::StatusOr<std::unique_ptr<PlacementPolicy>> p = MakeReplayPolicy(policy, in);
  EXPECT_TRUE(p.ok()) << p.status();
  DecisionCore::Options core;
  core.every_pod = o.extender_all_pods;
  InProcessPlacer placer(in.catalog, *std::move(p), core);
  o.policy = policy;
  o.keep_placements = true;
  absl::StatusOr<RunResult> r = RunReplay(in, placer, o);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *std::move(r) : RunResult{};
}

RunResult RunHttp(const ReplayInput& in, const std::string& policy, ReplayOptions o = {},
                  bool node_cache_capable = true) {
  absl::StatusOr<std::unique_ptr<PlacementPolicy>> p = MakeReplayPolicy(policy, in);
  EXPECT_TRUE(p.ok()) << p.status();
  HttpPlacerOptions ho;
  ho.catalog = in.catalog;
  ho.node_cache_capable = node_cache_capable;
  ho.score_all_pods = o.extender_all_pods;  // the service's --score-all-pods
  HttpPlacer placer(ho, *std::move(p));
  o.policy = policy;
  o.keep_placements = true;
  absl::StatusOr<RunResult> r = RunReplay(in, placer, o);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *std::move(r) : RunResult{};
}

// Extender scores alone decide (no in-tree plugin scores), so outcomes can be worked out by
// hand from DESIGN.md's affinity-pack rules; ties go to the lowest node name.
ReplayOptions ExtenderOnly() {
  ReplayOptions o;
  o.score_plugins.clear();
  return o;
}

// A trace with node events and a deletion:
//   p1 (1 GPU): a and b both empty, tie -> a.   p2 (1 GPU): a leaves no empty unit (10) -> a.
//   p3 (1 GPU): a is full -> b.                 delete p1: a/gpu/0 free again.
//   p4 (2 GPUs): a and b have one free GPU each -> fails in kube-scheduler's own fit.
//   node c (2 GPUs) added; p5 (2 GPUs) -> c.    p6 asks for 100 cpus -> fails on cpu.
//   t1, t2 (time-sliced, team-a): c is the only node with MIG slices; t1 opens c/mig/0,
//   t2 joins it (own unit); t3 of team-b cannot share team-a's unit -> c/mig/1.
std::string HandTrace() {
  std::vector<std::string> lines = {
      Header(),
      absl::StrCat("{\"type\":\"objects\",\"list\":{\"kind\":\"List\",\"items\":[", NodeJson("a", 2), ",",
                   NodeJson("b", 2), "]}}"),
      Arrive("p1", "\"cpu\":\"1\",\"nvidia.com/gpu\":\"1\""),
      Arrive("p2", "\"cpu\":\"1\",\"nvidia.com/gpu\":\"1\""),
      Arrive("p3", "\"cpu\":\"1\",\"nvidia.com/gpu\":\"1\""),
      "{\"type\":\"pod_delete\",\"namespace\":\"team-a\",\"name\":\"p1\"}",
      Arrive("p4", "\"cpu\":\"1\",\"nvidia.com/gpu\":\"2\""),
      absl::StrCat("{\"type\":\"node_add\",\"node\":", NodeJson("c", 2, 8, 2), "}"),
      Arrive("p5", "\"cpu\":\"1\",\"nvidia.com/gpu\":\"2\""),
      Arrive("p6", "\"cpu\":\"100\",\"nvidia.com/gpu\":\"1\""),
      Arrive("t1", "\"nvidia.com/mig-1g.5gb.shared\":\"1\""),
      Arrive("t2", "\"nvidia.com/mig-1g.5gb.shared\":\"1\""),
      Arrive("t3", "\"nvidia.com/mig-1g.5gb.shared\":\"1\"", "team-b"),
  };
  return absl::StrJoin(lines, "\n");
}

TEST(ReplayTraceFormat, HandCheckedOutcome) {
  const ReplayInput in = InputOf(HandTrace());
  const RunResult r = RunInProcess(in, "affinity-pack", ExtenderOnly());
  EXPECT_THAT(r.placements,
              ElementsAre("team-a/p1 a nvidia.com/gpu/0x1", "team-a/p2 a nvidia.com/gpu/1x1",
                          "team-a/p3 b nvidia.com/gpu/0x1", "team-a/p5 c nvidia.com/gpu/0,1x1",
                          "team-a/t1 c nvidia.com/mig-1g.5gb.shared/0x1",
                          "team-a/t2 c nvidia.com/mig-1g.5gb.shared/0x1",
                          "team-b/t3 c nvidia.com/mig-1g.5gb.shared/1x1"));
  EXPECT_EQ(r.pods_arrived, 9);
  EXPECT_EQ(r.pods_placed, 7);
  EXPECT_EQ(r.pods_deleted, 1);
  EXPECT_EQ(r.pods_failed.at("insufficient_nvidia.com/gpu"), 1);
  EXPECT_EQ(r.pods_failed.at("insufficient_cpu"), 1);
  EXPECT_EQ(r.tickets_placed, 3);
  EXPECT_EQ(r.tickets_on_owned_unit, 1);
  EXPECT_DOUBLE_EQ(r.affinity_ratio, 1.0 / 3);
  // team-a's two tickets fit one unit of 2, team-b's one needs its own: no packing opens
  // fewer than 2 units for 3 tickets, and this run opened exactly those.
  EXPECT_EQ(r.unit_openings_floor, 2);
  EXPECT_DOUBLE_EQ(r.affinity_ceiling, 1.0 / 3);
  EXPECT_EQ(r.audit.oversubscribed_units, 0);
  ASSERT_TRUE(r.mirror_audit.has_value());
  EXPECT_EQ(r.mirror_audit->oversubscribed_units, 0);
}

// "project" on a pod_arrive labels its namespace: a pod of namespace "other" charged to team-a
// joins team-a's time-sliced unit instead of opening one.
TEST(ReplayTraceFormat, ProjectFieldLabelsTheNamespace) {
  const std::string text = absl::StrJoin(
      std::vector<std::string>{Header(),
       absl::StrCat("{\"type\":\"node_add\",\"node\":", NodeJson("c", 0, 8, 2), "}"),
       Arrive("t1", "\"nvidia.com/mig-1g.5gb.shared\":\"1\""),
       "{\"type\":\"pod_arrive\",\"namespace\":\"other\",\"name\":\"t2\",\"project\":\"team-a\","
       "\"resources\":{\"nvidia.com/mig-1g.5gb.shared\":\"1\"}}",
       Arrive("t3", "\"nvidia.com/mig-1g.5gb.shared\":\"1\"", "other2")},
      "\n");
  const RunResult r = RunInProcess(InputOf(text), "affinity-pack", ExtenderOnly());
  EXPECT_THAT(r.placements, ElementsAre("team-a/t1 c nvidia.com/mig-1g.5gb.shared/0x1",
                                        "other/t2 c nvidia.com/mig-1g.5gb.shared/0x1",
                                        "other2/t3 c nvidia.com/mig-1g.5gb.shared/1x1"));
  EXPECT_EQ(r.tickets_on_owned_unit, 1);
}

// A spill forced by the host is not avoidable: t2 asks for more cpu than node c has left
// beside team-a's unit (8 cpus, t1 took 1), so it must open a unit on d.
TEST(ReplayAvoidableSpills, ASpillForcedByCpuIsNotAvoidable) {
  const std::string text = absl::StrJoin(
      std::vector<std::string>{Header(),
       absl::StrCat("{\"type\":\"node_add\",\"node\":", NodeJson("c", 0, 8, 1), "}"),
       absl::StrCat("{\"type\":\"node_add\",\"node\":", NodeJson("d", 0, 8, 1), "}"),
       Arrive("t1", "\"cpu\":\"1\",\"nvidia.com/mig-1g.5gb.shared\":\"1\""),
       Arrive("t2", "\"cpu\":\"8\",\"nvidia.com/mig-1g.5gb.shared\":\"1\"")},
      "\n");
  const RunResult r = RunInProcess(InputOf(text), "affinity-pack", ExtenderOnly());
  EXPECT_THAT(r.placements, ElementsAre("team-a/t1 c nvidia.com/mig-1g.5gb.shared/0x1",
                                        "team-a/t2 d nvidia.com/mig-1g.5gb.shared/0x1"));
  EXPECT_EQ(r.spills, 1);
  EXPECT_EQ(r.avoidable_spills, 0);
  // The ceiling leaves cpu out: both tickets fit one unit of 2.
  EXPECT_EQ(r.unit_openings_floor, 1);
  EXPECT_DOUBLE_EQ(r.affinity_ceiling, 0.5);
}

// kube-scheduler's percentageOfNodesToScore hands the extender 100 of 120 nodes, starting
// where the last cycle stopped. t1 opens team-a's unit on n000 (its window starts at n000);
// each later cycle starts 100 nodes on (n100, n080, n060, n040 for four cpu-only pods), so
// t2's window is n020..n119: t2 opens a second unit although n000 had a free ticket and room
// for it. That spill was avoidable.
TEST(ReplayAvoidableSpills, ASpillPastTheCandidateCutOffIsAvoidable) {
  std::vector<std::string> lines = {Header()};
  for (int i = 0; i < 120; ++i) {
    lines.push_back(absl::StrCat("{\"type\":\"node_add\",\"node\":",
                                 NodeJson(absl::StrFormat("n%03d", i), 0, 8, 1), "}"));
  }
  lines.push_back(Arrive("t1", "\"cpu\":\"1\",\"nvidia.com/mig-1g.5gb.shared\":\"1\""));
  for (int i = 0; i < 4; ++i) lines.push_back(Arrive(absl::StrCat("cpu", i), "\"cpu\":\"1\""));
  lines.push_back(Arrive("t2", "\"cpu\":\"1\",\"nvidia.com/mig-1g.5gb.shared\":\"1\""));
  ReplayOptions o = ExtenderOnly();
  o.percentage_of_nodes_to_score = 1;  // at least 100 nodes, as kube-scheduler
  const RunResult r = RunInProcess(InputOf(absl::StrJoin(lines, "\n")), "affinity-pack", o);
  ASSERT_EQ(r.placements.size(), 6u);
  EXPECT_EQ(r.placements.front(), "team-a/t1 n000 nvidia.com/mig-1g.5gb.shared/0x1");
  EXPECT_EQ(r.placements.back(), "team-a/t2 n020 nvidia.com/mig-1g.5gb.shared/0x1");
  EXPECT_EQ(r.spills, 1);
  EXPECT_EQ(r.avoidable_spills, 1);
}

// The allocation ceiling: per pool of GPU capacity, the lesser of capacity and the request
// that arrived for it, placed or not. a: 4 GPUs; c: one 1g slice (1/7 GPU, 2 tickets).
// p1 takes a GPU, p2 (a GPU and 100 cpus) fits nowhere but still arrived for the GPU pool,
// t1 takes a ticket (1/14): (min(4, 2) + min(1/7, 1/14)) / 4 GPUs (c's nvidia.com/gpu.count
// label says 0, so the cluster counts a's 4).
TEST(ReplayAllocationCeiling, TheLesserOfCapacityAndRequestPerPool) {
  const std::string text = absl::StrJoin(
      std::vector<std::string>{Header(),
       absl::StrCat("{\"type\":\"objects\",\"list\":{\"kind\":\"List\",\"items\":[", NodeJson("a", 4), ",",
                    NodeJson("c", 0, 8, 1), "]}}"),
       Arrive("p1", "\"cpu\":\"1\",\"nvidia.com/gpu\":\"1\""),
       Arrive("p2", "\"cpu\":\"100\",\"nvidia.com/gpu\":\"1\""),
       Arrive("t1", "\"cpu\":\"1\",\"nvidia.com/mig-1g.5gb.shared\":\"1\"")},
      "\n");
  const RunResult r = RunInProcess(InputOf(text), "affinity-pack", ExtenderOnly());
  EXPECT_EQ(r.pods_failed.at("insufficient_cpu"), 1);
  EXPECT_DOUBLE_EQ(r.gpu_allocation, (1 + 1.0 / 14) / 4);
  EXPECT_DOUBLE_EQ(r.allocation_ceiling, (2 + 1.0 / 14) / 4);
}

TEST(UnitOpeningFloor, CountsTheUnitsEachBusyPeriodNeedsAtItsPeak) {
  UnitOpeningFloor floor;
  const OfferingId ts = 3;
  floor.Placed("a/1", "a", ts, 2);
  floor.Placed("a/2", "a", ts, 2);
  EXPECT_EQ(floor.openings(), 1);
  floor.Placed("a/3", "a", ts, 2);  // 3 tickets need 2 units of 2
  EXPECT_EQ(floor.openings(), 2);
  floor.Removed("a/3");
  floor.Placed("a/4", "a", ts, 2);  // back to 3: the second unit may still be open
  EXPECT_EQ(floor.openings(), 2);
  floor.Placed("a/4", "a", ts, 2);  // the same pod again counts once
  floor.Removed("a/1");
  floor.Removed("a/2");
  floor.Removed("a/4");  // no ticket left: every unit of a's was released
  floor.Removed("a/4");
  floor.Removed("never/placed");
  floor.Placed("a/5", "a", ts, 2);
  EXPECT_EQ(floor.openings(), 3);
  floor.Placed("b/1", "b", ts, 2);  // another project never shares a's unit
  floor.Placed("a/6", "a", ts + 1, 2);  // nor does another offering
  EXPECT_EQ(floor.openings(), 5);
  floor.Placed("a/7", "a", ts, 0);  // no node offers it: nothing to count
  EXPECT_EQ(floor.openings(), 5);
}

TEST(ReplayTraceFormat, RecordReplaysTheSamePlacements) {
  const ReplayInput in = InputOf(HandTrace());
  const std::string path = ::testing::TempDir() + "/replay_record.jsonl";
  absl::StatusOr<std::unique_ptr<TraceWriter>> w = TraceWriter::Open(path, in.trace.header);
  ASSERT_TRUE(w.ok()) << w.status();
  ReplayOptions o = ExtenderOnly();
  o.record = w->get();
  const RunResult first = RunInProcess(in, "affinity-pack", o);
  ASSERT_TRUE((*w)->Close().ok());
  absl::StatusOr<Trace> again = LoadTraceFile(path);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->events.size(), in.trace.events.size());
  absl::StatusOr<ReplayInput> in2 = PrepareInput(*std::move(again), "", "");
  ASSERT_TRUE(in2.ok()) << in2.status();
  EXPECT_EQ(RunInProcess(*in2, "affinity-pack", ExtenderOnly()).placements, first.placements);
}

TEST(ReplayTraceFormat, ErrorsNameLineAndField) {
  const std::string good = Arrive("p", "\"nvidia.com/gpu\":\"1\"");
  struct Case {
    std::string text;
    std::string want;
  } cases[] = {
      {good + "\n{\"type\":\"pod_arrive\",\"namespace\":\"x\"}", "t.jsonl:2: name: missing"},
      {good + "\n\n" + Arrive("q", "\"cpu\":\"lots\""), "t.jsonl:3: resources[\"cpu\"]"},
      {"{\"type\":\"teleport\"}", "t.jsonl:1: type: unknown event type \"teleport\""},
      {good + "\n" + Header(), "t.jsonl:2: type: header is only allowed on the first line"},
      {"{\"type\":\"pod_arrive\",\"namespace\":\"x\",\"name\":\"y\",\"colour\":1}", "t.jsonl:1: colour: unknown field"},
      {"{\"type\":\"pod_arrive\",\"namespace\":\"x\",\"name\":\"y\",\"affinity\":[{\"key\":\"k\",\"operator\":\"Near\"}]}",
       "t.jsonl:1: affinity[0].operator"},
      {"{not json", "t.jsonl:1:"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<Trace> t = ParseTrace(c.text, "t.jsonl");
    ASSERT_FALSE(t.ok()) << c.text;
    EXPECT_THAT(std::string(t.status().message()), HasSubstr(c.want)) << c.text;
  }
}

// ---- openb

constexpr char kNodesCsv[] =
    "sn,cpu_milli,memory_mib,gpu,model\n"
    "n-0,16000,65536,1,T4\n"
    "n-1,16000,65536,2,P100\n";

TEST(OpenbImport, MapsPodsOntoCatalogResources) {
  absl::StatusOr<std::vector<OpenbNode>> nodes = ParseOpenbNodes(kNodesCsv, "nodes.csv");
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  absl::StatusOr<std::vector<OpenbPod>> pods = ParseOpenbPods(
      "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos\n"
      "p-0,4000,1024,1,1000,,LS\n"
      "p-1,2000,1024,1,333,T4|P100,LS\n"
      "p-2,1000,512,0,0,,BE\n"
      "p-3,8000,2048,2,1000,,LS\n",
      "pods.csv");
  ASSERT_TRUE(pods.ok()) << pods.status();
  OpenbOptions o;
  o.load = 0;  // the file once
  o.projects = {{"vcA", 3}, {"vcB", 1}};
  absl::StatusOr<OpenbImport> imp = ImportOpenb(*nodes, *pods, o);
  ASSERT_TRUE(imp.ok()) << imp.status();
  EXPECT_EQ(imp->cluster_gpus, 3);
  const std::vector<Event>& ev = imp->trace.events;
  ASSERT_EQ(ev.size(), 5u);  // objects + 4 pods
  EXPECT_EQ(ev[0].type, EventType::kObjects);
  EXPECT_EQ(ev[1].pod.resources.at("nvidia.com/gpu"), "1");
  EXPECT_EQ(ev[2].pod.resources.at("nvidia.com/gpu.mps"), "34");  // ceil(333 * 100 / 1000)
  ASSERT_EQ(ev[2].pod.affinity.size(), 1u);
  EXPECT_EQ(ev[2].pod.affinity[0].key, "nvidia.com/gpu.product");
  EXPECT_THAT(ev[2].pod.affinity[0].values, ElementsAre("T4", "P100"));
  EXPECT_EQ(ev[3].pod.resources.count("nvidia.com/gpu"), 0u);
  EXPECT_EQ(ev[3].pod.resources.at("cpu"), "1000m");
  EXPECT_EQ(ev[4].pod.resources.at("nvidia.com/gpu"), "2");
  EXPECT_DOUBLE_EQ(ev[2].pod.gpu, 0.333);
  for (size_t i = 1; i < ev.size(); ++i) {
    EXPECT_TRUE(ev[i].pod.namespace_name == "vca" || ev[i].pod.namespace_name == "vcb");
  }
  EXPECT_THAT(imp->trace.header.twins, ElementsAre(std::make_pair(std::string("nvidia.com/gpu"),
                                                                  std::string("nvidia.com/gpu.mps"))));
}

TEST(OpenbImport, MalformedRowsNameTheLine) {
  struct Case {
    bool nodes;
    std::string csv;
    std::string want;
  } cases[] = {
      {true, "sn,cpu_milli,memory_mib,gpu,model\nn-0,16000,65536,1,T4\nn-1,x,1,1,T4\n",
       "nodes.csv:3: cpu_milli: \"x\" is not an integer"},
      {true, "sn,cpu_milli,memory_mib,gpu,model\nn-0,16000,65536,1\n", "nodes.csv:2: 4 fields, the header has 5"},
      {true, "name,cpu,mem,gpu,model\n", "nodes.csv:1: header: column 1 must be \"sn\""},
      {true, "sn,cpu_milli,memory_mib,gpu,model\nn-0,16000,65536,99,T4\n", "nodes.csv:2: gpu: 99 is outside 0..64"},
      {false, "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np-0,1,1,2,500\n",
       "pods.csv:2: gpu_milli: 500 with num_gpu 2"},
      {false, "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np-0,1,1,1,1500\n", "pods.csv:2: gpu_milli: 1500 is outside 0..1000"},
      {false, "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\np-0,1,1,1,500,\np-0,1,1,1,500,\n",
       "pods.csv:3: name: duplicate pod \"p-0\""},
      {false, "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\np-0,1,1,1,500,T 4\n",
       "pods.csv:2: gpu_spec: \"T 4\" is not a valid GPU model"},
  };
  for (const Case& c : cases) {
    absl::Status s = c.nodes ? ParseOpenbNodes(c.csv, "nodes.csv").status() : ParseOpenbPods(c.csv, "pods.csv").status();
    ASSERT_FALSE(s.ok()) << c.csv;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.want)) << c.csv;
  }
}

// A small openb input replayed once as it is: node rows (sn,cpu_milli,memory_mib,gpu,model)
// and pod rows (name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec), headers added.
absl::StatusOr<ReplayInput> SmallOpenbInput(const std::string& node_rows, const std::string& pod_rows) {
  absl::StatusOr<std::vector<OpenbNode>> nodes =
      ParseOpenbNodes("sn,cpu_milli,memory_mib,gpu,model\n" + node_rows, "nodes.csv");
  if (!nodes.ok()) return nodes.status();
  absl::StatusOr<std::vector<OpenbPod>> pods =
      ParseOpenbPods("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n" + pod_rows, "pods.csv");
  if (!pods.ok()) return pods.status();
  OpenbOptions o;
  o.load = 0;
  absl::StatusOr<OpenbImport> imp = ImportOpenb(*nodes, *pods, o);
  if (!imp.ok()) return imp.status();
  absl::StatusOr<ReplayInput> in = PrepareInput(std::move(imp->trace), "", "");
  if (in.ok()) in->cluster_gpus = imp->cluster_gpus;
  return in;
}

// One 1-GPU node, advertised whole and as 100 MPS shares (twins). A sharing pod takes shares of
// GPU 0; a whole-GPU pod must then fail (the GPU's other half is held by the node agent), and a
// second sharing pod fits beside the first one while shares are left.
TEST(OpenbImport, TwinsKeepOneGpuFromServingBothWays) {
  absl::StatusOr<ReplayInput> in = SmallOpenbInput("n-0,64000,65536,1,T4\n",
                                                    "s-0,1000,1,1,500,\n"
                                                    "w-0,1000,1,1,1000,\n"
                                                    "s-1,1000,1,1,400,\n"
                                                    "s-2,1000,1,1,200,\n");
  ASSERT_TRUE(in.ok()) << in.status();
  for (const char* policy : {"affinity-pack", "fgd", "bestfit"}) {
    const RunResult r = RunInProcess(*in, policy);
    EXPECT_THAT(r.placements, ElementsAre("default/s-0 n-0 nvidia.com/gpu.mps/0x50",
                                          "default/s-1 n-0 nvidia.com/gpu.mps/0x40"))
        << policy;
    // kube-scheduler's own count already refuses both: the node agent's placeholder requests
    // the GPU's exclusive half, and 90 of 100 shares are taken.
    EXPECT_EQ(r.pods_failed.at("insufficient_nvidia.com/gpu"), 1) << policy;
    EXPECT_EQ(r.pods_failed.at("insufficient_nvidia.com/gpu.mps"), 1) << policy;
    EXPECT_NEAR(r.gpu_allocation, 0.9, 1e-9) << policy;
    EXPECT_EQ(r.audit.oversubscribed_units, 0) << policy;
  }
}

// "fgd-learned" is the service's fgd (--policy=fgd): seeded from the catalog, it learns the
// mix from the pods the replay's filter calls show it, products pinned by gpu_spec affinity
// included, and places every pod the trace's own mix would let fit.
TEST(ReplayLearnedMix, TheServicesFgdLearnsFromTheFilterCalls) {
  absl::StatusOr<ReplayInput> in = SmallOpenbInput("n-0,64000,65536,2,T4\nn-1,64000,65536,2,V100M16\n",
                                                    "t-0,1000,1,1,1000,T4\n"
                                                    "t-1,1000,1,1,1000,T4\n"
                                                    "any-0,1000,1,1,1000,\n"
                                                    "v-0,1000,1,1,500,V100M16\n");
  ASSERT_TRUE(in.ok()) << in.status();

  absl::StatusOr<std::unique_ptr<PlacementPolicy>> p = MakeReplayPolicy("fgd-learned", *in);
  ASSERT_TRUE(p.ok()) << p.status();
  const auto* learned = dynamic_cast<const LearnedFgdPolicy*>(p->get());
  ASSERT_NE(learned, nullptr) << "fgd-learned is the service's policy type";
  InProcessPlacer placer(in->catalog, *std::move(p));
  ReplayOptions o;
  o.policy = "fgd-learned";
  o.keep_placements = true;
  absl::StatusOr<RunResult> r = RunReplay(*in, placer, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->placements.size(), 4u);
  EXPECT_EQ(r->audit.oversubscribed_units, 0);
  EXPECT_EQ(learned->learner().observed(), 4) << "each pod counted once, however often filtered";
  std::set<std::vector<std::string>> products;
  for (const TaskClass& t : learned->learner().Current()) products.insert(t.products);
  EXPECT_THAT(products, ::testing::IsSupersetOf({std::vector<std::string>{"T4"}, std::vector<std::string>{"V100M16"},
                                                 std::vector<std::string>{}}));
}

std::vector<OpenbNode> OpenbNodes() {
  absl::StatusOr<std::string> csv =
      ReadFile(testing::SharedPath("traces/alibaba-gpu-v2023/openb_node_list_gpu_node.csv"));
  EXPECT_TRUE(csv.ok()) << csv.status();
  absl::StatusOr<std::vector<OpenbNode>> n = ParseOpenbNodes(*csv, "nodes");
  EXPECT_TRUE(n.ok()) << n.status();
  return *std::move(n);
}

std::vector<OpenbPod> OpenbPods() {
  absl::StatusOr<std::string> csv =
      ReadFile(testing::SharedPath("traces/alibaba-gpu-v2023/openb_pod_list_default.csv"));
  EXPECT_TRUE(csv.ok()) << csv.status();
  absl::StatusOr<std::vector<OpenbPod>> p = ParseOpenbPods(*csv, "pods");
  EXPECT_TRUE(p.ok()) << p.status();
  return *std::move(p);
}

// Sanitizer builds (scripts/test.sh sets GSE_SANITIZER_BUILD) run the openb suites on a third
// of the pods: the same code paths, within ctest's time limit.
double Load(double load) { return std::getenv("GSE_SANITIZER_BUILD") != nullptr ? load / 3 : load; }

// openb's cluster, or every `node_stride`-th node of it (the same mix of GPU models, fewer
// names in every filter call: the HTTP runs under the sanitizers stay short).
ReplayInput OpenbInput(uint64_t seed, double load, bool mig, size_t node_stride = 1) {
  OpenbOptions o;
  o.seed = seed;
  o.load = Load(load);
  o.mig = mig;
  o.projects = {{"vcA", 5}, {"vcB", 3}, {"vcC", 1}};
  std::vector<OpenbNode> nodes;
  const std::vector<OpenbNode> all = OpenbNodes();
  for (size_t i = 0; i < all.size(); i += node_stride) nodes.push_back(all[i]);
  absl::StatusOr<OpenbImport> imp = ImportOpenb(nodes, OpenbPods(), o);
  EXPECT_TRUE(imp.ok()) << imp.status();
  absl::StatusOr<ReplayInput> in = PrepareInput(std::move(imp->trace), "", "");
  EXPECT_TRUE(in.ok()) << in.status();
  in->cluster_gpus = imp->cluster_gpus;
  return *std::move(in);
}

// --openb-shuffle (the FGD simulator's --shuffle-pod=true): the same pods as file order, in a
// seeded random order — the same order for the same seed, another for another seed.
TEST(OpenbImport, ShuffleSubmitsTheSamePodsInASeededOrder) {
  auto names = [](uint64_t seed, bool shuffle) {
    OpenbOptions o;
    o.seed = seed;
    o.load = 0.05;
    o.shuffle = shuffle;
    absl::StatusOr<OpenbImport> imp = ImportOpenb(OpenbNodes(), OpenbPods(), o);
    EXPECT_TRUE(imp.ok()) << imp.status();
    std::vector<std::string> out;
    if (!imp.ok()) return out;
    for (const Event& ev : imp->trace.events) {
      if (ev.type == EventType::kPodArrive) out.push_back(ev.pod.name);
    }
    return out;
  };
  const std::vector<std::string> file_order = names(5, false);
  const std::vector<std::string> shuffled = names(5, true);
  ASSERT_GT(file_order.size(), 100u);
  EXPECT_NE(shuffled, file_order);
  EXPECT_THAT(shuffled, ::testing::UnorderedElementsAreArray(file_order));
  EXPECT_EQ(names(5, true), shuffled);
  EXPECT_NE(names(6, true), shuffled);
}

TEST(ReplayDeterminism, SameSeedSamePlacementsOtherSeedOthers) {
  const RunResult a = RunInProcess(OpenbInput(7, 0.03, false), "fgd");
  const RunResult b = RunInProcess(OpenbInput(7, 0.03, false), "fgd");
  const RunResult c = RunInProcess(OpenbInput(8, 0.03, false), "fgd");
  ASSERT_GT(a.placements.size(), 30u);
  EXPECT_EQ(a.placements, b.placements);
  EXPECT_DOUBLE_EQ(a.gpu_allocation, b.gpu_allocation);
  EXPECT_NE(a.placements, c.placements);
  EXPECT_EQ(a.audit.oversubscribed_units, 0);
}

// The same seed over HTTP (filter -> prioritize -> bind against an extender fed by a local
// API server's watch, twins and deletions included) places exactly like the in-process mode.
TEST(ReplayHttp, SamePlacementsAsInProcess) {
  {
    const ReplayInput in = InputOf(HandTrace());
    const RunResult local = RunInProcess(in, "affinity-pack", ExtenderOnly());
    const RunResult http = RunHttp(in, "affinity-pack", ExtenderOnly());
    EXPECT_EQ(http.placements, local.placements);
    EXPECT_EQ(http.pods_failed, local.pods_failed);
    EXPECT_EQ(http.mode, "http (in-process extender)");
    EXPECT_GT(http.latency.at("bind").count, 0);
  }
  const ReplayInput in = OpenbInput(3, 0.12, false, /*node_stride=*/8);
  for (const char* policy : {"fgd", "fgd-learned", "affinity-pack"}) {
    const RunResult local = RunInProcess(in, policy);
    const RunResult http = RunHttp(in, policy, {}, /*node_cache_capable=*/absl::StartsWith(policy, "fgd"));
    ASSERT_GT(local.placements.size(), 20u);
    EXPECT_EQ(http.placements, local.placements) << policy;
    EXPECT_EQ(http.audit.oversubscribed_units, 0) << policy;
    ASSERT_TRUE(http.mirror_audit.has_value());
    EXPECT_EQ(http.mirror_audit->oversubscribed_units, 0) << policy;
  }
}

// Several scheduler clients at once: placements depend on timing, the invariants do not.
TEST(ReplayHttp, ConcurrentClientsKeepEveryInvariant) {
  const ReplayInput in = OpenbInput(5, 0.12, false, /*node_stride=*/8);
  ReplayOptions o;
  o.concurrency = 4;
  const RunResult r = RunHttp(in, "affinity-pack", o);
  EXPECT_GT(r.pods_placed, 20);
  EXPECT_EQ(r.pods_arrived, static_cast<int64_t>(in.trace.events.size()) - 1);
  EXPECT_EQ(r.audit.oversubscribed_units, 0);
  EXPECT_EQ(r.audit.over_capacity_nodes, 0);
  ASSERT_TRUE(r.mirror_audit.has_value());
  EXPECT_EQ(r.mirror_audit->oversubscribed_units, 0);
}

// Every pod through the extender (ReplayOptions::extender_all_pods), by hand. Node a: 1 GPU,
// 8 cpus; node b: no GPU, 8 cpus. c1 (CPU-only, 6 cpus) arrives before g1 (1 GPU, 4 cpus),
// so the mix is {1 GPU with 4 cpus}.
//   Old behaviour (c1 never reaches the extender; no in-tree scores): c1 -> a, the lowest
//   name; g1 then lacks cpu on a (2 left) and fails: the idle GPU is stranded.
//   fgd scoring c1: on a, F goes from 0 to 1 (the GPU task no longer fits: 2 < 4 cpus) and
//   the starved capacity from 0 to 1 - 2/4 = 0.5: delta 1.5, score round(10 / (1 + e^2.25))
//   = 1; on b (no idle GPU) delta 0, score 5. c1 -> b, and g1 -> a.
std::string StrandTrace() {
  return absl::StrJoin(
      std::vector<std::string>{
          Header(),
          absl::StrCat("{\"type\":\"objects\",\"list\":{\"kind\":\"List\",\"items\":[", NodeJson("a", 1), ",",
                       NodeJson("b", 0), "]}}"),
          Arrive("c1", "\"cpu\":\"6\",\"memory\":\"1Gi\""),
          Arrive("g1", "\"cpu\":\"4\",\"memory\":\"1Gi\",\"nvidia.com/gpu\":\"1\""),
      },
      "\n");
}

TEST(ReplayExtenderAllPods, FgdKeepsACpuOnlyPodOffANodeWhoseGpuItWouldStrand) {
  const ReplayInput in = InputOf(StrandTrace());
  const RunResult old_way = RunInProcess(in, "fgd", ExtenderOnly());
  EXPECT_THAT(old_way.placements, ElementsAre("team-a/c1 a"));
  EXPECT_EQ(old_way.pods_failed.at("insufficient_cpu"), 1);
  EXPECT_DOUBLE_EQ(old_way.gpu_allocation, 0);
  EXPECT_EQ(old_way.latency.count("prioritize"), 0u);  // c1 never reached the extender

  ReplayOptions all = ExtenderOnly();
  all.extender_all_pods = true;
  const RunResult r = RunInProcess(in, "fgd", all);
  ASSERT_EQ(r.placements.size(), 2u);
  EXPECT_EQ(r.placements[0], "team-a/c1 b");
  EXPECT_THAT(r.placements[1], HasSubstr("team-a/g1 a nvidia.com/gpu/0"));
  EXPECT_TRUE(r.pods_failed.empty());
  EXPECT_DOUBLE_EQ(r.gpu_allocation, 1);
  EXPECT_EQ(r.latency.at("prioritize").count, 1);  // c1's (g1 had one feasible node left)
  EXPECT_EQ(r.audit.over_capacity_nodes, 0);

  // Policies that do not model host resources score such pods 0 everywhere: unchanged.
  for (const char* policy : {"affinity-pack", "bestfit", "fgd-gpu"}) {
    EXPECT_THAT(RunInProcess(in, policy, all).placements, ElementsAre("team-a/c1 a")) << policy;
  }
}

// Over HTTP the service scores CPU-only pods when started with --score-all-pods
// (HttpPlacerOptions::score_all_pods), and places them as the in-process mode does.
TEST(ReplayExtenderAllPods, HttpPlacesLikeInProcess) {
  ReplayOptions all = ExtenderOnly();
  all.extender_all_pods = true;
  const ReplayInput strand = InputOf(StrandTrace());
  const RunResult http = RunHttp(strand, "fgd", all);
  ASSERT_EQ(http.placements.size(), 2u);
  EXPECT_EQ(http.placements[0], "team-a/c1 b");  // scored by the service, bound by its bind
  EXPECT_THAT(http.placements[1], HasSubstr("team-a/g1 a nvidia.com/gpu/0"));
  EXPECT_EQ(http.placements, RunInProcess(strand, "fgd", all).placements);

  // openb, CPU-only pods and deletions included; the project's in-tree scores, and none.
  const ReplayInput in = OpenbInput(4, 0.12, false, /*node_stride=*/8);
  int64_t gpu_pods = 0;
  for (const Event& ev : in.trace.events) {
    if (ev.type != EventType::kPodArrive) continue;
    for (const auto& [resource, quantity] : ev.pod.resources) {
      if (in.catalog->Find(resource) != nullptr) {
        ++gpu_pods;
        break;
      }
    }
  }
  for (ReplayOptions o : {all, ReplayOptions{}}) {
    o.extender_all_pods = true;
    SCOPED_TRACE(o.score_plugins.empty() ? "extender only" : "in-tree scores too");
    const RunResult local = RunInProcess(in, "fgd", o);
    const RunResult remote = RunHttp(in, "fgd", o);
    ASSERT_GT(local.placements.size(), 20u);
    // CPU-only pods went through the extender too.
    EXPECT_GT(local.latency.at("filter").count, gpu_pods);
    EXPECT_EQ(remote.latency.at("filter").count, local.latency.at("filter").count);
    EXPECT_EQ(remote.placements, local.placements);
    EXPECT_EQ(remote.pods_failed, local.pods_failed);
    ASSERT_TRUE(remote.mirror_audit.has_value());
    EXPECT_EQ(remote.mirror_audit->oversubscribed_units, 0);
  }
}

TEST(ReplayExtenderAllPods, RefusedWhereThePodsCannotBeScored) {
  const ReplayInput in = InputOf(StrandTrace());
  ReplayOptions o = ExtenderOnly();
  o.extender_all_pods = true;
  for (bool score_all_pods : {false, true}) {
    absl::StatusOr<std::unique_ptr<PlacementPolicy>> p = MakeReplayPolicy("fgd", in);
    ASSERT_TRUE(p.ok()) << p.status();
    HttpPlacerOptions ho;
    ho.catalog = in.catalog;
    ho.score_all_pods = score_all_pods;
    HttpPlacer http(ho, *std::move(p));
    absl::Status s = ValidateReplayOptions(o, http);
    if (score_all_pods) {
      EXPECT_TRUE(s.ok()) << s;
      continue;
    }
    // An extender that scores CPU-only pods 0 would silently place them by in-tree scores.
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
    EXPECT_THAT(std::string(s.message()),
                HasSubstr("extender_all_pods (--extender-all-pods): the http (in-process "
                          "extender) placer is not set up to be sent every pod"));
    absl::StatusOr<RunResult> r = RunReplay(in, http, o);
    EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << r.status();
  }

  absl::StatusOr<std::unique_ptr<PlacementPolicy>> q = MakeReplayPolicy("fgd", in);
  ASSERT_TRUE(q.ok()) << q.status();
  DecisionCore::Options every_pod;
  every_pod.every_pod = true;
  InProcessPlacer local(in.catalog, *std::move(q), every_pod);
  EXPECT_TRUE(ValidateReplayOptions(o, local).ok());
  o.concurrency = 2;
  EXPECT_THAT(std::string(ValidateReplayOptions(o, local).message()), HasSubstr("needs concurrency 1"));
  // A placer set up for every pod and a run that sends only GPU pods stand for no deployment.
  o.concurrency = 1;
  o.extender_all_pods = false;
  EXPECT_THAT(std::string(ValidateReplayOptions(o, local).message()),
              HasSubstr("placer was set up to be sent every pod"));
  absl::StatusOr<std::unique_ptr<PlacementPolicy>> g = MakeReplayPolicy("fgd", in);
  ASSERT_TRUE(g.ok()) << g.status();
  InProcessPlacer gpu_pods_only(in.catalog, *std::move(g));
  EXPECT_TRUE(ValidateReplayOptions(o, gpu_pods_only).ok());
  o.extender_all_pods = true;
  EXPECT_THAT(std::string(ValidateReplayOptions(o, gpu_pods_only).message()),
              HasSubstr("placer is not set up to be sent every pod"));
}

TEST(ReplayAudit, CatchesACorruptedLedger) {
  const ReplayInput in = InputOf(HandTrace());
  Ledger ledger(in.catalog, {{"nvidia.com/gpu", "nvidia.com/gpu.mps"}});
  absl::StatusOr<ObjectBatch> batch = DecodeObjects(in.trace.events[0].json);
  ASSERT_TRUE(batch.ok());
  ledger.ApplyBatch(*batch);
  EXPECT_EQ(ledger.Audit().oversubscribed_units, 0);
  const OfferingId gpu = in.catalog->Find("nvidia.com/gpu")->id;
  const OfferingId ts = in.catalog->Find("nvidia.com/mig-1g.5gb.shared")->id;
  // Two holders of one exclusive unit: the corruption a double bind would leave.
  ledger.AddHolderForTesting({"a", gpu, 0}, {"team-a/x", "team-a", 1, false});
  EXPECT_EQ(ledger.Audit().oversubscribed_units, 0);
  ledger.AddHolderForTesting({"a", gpu, 0}, {"team-b/y", "team-b", 1, false});
  Ledger::AuditResult r = ledger.Audit();
  EXPECT_EQ(r.oversubscribed_units, 1);
  EXPECT_THAT(r.problems, ::testing::Contains(HasSubstr("a/nvidia.com/gpu/0: exclusive unit with 2 holders")));
  // A unit the node does not advertise.
  ledger.AddHolderForTesting({"a", gpu, 7}, {"team-a/z", "team-a", 1, false});
  EXPECT_EQ(ledger.Audit().oversubscribed_units, 2);
  // Two projects on one time-sliced unit (node b advertises none: also counted as held).
  ledger.AddHolderForTesting({"b", ts, 0}, {"team-a/t", "team-a", 1, false});
  ledger.AddHolderForTesting({"b", ts, 0}, {"team-b/t", "team-b", 1, false});
  r = ledger.Audit();
  EXPECT_EQ(r.multi_owner_units, 1);
}

// F(node) by hand. Mix: whole GPU (weight 3) and 40 MPS shares (weight 1). Node: 2 GPUs,
// GPU 0 has 70 of 100 shares used (30 left), GPU 1 free.
//   whole GPU fits (GPU 1): fragment = GPU 0's idle 0.3 -> 3/4 * 0.3
//   40 shares fit (GPU 1): fragment = GPU 0's idle 0.3 (30 < 40) -> 1/4 * 0.3
// F = 0.3. Placing 30 shares on GPU 0 uses the fragment (F -> 0): fgd chooses GPU 0, and
// prefers that node over an empty one.
TEST(FragmentationPolicy, HandComputedFragmentation) {
  const ReplayInput in = InputOf(Header());
  auto catalog = in.catalog;
  FragmentationOptions fo;
  fo.tasks = {{"nvidia.com/gpu", 1, {}, 3}, {"nvidia.com/gpu.mps", 40, {}, 1}};
  fo.twins = {{"nvidia.com/gpu", "nvidia.com/gpu.mps"}};
  absl::StatusOr<FragmentationModel> model = FragmentationModel::Create(catalog, fo);
  ASSERT_TRUE(model.ok()) << model.status();
  ClusterState state(catalog, MirrorOptions{});
  for (const char* name : {"m", "n"}) {
    NodeObject node;
    node.name = name;
    node.allocatable_milli = {{"nvidia.com/gpu", 2000}, {"nvidia.com/gpu.mps", 200000}};
    node.labels = {{"nvidia.com/gpu.mps.replicas", "100"}, {"nvidia.com/gpu.mps.count", "2"}};
    state.ApplyNode(node);
  }
  const OfferingId mps = catalog->Find("nvidia.com/gpu.mps")->id;
  const OfferingId gpu = catalog->Find("nvidia.com/gpu")->id;
  ASSERT_TRUE(state.Reserve({"ns/s", "", "ns", "ns"}, Assignment{"n", mps, {0}, 70}).ok());
  ASSERT_TRUE(state.Reserve({"ns/h", "", "ns", "node-agent"}, Assignment{"n", gpu, {0}, 1}).ok());
  EXPECT_NEAR(model->NodeFragmentation(state, *state.FindNode("n")), 0.3, 1e-9);
  EXPECT_NEAR(model->NodeIdle(*state.FindNode("n")), 1.3, 1e-9);
  EXPECT_NEAR(model->NodeFragmentation(state, *state.FindNode("m")), 0.0, 1e-9);

  absl::StatusOr<std::unique_ptr<PlacementPolicy>> fgd = MakeFragmentationPolicy(catalog, fo);
  ASSERT_TRUE(fgd.ok()) << fgd.status();
  PodRequest req;
  req.offering = mps;
  req.amount = 30;
  req.project = "ns";
  absl::StatusOr<Assignment> a = (*fgd)->ChooseUnits(state, req, *state.FindNode("n"));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_THAT(a->units, ElementsAre(0));
  EXPECT_GT((*fgd)->Score(state, req, *state.FindNode("n")), (*fgd)->Score(state, req, *state.FindNode("m")));
}

TEST(FragmentationPolicy, RejectsABadMix) {
  const ReplayInput in = InputOf(Header());
  FragmentationOptions fo;
  fo.tasks = {{"nvidia.com/gpu.mps", 500, {}, 1}};
  absl::StatusOr<std::unique_ptr<PlacementPolicy>> p = MakeFragmentationPolicy(in.catalog, fo);
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(std::string(p.status().message()), HasSubstr("tasks[0] (nvidia.com/gpu.mps): amount: must be 1..100"));
  fo.tasks = {{"example.com/tpu", 1, {}, 1}};
  EXPECT_THAT(std::string(MakeFragmentationPolicy(in.catalog, fo).status().message()),
              HasSubstr("tasks[0] (example.com/tpu): resource: not in the catalog"));
}

TEST(ReplayReport, JsonAndSvgCarryEveryRun) {
  const ReplayInput in = InputOf(HandTrace());
  std::vector<RunResult> runs = {RunInProcess(in, "affinity-pack", ExtenderOnly()),
                                 RunInProcess(in, "spread", ExtenderOnly())};
  ReportContext ctx;
  ctx.title = "hand trace";
  const std::string json = JsonReport(runs, ctx);
  rapidjson::Document doc;
  doc.Parse(json.c_str());
  ASSERT_FALSE(doc.HasParseError());
  ASSERT_EQ(doc["runs"].Size(), 2u);
  for (const char* key : {"policy", "seed", "load", "gpu_allocation", "unallocated_gpus", "fragmentation",
                          "affinity_ratio", "affinity_ceiling", "unit_openings_floor", "spills", "avoidable_spills", "oversubscribed_units", "pods_failed", "latency_us",
                          "decisions_per_second", "curve"}) {
    EXPECT_TRUE(doc["runs"][0].HasMember(key)) << key;
  }
  EXPECT_STREQ(doc["runs"][1]["policy"].GetString(), "spread");
  EXPECT_EQ(doc["runs"][0]["pods_failed"]["insufficient_cpu"].GetInt(), 1);
  const std::string svg = SvgPlot(runs, ctx);
  EXPECT_EQ(std::count(svg.begin(), svg.end(), '\n') > 10, true);
  size_t lines = 0;
  for (size_t pos = svg.find("<polyline"); pos != std::string::npos; pos = svg.find("<polyline", pos + 1)) ++lines;
  EXPECT_EQ(lines, 2u);
  EXPECT_THAT(svg, HasSubstr(">spread</text>"));
}

}  // namespace
}  // namespace gse::replay
