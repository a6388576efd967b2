// The fgd task mix learned online (scoring/task_mix.h): the file format, the decaying
// window, and fgd in the decision core changing its choice once the mix it learned asks for
// cpu.
#include "scoring/task_mix.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rapidjson/document.h"
#include "scoring/decision_core.h"
#include "scoring/fragmentation_policy.h"
#include "state/catalog.h"
#include "state/k8s_objects.h"
#include "state/mirror.h"

namespace gse {
namespace {

using ::testing::HasSubstr;

constexpr char kGpu[] = "nvidia.com/gpu";
constexpr char kMps[] = "nvidia.com/gpu.mps";
constexpr char kTs[] = "nvidia.com/gpu.shared";

// An offering of `resource`, shared `replicas` ways unless exclusive.
Offering OfferingOf(const std::string& resource, Sharing sharing = Sharing::kExclusive, int32_t replicas = 1) {
  Offering o;
  o.resource = resource;
  o.sharing = sharing;
  o.replicas = replicas;
  return o;
}

std::shared_ptr<const Catalog> CatalogOf(std::vector<Offering> offerings) {
  absl::StatusOr<Catalog> c = Catalog::FromOfferings(std::move(offerings));
  EXPECT_TRUE(c.ok()) << c.status();
  return std::make_shared<const Catalog>(*std::move(c));
}

// Whole GPUs (kGpu) and their MPS shares, 4 per GPU (kMps).
std::shared_ptr<const Catalog> TestCatalog() {
  return CatalogOf({OfferingOf(kGpu), OfferingOf(kMps, Sharing::kMps, 4)});
}

TaskClass Task(const std::string& resource, int64_t amount, int64_t cpu_milli = 0) {
  TaskClass t;
  t.resource = resource;
  t.amount = amount;
  t.cpu_milli = cpu_milli;
  return t;
}

double WeightOf(const std::vector<TaskClass>& mix, const std::string& resource, int64_t amount) {
  double w = 0;
  for (const TaskClass& t : mix) {
    if (t.resource == resource && t.amount == amount) w += t.weight;
  }
  return w;
}

TEST(TaskMixFile, ParsesEveryField) {
  absl::StatusOr<std::vector<TaskClass>> mix = ParseTaskMix(R"({"tasks":[
    {"resource":"nvidia.com/gpu","amount":2,"weight":3,"cpu":"8","memory":"1Ki","products":["B","A"]},
    {"resource":"nvidia.com/gpu.mps"}]})");
  ASSERT_TRUE(mix.ok()) << mix.status();
  ASSERT_EQ(mix->size(), 2u);
  EXPECT_EQ((*mix)[0].amount, 2);
  EXPECT_EQ((*mix)[0].weight, 3);
  EXPECT_EQ((*mix)[0].cpu_milli, 8000);
  EXPECT_EQ((*mix)[0].memory_milli, 1024 * 1000);  // bytes x 1000, as fgd counts memory
  EXPECT_EQ((*mix)[0].products, (std::vector<std::string>{"A", "B"}));
  EXPECT_EQ((*mix)[1].amount, 1);
  EXPECT_EQ((*mix)[1].weight, 1);
}

TEST(TaskMixFile, ErrorsNameTheTaskAndTheField) {
  const std::map<std::string, std::string> bad = {
      {R"({"tasks":[]})", "tasks: must be a non-empty array"},
      {R"({"tasks":[{"amount":1}]})", "tasks[0]: resource"},
      {R"({"tasks":[{"resource":"x"},{"resource":"y","cpu":"lots"}]})", "tasks[1]: cpu"},
      {R"({"tasks":[{"resource":"x","memory":"-1"}]})", "tasks[0]: memory: must not be negative"},
      {R"({"tasks":[{"resource":"x","weight":-1}]})", "tasks[0]: weight"},
      {R"({"tasks":[{"resource":"x","gpus":1}]})", "tasks[0]: gpus: unknown field"},
      {R"({"tasks":[{"resource":"x"}],"extra":1})", "extra: unknown field"},
      {R"({"tasks":[{"resource":"x"}]} trailing)", "document:"},
  };
  for (const auto& [json, want] : bad) {
    absl::StatusOr<std::vector<TaskClass>> mix = ParseTaskMix(json);
    ASSERT_FALSE(mix.ok()) << json;
    EXPECT_THAT(std::string(mix.status().message()), HasSubstr(want)) << json;
  }
}

TEST(TaskMixLearner, TheSeedFadesAndRecentPodsWeighMost) {
  TaskMixOptions o;
  o.half_life_pods = 100;
  o.seed_pods = 100;
  TaskMixLearner learner({Task(kGpu, 1), Task(kMps, 1)}, o);
  EXPECT_NEAR(WeightOf(learner.Current(), kGpu, 1), 0.5, 1e-9);

  // 100 pods of 2 shares: the seed (worth 100 pods) has halved; the new class holds
  // sum_{k<100} 2^(-k/100) ~ 72.5 of its weight against the seed's 50.
  for (int i = 0; i < 100; ++i) EXPECT_TRUE(learner.Observe(absl::StrCat("u", i), Task(kMps, 2, 4000)));
  std::vector<TaskClass> mix = learner.Current();
  EXPECT_NEAR(WeightOf(mix, kMps, 2), 72.5 / 122.5, 0.01);
  EXPECT_NEAR(WeightOf(mix, kGpu, 1), 25.0 / 122.5, 0.01);
  for (const TaskClass& t : mix) {
    if (t.resource == kMps && t.amount == 2) {
      EXPECT_EQ(t.cpu_milli, 4000);
    }
  }
  // A pod counts once however often it is asked about.
  EXPECT_FALSE(learner.Observe("u7", Task(kMps, 2, 4000)));
  EXPECT_EQ(learner.observed(), 100);

  // Then only whole GPUs: after ten half-lives the 2-share class is ~0.1 % of the mix.
  for (int i = 0; i < 1000; ++i) learner.Observe(absl::StrCat("v", i), Task(kGpu, 1));
  EXPECT_LT(WeightOf(learner.Current(), kMps, 2), 0.002);
  EXPECT_GT(WeightOf(learner.Current(), kGpu, 1), 0.99);
}

TEST(TaskMixLearner, TheLightestClassMakesRoom) {
  TaskMixOptions o;
  o.max_classes = 2;
  o.seed_pods = 1;
  TaskMixLearner learner({Task(kGpu, 1)}, o);
  for (int i = 0; i < 5; ++i) learner.Observe(absl::StrCat("a", i), Task(kGpu, 2));
  learner.Observe("b", Task(kMps, 3));  // evicts the seed (weight 1), not the 2-GPU class
  const std::vector<TaskClass> mix = learner.Current();
  ASSERT_EQ(mix.size(), 2u);
  EXPECT_GT(WeightOf(mix, kGpu, 2), 0.8);
  EXPECT_GT(WeightOf(mix, kMps, 3), 0.1);
  EXPECT_EQ(WeightOf(mix, kGpu, 1), 0);
}

// A node of 2 whole GPUs with `cpu_milli` cpu, 64 GiB of memory and room for 110 pods.
NodeObject GpuNode(const std::string& name, int64_t cpu_milli) {
  NodeObject n;
  n.name = name;
  n.allocatable_milli[kGpu] = 2000;
  n.allocatable_milli["cpu"] = cpu_milli;
  n.allocatable_milli["memory"] = (int64_t{64} << 30) * 1000;
  n.allocatable_milli["pods"] = 110000;
  return n;
}

// A pod of team-a asking for `cpu_milli` and, when `gpu`, one GPU; bound to `node` unless "".
PodObject TeamAPod(const std::string& name, const std::string& node, int64_t cpu_milli, bool gpu) {
  PodObject p;
  p.name = name;
  p.namespace_name = "team-a";
  p.uid = name + "-uid";
  p.node_name = node;
  if (gpu) {
    p.containers.push_back({"c", {{"cpu", cpu_milli}, {kGpu, 1000}}, {{kGpu, 1000}}});
  } else {
    p.containers.push_back({"c", {{"cpu", cpu_milli}}, {}});
  }
  return p;
}

// `nodes` (b among them): 2 whole GPUs and 8 cpus each; a CPU-only pod takes 6 of b's cpus.
void NodesWithBusyCpuOnB(Mirror& mirror, const std::vector<std::string>& nodes) {
  mirror.Write([&](ClusterState& s) {
    ObjectBatch b;
    b.namespaces.push_back({"team-a", {}});
    for (const std::string& name : nodes) b.nodes.push_back(GpuNode(name, 8000));
    b.pods.push_back(TeamAPod("web", "b", 6000, /*gpu=*/false));
    s.ApplyBatch(b);
    return true;
  });
}

PodObject GpuPod(const std::string& name, int64_t cpu_milli) { return TeamAPod(name, "", cpu_milli, true); }

// The service's fgd seeded from the catalog, the seed worth one pod, rebuilt every 16 pods.
std::unique_ptr<LearnedFgdPolicy> QuickLearner(std::shared_ptr<const Catalog> catalog) {
  TaskMixOptions o;
  o.seed_pods = 1;
  o.republish_every = 16;
  absl::StatusOr<std::unique_ptr<LearnedFgdPolicy>> p =
      LearnedFgdPolicy::Create(catalog, CatalogTaskMix(*catalog), o, MirrorHostFree);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? *std::move(p) : nullptr;
}

// Nodes a and b: 2 whole GPUs and 8 cpus each; a CPU-only pod takes 6 of b's cpus. Seeded
// from the catalog (no cpu), fgd sees the two nodes alike for a 1-GPU pod. Once the pods it
// was asked about (1 GPU, 4 cpus each) taught it that tasks need 4 cpus, b's two free cpus
// strand its GPUs, and a pod of 1 GPU and 2 cpus is best placed on b.
TEST(LearnedFgdPolicy, LearnsThatTasksNeedCpuAndPlacesAccordingly) {
  auto catalog = TestCatalog();
  Mirror mirror(catalog, MirrorOptions{});
  NodesWithBusyCpuOnB(mirror, {"a", "b"});
  TaskMixOptions o;
  o.seed_pods = 10;
  o.republish_every = 16;
  o.half_life_pods = 50;
  absl::StatusOr<std::unique_ptr<LearnedFgdPolicy>> policy =
      LearnedFgdPolicy::Create(catalog, CatalogTaskMix(*catalog), o, MirrorHostFree);
  ASSERT_TRUE(policy.ok()) << policy.status();
  DecisionCore core(&mirror, policy->get());
  const std::vector<absl::string_view> nodes = {"a", "b"};
  const std::vector<int64_t> before = core.Prioritize(GpuPod("probe", 2000), nodes);
  EXPECT_EQ(before[0], before[1]);

  for (int i = 0; i < 64; ++i) core.Filter(GpuPod(absl::StrCat("train-", i), 4000), nodes);
  EXPECT_EQ((*policy)->learner().observed(), 64);
  EXPECT_GT(WeightOf((*policy)->learner().Current(), kGpu, 1), 0.8);
  const std::vector<int64_t> after = core.Prioritize(GpuPod("probe", 2000), nodes);
  EXPECT_GT(after[1], after[0]) << "b's idle GPUs are stranded by its cpu: the pod goes there";
}

// Nodes a and b (2 GPUs, 16 cpus each) are candidates; node c holds a bound GPU pod of
// 8 cpus. With `cpu_only_pod_on_a`, a CPU-only pod of 8 cpus runs on a; without it, a has
// only 8 allocatable cpus. Either way a has 8 free cpus for its 2 idle GPUs and b 16.
void NodesWhereAHasHalfTheCpu(Mirror& mirror, bool cpu_only_pod_on_a) {
  mirror.Write([&](ClusterState& s) {
    ObjectBatch b;
    b.namespaces.push_back({"team-a", {}});
    b.nodes.push_back(GpuNode("a", cpu_only_pod_on_a ? 16000 : 8000));
    b.nodes.push_back(GpuNode("b", 16000));
    b.nodes.push_back(GpuNode("c", 16000));
    b.pods.push_back(TeamAPod("bound-train", "c", 8000, /*gpu=*/true));
    if (cpu_only_pod_on_a) b.pods.push_back(TeamAPod("web", "a", 8000, /*gpu=*/false));
    s.ApplyBatch(b);
    return true;
  });
}

// The pods that ask for no GPU land on GPU nodes too (kube-scheduler places them where the
// extender only sees GPU pods) and eat the cpu that idle GPUs need. fgd learns how much
// from the mirror's recent arrivals: here as much cpu as the GPU pods (ratio 1), so each idle
// GPU needs twice the mix's 4 cpus. a's 8 free cpus then feed only one of its two GPUs, and
// a 1-GPU pod is best placed there (it uses a GPU that would starve). Without CPU-only
// pods among the arrivals, the same free cpus feed both of a's GPUs: a and b score alike.
// When every pod comes to the extender, the CPU-only pods are fgd's own placements: it
// expects none beside the GPUs.
TEST(LearnedFgdPolicy, CountsTheCpuOfPodsWithoutAGpuBesideEachIdleGpu) {
  auto catalog = TestCatalog();
  struct Case {
    const char* name;
    bool cpu_only_pod_on_a;
    bool every_pod;
    double ratio;
  };
  std::map<bool, std::vector<int64_t>> scores;  // by cpu_only_pod_on_a, GPU pods only
  for (const Case& c : {Case{"GPU pods only", false, false, 0.0},
                        Case{"a CPU-only pod arrived", true, false, 1.0},
                        Case{"a CPU-only pod, every pod through the extender", true, true, 0.0}}) {
    SCOPED_TRACE(c.name);
    Mirror mirror(catalog, MirrorOptions{});
    NodesWhereAHasHalfTheCpu(mirror, c.cpu_only_pod_on_a);
    const std::unique_ptr<LearnedFgdPolicy> policy = QuickLearner(catalog);
    ASSERT_NE(policy, nullptr);
    DecisionCore::Options options;
    options.every_pod = c.every_pod;
    DecisionCore core(&mirror, policy.get(), options);
    const std::vector<absl::string_view> nodes = {"a", "b"};
    for (int i = 0; i < 64; ++i) core.Filter(GpuPod(absl::StrCat("train-", i), 4000), nodes);
    // 1 up to the decay of the GPU pod, listed before the CPU-only one.
    EXPECT_NEAR(policy->OtherHostDemand().first, c.ratio, 0.01);
    if (!c.every_pod) scores[c.cpu_only_pod_on_a] = core.Prioritize(GpuPod("probe", 4000), nodes);
  }
  EXPECT_EQ(scores[false][0], scores[false][1]);
  EXPECT_GT(scores[true][0], scores[true][1]) << "a's second GPU would starve: use it";
}

// Whole GPUs (kGpu) and time-sliced GPUs of 4 tickets (kTs).
std::shared_ptr<const Catalog> WholeAndTimeSlicedCatalog() {
  return CatalogOf({OfferingOf(kGpu), OfferingOf(kTs, Sharing::kTimeSliced, 4)});
}

// A pending pod of team-a asking for one ticket of kTs and `cpu_milli`.
PodObject TicketPod(const std::string& name, int64_t cpu_milli) {
  PodObject p = TeamAPod(name, "", cpu_milli, /*gpu=*/false);
  p.containers[0].requests_milli[kTs] = 1000;
  p.containers[0].limits_milli[kTs] = 1000;
  return p;
}

// Filter asked about 64 pods: 56 of one whole GPU and 8 cpus, 8 tickets of 2 cpus.
void AskAboutWholeGpuPodsAndAFewTickets(DecisionCore& core, const std::vector<absl::string_view>& nodes) {
  for (int i = 0; i < 64; ++i) {
    core.Filter(i % 8 == 0 ? TicketPod(absl::StrCat("infer-", i), 2000) : GpuPod(absl::StrCat("train-", i), 8000),
                nodes);
  }
}

// A pool the mix asks little of keeps most of its idle capacity idle whatever the node's
// cpu: fgd's starved term counts each pool's idle capacity by the mix's demand per unit of
// the cluster's open capacity (FragmentationOptions::open_units, from the mirror through
// filter). Node "slices" has 2 time-sliced GPUs, node "mixed" 2 whole GPUs and 2
// time-sliced ones, 16 cpus each; the mix is mostly whole-GPU pods of 8 cpus, with a few
// tickets. A ticket pod of 8 cpus then goes to "slices": on "mixed" its cpu would starve a
// whole GPU that the next pods want. Counting the idle slices in full, the two nodes look
// alike (each then has more idle capacity than cpu to feed it), and so they do when every
// pod comes to the extender.
TEST(LearnedFgdPolicy, IdleCapacityThatTheMixAsksLittleOfNeedsNoCpuBesideIt) {
  auto catalog = WholeAndTimeSlicedCatalog();
  Mirror mirror(catalog, MirrorOptions{});
  mirror.Write([&](ClusterState& s) {
    ObjectBatch b;
    b.namespaces.push_back({"team-a", {}});
    for (const auto& [name, whole] : {std::pair{"slices", 0}, std::pair{"mixed", 2}}) {
      NodeObject n = GpuNode(name, 16000);
      n.allocatable_milli[kGpu] = whole * 1000;
      n.allocatable_milli[kTs] = 2 * 4000;
      b.nodes.push_back(n);
    }
    s.ApplyBatch(b);
    return true;
  });
  const std::unique_ptr<LearnedFgdPolicy> policy = QuickLearner(catalog);
  ASSERT_NE(policy, nullptr);
  DecisionCore core(&mirror, policy.get());
  const std::vector<absl::string_view> nodes = {"slices", "mixed"};
  AskAboutWholeGpuPodsAndAFewTickets(core, nodes);
  const PodObject probe = TicketPod("probe", 8000);
  const std::vector<int64_t> weighed = core.Prioritize(probe, nodes);
  EXPECT_GT(weighed[0], weighed[1]) << "the ticket's cpu strands no whole GPU on \"slices\"";

  // The same learned mix without the cluster's capacity: every pool's idle capacity in full.
  FragmentationOptions fo;
  fo.tasks = policy->learner().Current();
  fo.host_free = MirrorHostFree;
  absl::StatusOr<std::unique_ptr<PlacementPolicy>> unweighed = MakeFragmentationPolicy(catalog, fo);
  ASSERT_TRUE(unweighed.ok()) << unweighed.status();
  DecisionCore plain(&mirror, unweighed->get());
  const std::vector<int64_t> full = plain.Prioritize(probe, nodes);
  EXPECT_EQ(full[0], full[1]);

  // With every pod through the extender, fgd packs the pods without a GPU itself and keeps
  // cpu beside every pool's idle capacity in full.
  const std::unique_ptr<LearnedFgdPolicy> every = QuickLearner(catalog);
  ASSERT_NE(every, nullptr);
  DecisionCore::Options every_pod;
  every_pod.every_pod = true;
  DecisionCore all(&mirror, every.get(), every_pod);
  AskAboutWholeGpuPodsAndAFewTickets(all, nodes);
  // (Its prioritize then names one node outright: the policy it learned scores as above.)
  const std::shared_ptr<const PlacementPolicy> learned = every->Snapshot();
  DecisionCore judge(&mirror, learned.get());
  EXPECT_EQ(judge.Prioritize(probe, nodes), full);
}

// A time-sliced unit that a project holds is where the project's next tickets must go (I3):
// its free tickets need cpu beside them as much as an idle GPU does. Nodes "joinable" and
// "full" (2 whole GPUs, 1 time-sliced GPU of 4 tickets, 12 cpus) differ only in team-b's
// slice: 1 ticket taken on "joinable", all 4 on "full". A whole-GPU pod of 8 cpus leaves 4,
// enough for the other whole GPU but not for the 3 tickets as well: it goes to "full".
TEST(FgdPolicy, TheFreeTicketsOfAProjectsUnitNeedCpuBesideThem) {
  auto catalog = WholeAndTimeSlicedCatalog();
  Mirror mirror(catalog, MirrorOptions{});
  mirror.Write([&](ClusterState& s) {
    ObjectBatch b;
    b.namespaces.push_back({"team-b", {}});
    for (const char* name : {"joinable", "full"}) {
      NodeObject n = GpuNode(name, 12000);
      n.allocatable_milli[kTs] = 4000;
      b.nodes.push_back(n);
    }
    s.ApplyBatch(b);
    for (const auto& [node, tickets] : {std::pair{"joinable", 1}, std::pair{"full", 4}}) {
      for (int i = 0; i < tickets; ++i) {
        Assignment a;
        a.node = node;
        a.offering = catalog->Find(kTs)->id;
        a.units = {0};
        const std::string name = absl::StrCat(node, "-infer-", i);
        EXPECT_TRUE(s.Reserve(PodClaim{"team-b/" + name, name + "-uid", "team-b", "team-b"}, a,
                              HoldingSource::kReserved)
                        .ok());
      }
    }
    return true;
  });
  FragmentationOptions fo;
  fo.tasks = {Task(kGpu, 1, 4000), Task(kTs, 1, 1000)};  // 4 cpus per GPU-equivalent
  fo.host_free = MirrorHostFree;
  absl::StatusOr<std::unique_ptr<PlacementPolicy>> policy = MakeFragmentationPolicy(catalog, fo);
  ASSERT_TRUE(policy.ok()) << policy.status();
  DecisionCore core(&mirror, policy->get());
  const std::vector<int64_t> scores = core.Prioritize(GpuPod("train", 8000), {"joinable", "full"});
  EXPECT_GT(scores[1], scores[0]) << "on \"joinable\" the pod's cpu starves team-b's next tickets";
}

TEST(FragmentationOptions, OpenUnitsAreOneCountPerOfferingNeverNegative) {
  auto catalog = TestCatalog();
  FragmentationOptions fo;
  fo.tasks = {Task(kGpu, 1, 4000)};
  fo.open_units = {4};
  absl::StatusOr<std::unique_ptr<PlacementPolicy>> p = MakeFragmentationPolicy(catalog, fo);
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), HasSubstr("open_units: must be empty or one count per catalog offering (2), got 1"));
  fo.open_units = {4, -1};
  p = MakeFragmentationPolicy(catalog, fo);
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), HasSubstr("open_units[1] (nvidia.com/gpu.mps): must be >= 0, got -1"));
  fo.open_units = {4, 0};  // a pool with no open unit is fine: nothing of it to weigh
  EXPECT_TRUE(MakeFragmentationPolicy(catalog, fo).ok());
  fo.open_units = {};
  EXPECT_TRUE(MakeFragmentationPolicy(catalog, fo).ok());
}

TEST(FragmentationOptions, TheOtherHostDemandMustBeAFiniteShareInRange) {
  auto catalog = TestCatalog();
  for (const double bad : {-0.5, kMaxOtherHostDemand * 2, std::nan(""), HUGE_VAL}) {
    FragmentationOptions fo;
    fo.tasks = {Task(kGpu, 1, 4000)};
    fo.other_memory_per_task_memory = bad;
    absl::StatusOr<std::unique_ptr<PlacementPolicy>> p = MakeFragmentationPolicy(catalog, fo);
    ASSERT_FALSE(p.ok()) << bad;
    EXPECT_THAT(p.status().message(), HasSubstr("other_memory_per_task_memory: must be a finite number"));
  }
  FragmentationOptions fo;
  fo.tasks = {Task(kGpu, 1, 4000)};
  fo.other_cpu_per_task_cpu = kMaxOtherHostDemand;
  EXPECT_TRUE(MakeFragmentationPolicy(catalog, fo).ok());
}

TEST(AcceptedGpuProducts, FromTheNodeSelectorElseFromEveryRequiredTerm) {
  const std::string kProduct = "nvidia.com/gpu.product";
  auto req = [&](const std::string& key, const std::string& op, std::vector<std::string> values) {
    return NodeSelectorRequirement{key, op, std::move(values)};
  };
  PodObject pod = GpuPod("p", 1000);
  EXPECT_TRUE(AcceptedGpuProducts(pod).empty()) << "no constraint: any product";

  pod.required_node_terms = {{req("zone", "In", {"a"}), req(kProduct, "In", {"H100", "A100"})},
                             {req(kProduct, "In", {"A100", "L40S"})}};
  EXPECT_EQ(AcceptedGpuProducts(pod), (std::vector<std::string>{"A100", "H100", "L40S"}))
      << "terms are ORed: the union, sorted, once each";

  pod.required_node_terms.push_back({req("zone", "In", {"b"})});
  EXPECT_TRUE(AcceptedGpuProducts(pod).empty()) << "a term without the product admits any";

  pod.required_node_terms = {{req(kProduct, "NotIn", {"T4"})}};
  EXPECT_TRUE(AcceptedGpuProducts(pod).empty()) << "NotIn names what is refused, not what is accepted";

  pod.node_selector[kProduct] = "H100";
  pod.required_node_terms = {{req(kProduct, "In", {"A100"})}};
  EXPECT_EQ(AcceptedGpuProducts(pod), (std::vector<std::string>{"H100"})) << "the nodeSelector comes first";
}

// A pod pinned to a product by required affinity teaches a class of that product, as one
// pinned by nodeSelector does.
TEST(LearnedFgdPolicy, LearnsTheProductsAPodAcceptsByAffinity) {
  auto catalog = TestCatalog();
  Mirror mirror(catalog, MirrorOptions{});
  NodesWithBusyCpuOnB(mirror, {"a"});
  TaskMixOptions o;
  o.republish_every = 1;
  absl::StatusOr<std::unique_ptr<LearnedFgdPolicy>> policy =
      LearnedFgdPolicy::Create(catalog, CatalogTaskMix(*catalog), o, MirrorHostFree);
  ASSERT_TRUE(policy.ok()) << policy.status();
  DecisionCore core(&mirror, policy->get());
  PodObject pinned = GpuPod("pinned", 1000);
  pinned.required_node_terms = {{NodeSelectorRequirement{"nvidia.com/gpu.product", "In", {"NVIDIA-A100"}}}};
  core.Filter(pinned, {"a"});
  ASSERT_EQ((*policy)->learner().observed(), 1);
  bool learned = false;
  for (const TaskClass& t : (*policy)->learner().Current()) {
    learned |= t.resource == kGpu && t.products == std::vector<std::string>{"NVIDIA-A100"};
  }
  EXPECT_TRUE(learned) << "no class of nvidia.com/gpu on NVIDIA-A100 in the learned mix";
}

// When kube-scheduler sends every pod (DecisionCore::Options::every_pod), fgd's best node
// scores 10 and every other node half its score, so kube-scheduler's in-tree scores (weight
// 1 each, at most 200 after x weight 5 x 10) cannot overturn fgd's choice; ties go to the
// lowest name. Policies that do not opt in, and deployments that send only GPU pods, keep
// their plain scores.
TEST(DecisionCore, SeeingEveryPodFgdNamesItsBestNodeOutright) {
  auto catalog = TestCatalog();
  Mirror mirror(catalog, MirrorOptions{});
  NodesWithBusyCpuOnB(mirror, {"a", "b", "c"});  // told tasks need 4 cpus, fgd prefers b
  absl::StatusOr<std::unique_ptr<LearnedFgdPolicy>> fgd = LearnedFgdPolicy::Create(
      catalog, {Task(kGpu, 1, 4000)}, TaskMixOptions{}, MirrorHostFree);
  ASSERT_TRUE(fgd.ok()) << fgd.status();
  const std::vector<absl::string_view> nodes = {"a", "b", "c"};

  DecisionCore gpu_pods_only(&mirror, fgd->get());
  const std::vector<int64_t> plain = gpu_pods_only.Prioritize(GpuPod("p", 2000), nodes);
  ASSERT_GT(plain[1], plain[0]);
  ASSERT_EQ(plain[0], plain[2]);
  ASSERT_GT(plain[0], 0);

  DecisionCore every_pod(&mirror, fgd->get(), DecisionCore::Options{/*every_pod=*/true});
  EXPECT_EQ(every_pod.Prioritize(GpuPod("p", 2000), nodes),
            (std::vector<int64_t>{plain[0] / 2, 10, plain[2] / 2}));
  // With b out of the candidates, a and c tie: the lower name wins.
  const std::vector<absl::string_view> a_and_c = {"c", "a"};
  EXPECT_EQ(every_pod.Prioritize(GpuPod("p", 2000), a_and_c),
            (std::vector<int64_t>{plain[2] / 2, 10}));
  // A pod no node can take scores 0 everywhere: nobody is named.
  PodObject huge = GpuPod("huge", 2000);
  huge.containers[0].requests_milli[kGpu] = 3000;
  huge.containers[0].limits_milli[kGpu] = 3000;
  EXPECT_EQ(every_pod.Prioritize(huge, nodes), (std::vector<int64_t>{0, 0, 0}));

  absl::StatusOr<std::unique_ptr<PlacementPolicy>> pack = MakePolicy("affinity-pack");
  ASSERT_TRUE(pack.ok()) << pack.status();
  DecisionCore pack_plain(&mirror, pack->get());
  DecisionCore pack_every_pod(&mirror, pack->get(), DecisionCore::Options{/*every_pod=*/true});
  EXPECT_EQ(pack_every_pod.Prioritize(GpuPod("p", 2000), nodes),
            pack_plain.Prioritize(GpuPod("p", 2000), nodes));
}

// Filters (which teach the mix and republish the policy) and prioritizes (which decide on a
// snapshot) from several threads at once: no race (the TSan build runs this), every pod
// counted once.
TEST(LearnedFgdPolicy, LearnsAndDecidesFromManyThreads) {
  auto catalog = TestCatalog();
  Mirror mirror(catalog, MirrorOptions{});
  mirror.Write([&](ClusterState& s) {
    NodeObject n;
    n.name = "a";
    n.allocatable_milli[kGpu] = 8000;
    n.allocatable_milli["cpu"] = 64000;
    n.allocatable_milli["memory"] = (int64_t{64} << 30) * 1000;
    n.allocatable_milli["pods"] = 110000;
    s.ApplyNode(n);
    return true;
  });
  TaskMixOptions o;
  o.republish_every = 4;
  absl::StatusOr<std::unique_ptr<LearnedFgdPolicy>> policy =
      LearnedFgdPolicy::Create(catalog, CatalogTaskMix(*catalog), o, MirrorHostFree);
  ASSERT_TRUE(policy.ok()) << policy.status();
  DecisionCore core(&mirror, policy->get());
  const std::vector<absl::string_view> nodes = {"a"};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        PodObject p;
        p.name = absl::StrCat("p-", t, "-", i);
        p.namespace_name = "team-a";
        p.uid = p.name + "-uid";
        p.containers.push_back({"c", {{"cpu", 1000 * (1 + i % 4)}, {kGpu, 1000 * (1 + i % 2)}}, {}});
        core.Filter(p, nodes);
        EXPECT_GT(core.Prioritize(p, nodes)[0], 0);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ((*policy)->learner().observed(), 200);
}

// fgd memoises each node's fragmentation (FragmentationModel::Impl::F) across calls. After
// every kind of change a node goes through (binds, released binds, host requests of pods
// without GPUs coming and going) and with two task mixes, a policy whose memo has seen every
// earlier state scores and chooses exactly as one built afresh for the state at hand.
TEST(FgdMemo, ScoresAsAFreshPolicyAfterEveryChange) {
  auto catalog = TestCatalog();
  Mirror mirror(catalog, MirrorOptions{});
  mirror.Write([&](ClusterState& s) {
    ObjectBatch b;
    b.namespaces.push_back({"team-a", {}});
    for (int i = 0; i < 4; ++i) {
      NodeObject n;
      n.name = absl::StrCat("n", i);
      n.allocatable_milli[kGpu] = 4000;
      n.allocatable_milli[kMps] = 16000;
      n.allocatable_milli["cpu"] = 16000;
      n.allocatable_milli["memory"] = (int64_t{64} << 30) * 1000;
      n.allocatable_milli["pods"] = 110000;
      b.nodes.push_back(n);
    }
    s.ApplyBatch(b);
    return true;
  });
  const std::vector<std::vector<TaskClass>> mixes = {
      {Task(kGpu, 1, 4000), Task(kGpu, 2, 2000), Task(kMps, 1, 1000), Task(kMps, 3, 500)},
      {Task(kGpu, 4, 8000), Task(kMps, 2, 6000)}};
  auto make = [&](size_t mix) {
    FragmentationOptions o;
    o.tasks = mixes[mix];
    o.host_free = MirrorHostFree;
    absl::StatusOr<std::unique_ptr<PlacementPolicy>> p = MakeFragmentationPolicy(catalog, o);
    EXPECT_TRUE(p.ok()) << p.status();
    return *std::move(p);
  };
  const std::vector<std::unique_ptr<PlacementPolicy>> warm = [&] {
    std::vector<std::unique_ptr<PlacementPolicy>> v;
    for (size_t m = 0; m < mixes.size(); ++m) v.push_back(make(m));
    return v;
  }();
  auto pod = [](const std::string& name, const std::string& resource, int64_t amount,
                int64_t cpu_milli) {
    PodObject p;
    p.name = name;
    p.namespace_name = "team-a";
    p.uid = name + "-uid";
    p.containers.push_back(
        {"c", {{"cpu", cpu_milli}, {resource, amount * 1000}}, {{resource, amount * 1000}}});
    return p;
  };
  const std::vector<PodObject> probes = {pod("p1", kGpu, 1, 1000), pod("p2", kGpu, 2, 6000),
                                         pod("p3", kMps, 1, 0), pod("p4", kMps, 3, 3000)};
  int compared = 0;
  auto check = [&](const std::string& when) {
    for (size_t m = 0; m < mixes.size(); ++m) {
      const std::unique_ptr<PlacementPolicy> fresh = make(m);
      mirror.Read([&](const ClusterState& s) {
        for (const PodObject& probe : probes) {
          const PodRequest r = ResolvePodRequest(s.catalog(), probe, "team-a");
          for (const auto& [name, node] : s.nodes()) {
            SCOPED_TRACE(absl::StrCat(when, ", mix ", m, ", ", probe.name, " on ", name));
            EXPECT_EQ(warm[m]->Score(s, r, *node), fresh->Score(s, r, *node));
            absl::StatusOr<Assignment> a = warm[m]->ChooseUnits(s, r, *node);
            absl::StatusOr<Assignment> b = fresh->ChooseUnits(s, r, *node);
            EXPECT_EQ(a.ok(), b.ok());
            if (a.ok() && b.ok()) {
              EXPECT_EQ(a->units, b->units);
            }
            ++compared;
          }
        }
        return 0;
      });
    }
  };
  check("empty");
  DecisionCore core(&mirror, warm[0].get());
  std::vector<std::pair<std::string, Assignment>> bound;
  for (int i = 0; i < 10; ++i) {
    const PodObject p = pod(absl::StrCat("b", i), i % 2 == 0 ? kGpu : kMps, 1 + i % 3, 1000 * i);
    const DecisionCore::Resolved r = core.Resolve(p);
    const std::string node = absl::StrCat("n", i % 4);
    ReserveDecision d =
        core.Reserve(PodClaim{"team-a/" + p.name, p.uid, "team-a", "team-a"}, r.request, node);
    if (!d.assignment.ok()) continue;
    bound.emplace_back(PodIdOf(p.uid, "team-a/" + p.name), *d.assignment);
    check(absl::StrCat("bind ", i));
  }
  ASSERT_GE(bound.size(), 4u);
  for (size_t i = 0; i < bound.size(); i += 2) {
    EXPECT_TRUE(mirror.ReleaseReservation(bound[i].first, bound[i].second));
    check(absl::StrCat("release ", i));
  }
  PodObject web;
  web.name = "web";
  web.namespace_name = "team-a";
  web.uid = "web-uid";
  web.node_name = "n1";
  web.containers.push_back({"c", {{"cpu", 12000}}, {}});
  mirror.Write([&](ClusterState& s) {
    s.ApplyPod(web);
    return true;
  });
  check("host request added");
  mirror.Write([&](ClusterState& s) {
    s.RemovePod(web.uid, "team-a/web");
    return true;
  });
  check("host request removed");
  EXPECT_GT(compared, 0);
}

// fgd caches prioritize's score per node under NodeState::version (FgdPolicy::ScoreFiltered).
// Through every kind of change that moves a score (binds and released binds of each sharing,
// host requests of pods without GPUs coming and going, a node's cpu and its GPUs changing,
// a project's own time-sliced unit), a decision core whose policy has scored every earlier
// state prioritizes exactly as one whose policy was built afresh for the state at hand; and
// each kind of change does move some score, so a stale entry would show.
TEST(FgdScoreCache, PrioritizesAsAFreshPolicyAfterEveryChange) {
  constexpr char kMpsOne[] = "nvidia.com/gpu.mps-one";
  Offering mps_one = OfferingOf(kMpsOne, Sharing::kMps, 4);
  mps_one.mps_single_project = true;
  auto catalog = CatalogOf({OfferingOf(kGpu), OfferingOf(kMps, Sharing::kMps, 4),
                            OfferingOf(kTs, Sharing::kTimeSliced, 4), mps_one});

  Mirror mirror(catalog, MirrorOptions{});
  auto node_object = [&](int i, int64_t cpu_milli, int64_t gpus) {
    NodeObject n;
    n.name = absl::StrCat("n", i);
    n.allocatable_milli[kGpu] = gpus * 1000;
    n.allocatable_milli[kMps] = gpus * 4000;
    n.allocatable_milli[kTs] = gpus * 4000;
    n.allocatable_milli[kMpsOne] = gpus * 4000;
    n.allocatable_milli["cpu"] = cpu_milli;
    n.allocatable_milli["memory"] = (int64_t{64} << 30) * 1000;
    n.allocatable_milli["pods"] = 110000;
    return n;
  };
  mirror.Write([&](ClusterState& s) {
    ObjectBatch b;
    b.namespaces.push_back({"team-a", {}});
    b.namespaces.push_back({"team-b", {}});
    for (int i = 0; i < 4; ++i) b.nodes.push_back(node_object(i, 16000, 4));
    s.ApplyBatch(b);
    return true;
  });
  const std::vector<absl::string_view> names = {"n0", "n1", "n2", "n3"};

  FragmentationOptions o;
  o.tasks = {Task(kGpu, 1, 4000), Task(kGpu, 2, 2000), Task(kMps, 1, 1000),
             Task(kMps, 3, 500),  Task(kTs, 1, 3000),  Task(kMpsOne, 2, 1000)};
  o.host_free = MirrorHostFree;
  auto make = [&] {
    absl::StatusOr<std::unique_ptr<PlacementPolicy>> p = MakeFragmentationPolicy(catalog, o);
    EXPECT_TRUE(p.ok()) << p.status();
    return *std::move(p);
  };

  auto pod = [](const std::string& name, const std::string& ns, const std::string& resource,
                int64_t amount, int64_t cpu_milli) {
    PodObject p;
    p.name = name;
    p.namespace_name = ns;
    p.uid = name + "-uid";
    p.containers.push_back(
        {"c", {{"cpu", cpu_milli}, {resource, amount * 1000}}, {{resource, amount * 1000}}});
    return p;
  };
  std::vector<PodObject> probes;
  for (const char* ns : {"team-a", "team-b"}) {
    for (const char* resource : {kGpu, kMps, kTs, kMpsOne}) {
      for (int64_t cpu : {0, 3000, 9000}) {
        const int64_t amount = std::string(resource) == kTs ? 1 : 1 + cpu / 3000 % 2;
        probes.push_back(pod(absl::StrCat("probe-", probes.size()), ns, resource, amount, cpu));
      }
    }
  }

  // One warm policy per probe: the cache keeps one request shape per node, so each warm
  // policy holds its probe's scores from the last check, and its first call now is answered
  // from them wherever the nodes' versions say nothing changed.
  std::vector<std::unique_ptr<PlacementPolicy>> warm;
  std::vector<std::unique_ptr<DecisionCore>> warm_cores;
  for (size_t i = 0; i < probes.size(); ++i) {
    warm.push_back(make());
    warm_cores.push_back(std::make_unique<DecisionCore>(&mirror, warm.back().get()));
  }
  std::vector<std::vector<int64_t>> last;
  int compared = 0;
  // Compares warm and fresh, and returns whether any score moved since the last check.
  auto check = [&](const std::string& when) {
    const std::unique_ptr<PlacementPolicy> fresh = make();
    DecisionCore fresh_core(&mirror, fresh.get());
    std::vector<std::vector<int64_t>> now;
    for (size_t p = 0; p < probes.size(); ++p) {
      SCOPED_TRACE(absl::StrCat(when, ", ", probes[p].name));
      now.push_back(fresh_core.Prioritize(probes[p], names));
      EXPECT_EQ(warm_cores[p]->Prioritize(probes[p], names), now.back());
      ++compared;
    }
    const bool moved = !last.empty() && now != last;
    last = std::move(now);
    return moved;
  };
  check("empty");

  std::vector<std::pair<std::string, Assignment>> bound;
  int moved = 0;
  const char* resources[] = {kGpu, kMps, kTs, kMpsOne};
  for (int i = 0; i < 8; ++i) {
    const PodObject p = pod(absl::StrCat("b", i), i % 3 == 0 ? "team-b" : "team-a",
                            resources[i % 4], i % 4 == 2 ? 1 : 1 + i % 2, 1000 * i);
    const DecisionCore::Resolved r = warm_cores[0]->Resolve(p);
    const std::string node = absl::StrCat("n", i % 4);
    ReserveDecision d = warm_cores[0]->Reserve(
        PodClaim{p.namespace_name + "/" + p.name, p.uid, p.namespace_name, p.namespace_name},
        r.request, node);
    ASSERT_TRUE(d.assignment.ok()) << d.assignment.status();
    bound.emplace_back(PodIdOf(p.uid, p.namespace_name + "/" + p.name), *d.assignment);
    // (A bind may leave every rounded score as it was: most do not.)
    if (check(absl::StrCat("bind ", i))) ++moved;
  }
  EXPECT_GE(moved, 5);
  moved = 0;
  for (size_t i = 0; i < bound.size(); i += 3) {
    EXPECT_TRUE(mirror.ReleaseReservation(bound[i].first, bound[i].second));
    if (check(absl::StrCat("release ", i))) ++moved;
  }
  EXPECT_GE(moved, 2);
  PodObject web;
  web.name = "web";
  web.namespace_name = "team-a";
  web.uid = "web-uid";
  web.node_name = "n1";
  web.containers.push_back({"c", {{"cpu", 11000}}, {}});
  mirror.Write([&](ClusterState& s) {
    s.ApplyPod(web);
    return true;
  });
  EXPECT_TRUE(check("host request added"));
  mirror.Write([&](ClusterState& s) {
    s.RemovePod(web.uid, "team-a/web");
    return true;
  });
  EXPECT_TRUE(check("host request removed"));
  mirror.Write([&](ClusterState& s) { return s.ApplyNode(node_object(2, 5000, 4)); });
  EXPECT_TRUE(check("node cpu changed"));
  mirror.Write([&](ClusterState& s) { return s.ApplyNode(node_object(3, 16000, 2)); });
  EXPECT_TRUE(check("node gpus changed"));
  EXPECT_GT(compared, 0);
}

// Threads prioritizing pods of different shapes at once on one fgd policy keep overwriting
// each other's cache entries (one per node): every score read is still the whole entry of
// its own shape (the TSan build runs this too).
TEST(FgdScoreCache, ConcurrentPrioritizesOfManyShapesReadWholeEntries) {
  auto catalog = TestCatalog();
  Mirror mirror(catalog, MirrorOptions{});
  std::vector<std::string> node_names;
  mirror.Write([&](ClusterState& s) {
    ObjectBatch b;
    b.namespaces.push_back({"team-a", {}});
    for (int i = 0; i < 16; ++i) {
      NodeObject n;
      n.name = absl::StrCat("n", i);
      n.allocatable_milli[kGpu] = 1000 * (1 + i % 8);
      n.allocatable_milli[kMps] = 4000 * (1 + i % 8);
      n.allocatable_milli["cpu"] = 2000 * (1 + i);
      n.allocatable_milli["memory"] = (int64_t{64} << 30) * 1000;
      n.allocatable_milli["pods"] = 110000;
      b.nodes.push_back(n);
      node_names.push_back(n.name);
    }
    s.ApplyBatch(b);
    return true;
  });
  const std::vector<absl::string_view> names(node_names.begin(), node_names.end());
  FragmentationOptions o;
  o.tasks = {Task(kGpu, 1, 4000), Task(kGpu, 2, 2000), Task(kMps, 1, 1000), Task(kMps, 3, 500)};
  o.host_free = MirrorHostFree;
  auto make = [&] {
    absl::StatusOr<std::unique_ptr<PlacementPolicy>> p = MakeFragmentationPolicy(catalog, o);
    EXPECT_TRUE(p.ok()) << p.status();
    return *std::move(p);
  };
  std::vector<PodObject> shapes;
  for (int i = 0; i < 6; ++i) {
    PodObject p;
    p.name = absl::StrCat("shape-", i);
    p.namespace_name = "team-a";
    p.uid = p.name + "-uid";
    const std::string resource = i % 2 == 0 ? kGpu : kMps;
    const int64_t amount = 1 + i / 3;
    p.containers.push_back(
        {"c", {{"cpu", 1500 * i}, {resource, amount * 1000}}, {{resource, amount * 1000}}});
    shapes.push_back(p);
  }
  std::vector<std::vector<int64_t>> expected;
  for (const PodObject& p : shapes) {
    const std::unique_ptr<PlacementPolicy> alone = make();
    expected.push_back(DecisionCore(&mirror, alone.get()).Prioritize(p, names));
  }
  std::set<std::vector<int64_t>> distinct(expected.begin(), expected.end());
  EXPECT_GT(distinct.size(), 2u) << "the shapes must score differently to tell entries apart";
  const std::unique_ptr<PlacementPolicy> shared = make();
  DecisionCore core(&mirror, shared.get());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 300; ++i) {
        const size_t s = static_cast<size_t>(t + i) % shapes.size();
        EXPECT_EQ(core.Prioritize(shapes[s], names), expected[s]) << shapes[s].name;
      }
    });
  }
  for (std::thread& t : threads) t.join();
}

}  // namespace
}  // namespace gse
