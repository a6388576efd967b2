// The replayer's in-process placer and the service decide alike (issue 13): the same request
// sequence goes through ExtenderService's filter/prioritize/bind bodies and through
// InProcessPlacer, under every policy, and every verdict, score, reserved unit, own-or-new
// unit outcome and the final holdings must agree. A replay is only a prediction of the
// cluster if it runs the service's decisions; tests/replay_test.cc checks the same for whole
// HTTP replays, this suite pins the verbs one by one, including what an HTTP replay of the
// openb traces never reaches (agent gates, unknown nodes, quota at bind).
#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "extender/decision_log.h"
#include "extender/extender_service.h"
#include "gtest/gtest.h"
#include "kube/binder.h"
#include "perf/in_process_placer.h"
#include "perf/replay_engine.h"
#include "rapidjson/document.h"
#include "scoring/decision_core.h"
#include "scoring/feasibility.h"
#include "scoring/fragmentation_policy.h"
#include "scoring/policies.h"
#include "scoring/task_mix.h"
#include "state/assignment.h"
#include "state/catalog.h"
#include "state/k8s_objects.h"
#include "state/mirror.h"

namespace gse::replay {
namespace {

constexpr char kGpu[] = "nvidia.com/gpu";
constexpr char kTs[] = "nvidia.com/mig-1g.5gb.shared";
constexpr char kMps[] = "nvidia.com/gpu.mps";

std::shared_ptr<const Catalog> TestCatalog() {
  std::vector<Offering> v(3);
  v[0].resource = kGpu;
  v[1].resource = kTs;
  v[1].unit = UnitKind::kMig;
  v[1].mig_profile = "1g.5gb";
  v[1].sharing = Sharing::kTimeSliced;
  v[1].replicas = 2;
  v[2].resource = kMps;
  v[2].sharing = Sharing::kMps;
  v[2].replicas = 4;
  absl::StatusOr<Catalog> c = Catalog::FromOfferings(std::move(v));
  EXPECT_TRUE(c.ok()) << c.status();
  return std::make_shared<const Catalog>(*std::move(c));
}

// 2 whole GPUs, 3 time-sliced slices of 2 tickets, 2 MPS GPUs of 4 shares, 16 cpus, 64 GiB;
// `agent`: the node carries its agent's inventory, so pods bound there wait for the agent
// (agent gate).
NodeObject Node(const std::string& name, bool agent = false) {
  NodeObject n;
  n.name = name;
  n.uid = name + "-uid";
  n.allocatable_milli["cpu"] = 16000;
  n.allocatable_milli["memory"] = (int64_t{64} << 30) * 1000;
  n.allocatable_milli["pods"] = 110000;
  n.allocatable_milli[kGpu] = 2000;
  n.allocatable_milli[kTs] = 6000;
  n.allocatable_milli[kMps] = 8000;
  if (agent) n.agent_inventory = R"({"version":1,"resources":{}})";
  return n;
}

ObjectBatch Cluster() {
  ObjectBatch b;
  for (const char* ns : {"team-a", "team-b", "team-q", "plain"}) b.namespaces.push_back({ns, {}});
  // team-q may hold 2 tickets: one slice.
  b.quotas.push_back({"gpu", "team-q", {{absl::StrCat("requests.", kTs), 2000}}});
  b.nodes = {Node("n1"), Node("n2"), Node("n3"), Node("agent", /*agent=*/true)};
  return b;
}

// GPU pods ask for `cpu` cpus and 1 GiB besides (fgd reads them through the host view).
std::string PodJson(const std::string& ns, const std::string& name, const std::string& resource,
                    int amount, const std::string& cpu = "2") {
  std::string res = resource.empty()
                        ? absl::StrCat(R"("requests":{"cpu":")", cpu, R"("})")
                        : absl::StrCat(R"("requests":{"cpu":")", cpu, R"(","memory":"1Gi",")",
                                       resource, R"(":")", amount, R"("},"limits":{")", resource,
                                       R"(":")", amount, R"("})");
  return absl::StrCat(R"({"metadata":{"name":")", name, R"(","namespace":")", ns,
                      R"(","uid":")", ns, "-", name, R"(-uid"},"spec":{"containers":[{"name":"c","resources":{)",
                      res, "}}]}}");
}

PodObject DecodePodText(const std::string& json) {
  rapidjson::Document doc;
  doc.Parse(json.data(), json.size());
  absl::StatusOr<PodObject> pod = DecodePod(doc, "pod");
  EXPECT_TRUE(pod.ok()) << pod.status();
  return pod.ok() ? *std::move(pod) : PodObject();
}

// Remembers each bind's annotations, as the API server would store them on the pod.
class RecordingBinder : public Binder {
 public:
  BindResult Bind(const BindTarget& target,
                  const std::map<std::string, std::string>& annotations) override {
    absl::MutexLock lock(&mu_);
    annotations_[target.pod_uid] = annotations;
    return BindResult::Bound();
  }
  std::map<std::string, std::string> Of(const std::string& uid) {
    absl::MutexLock lock(&mu_);
    return annotations_[uid];
  }

 private:
  absl::Mutex mu_;
  std::map<std::string, std::map<std::string, std::string>> annotations_ ABSL_GUARDED_BY(mu_);
};

// What one bind did, comparable across both paths.
struct BindSeen {
  bool bound = false;
  std::string node;
  std::vector<int32_t> units;
  int32_t amount = 0;
  std::string placement;  // "own_unit", "new_unit", "" (not time-sliced or not bound)
  std::string Describe() const {
    if (!bound) return "refused";
    return absl::StrCat(node, " [", absl::StrJoin(units, ","), "] x", amount, " ", placement);
  }
};

std::string LabelOfMessage(absl::string_view message) {
  for (int r = 0; r < kFitReasonCount; ++r) {
    if (FitReasonText(static_cast<FitReason>(r)) == message) {
      return std::string(FitReasonLabel(static_cast<FitReason>(r)));
    }
  }
  return std::string(FitReasonLabel(FitReason::kPodUnresolvable));  // the pod's own reason
}

// Every unit with holders, and its owner, in a stable order.
std::vector<std::string> Holdings(const Mirror& mirror) {
  return mirror.Read([](const ClusterState& state) {
    std::vector<std::string> out;
    for (const auto& [name, node] : state.nodes()) {
      for (const NodeOffering& no : node->offerings) {
        for (const Unit& u : no.units) {
          if (u.used == 0) continue;
          out.push_back(absl::StrCat(UnitId(name, state.catalog().Get(no.offering).resource, u.index),
                                     " used=", u.used, " owner=",
                                     u.owner == kNoProject ? "-" : state.project(u.owner).name));
        }
      }
    }
    std::sort(out.begin(), out.end());
    return out;
  });
}

// One policy's service (over its own mirror) and in-process placer (over its), fed the same
// facts, asked the same questions.
class Pair {
 public:
  explicit Pair(const std::string& policy)
      : catalog_(TestCatalog()),
        mirror_(catalog_, MirrorOptions{}),
        log_(DecisionLogLevel::kAll, [this](absl::string_view line) {
          absl::MutexLock lock(&log_mu_);
          log_lines_.emplace_back(line);
        }) {
    ServiceOptions options;
    options.decision_log = &log_;
    // Both are sent every pod: pods outside the catalog are scored, as by a replay with
    // --extender-all-pods, and fgd names its best node outright in both.
    options.score_pods_without_offering = true;
    service_ = std::make_unique<ExtenderService>(&mirror_, MakeNamed(policy), &binder_, options);
    placer_ = std::make_unique<InProcessPlacer>(catalog_, MakeNamed(policy),
                                                DecisionCore::Options{/*every_pod=*/true});
    const ObjectBatch batch = Cluster();
    mirror_.Write([&](ClusterState& s) {
      s.ApplyBatch(batch);
      return true;
    });
    EXPECT_TRUE(placer_->Start("", batch).ok());
  }

  PodPlan Plan(const std::string& ns, const std::string& name, const std::string& resource,
               int amount = 1, const std::string& cpu = "2") {
    PodPlan plan;
    plan.pod_json = PodJson(ns, name, resource, amount, cpu);
    plan.pod = DecodePodText(plan.pod_json);
    plan.project = ns;
    return plan;
  }

  // filter through both; node -> "" (passes) or the failure's label.
  std::map<std::string, std::string> ServiceFilter(const PodPlan& plan,
                                                   const std::vector<std::string>& nodes) {
    rapidjson::Document doc = Answer(service_->Filter(Args(plan, nodes)).body);
    std::map<std::string, std::string> out;
    if (doc.HasMember("NodeNames") && doc["NodeNames"].IsArray()) {
      for (const auto& n : doc["NodeNames"].GetArray()) out[n.GetString()] = "";
    }
    for (const char* key : {"FailedNodes", "FailedAndUnresolvableNodes"}) {
      if (!doc.HasMember(key) || !doc[key].IsObject()) continue;
      for (const auto& m : doc[key].GetObject()) out[m.name.GetString()] = LabelOfMessage(m.value.GetString());
    }
    return out;
  }
  std::map<std::string, std::string> PlacerFilter(const PodPlan& plan,
                                                  const std::vector<std::string>& nodes) {
    absl::StatusOr<FilterAnswer> a = placer_->Filter(plan, nodes);
    EXPECT_TRUE(a.ok()) << a.status();
    std::map<std::string, std::string> out;
    if (!a.ok()) return out;
    for (const std::string& n : a->passed) out[n] = "";
    for (const auto& [n, label] : a->failed) out[n] = label;
    return out;
  }

  std::vector<int64_t> ServicePrioritize(const PodPlan& plan, const std::vector<std::string>& nodes) {
    rapidjson::Document doc = Answer(service_->Prioritize(Args(plan, nodes)).body);
    std::vector<int64_t> out;
    if (!doc.IsArray()) return out;
    for (const auto& e : doc.GetArray()) out.push_back(e["Score"].GetInt64());
    return out;
  }
  std::vector<int64_t> PlacerPrioritize(const PodPlan& plan, const std::vector<std::string>& nodes) {
    absl::StatusOr<std::vector<int64_t>> s = placer_->Prioritize(plan, nodes);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *s : std::vector<int64_t>{};
  }

  BindSeen ServiceBind(const PodPlan& plan, const std::string& node) {
    const std::string body = absl::StrCat(R"({"PodName":")", plan.pod.name, R"(","PodNamespace":")",
                                          plan.pod.namespace_name, R"(","PodUID":")", plan.pod.uid,
                                          R"(","Node":")", node, R"("})");
    rapidjson::Document doc = Answer(service_->Bind(body).body);
    BindSeen seen;
    seen.bound = doc.IsObject() && doc.HasMember("Error") && doc["Error"].IsString() &&
                 doc["Error"].GetStringLength() == 0;
    if (!seen.bound) return seen;
    absl::StatusOr<Assignment> a =
        ParseAssignmentAnnotations(binder_.Of(plan.pod.uid), node, *catalog_);
    EXPECT_TRUE(a.ok()) << a.status();
    if (a.ok()) {
      seen.node = a->node;
      seen.units = a->units;
      seen.amount = a->amount_per_unit;
    }
    rapidjson::Document line = Answer(LastLogLine());
    if (line.IsObject() && line.HasMember("placement")) seen.placement = line["placement"].GetString();
    return seen;
  }
  BindSeen PlacerBind(const PodPlan& plan, const std::string& node) {
    BindSeen seen;
    const ReserveDecision d = placer_->BindWithOutcome(plan, node);
    seen.bound = d.assignment.ok();
    if (!seen.bound) return seen;
    seen.node = d.assignment->node;
    seen.units = d.assignment->units;
    seen.amount = d.assignment->amount_per_unit;
    seen.placement = d.time_sliced ? (d.own_unit ? "own_unit" : "new_unit") : "";
    return seen;
  }

  // bind of a pod without a catalog resource: the service binds it without annotations and
  // its watch then shows it bound (applied here, as the reflector would); the placer records
  // it as that watch would. Whether the service's bind succeeded.
  bool BindWithoutUnits(const PodPlan& plan, const std::string& node) {
    const std::string body = absl::StrCat(R"({"PodName":")", plan.pod.name, R"(","PodNamespace":")",
                                          plan.pod.namespace_name, R"(","PodUID":")", plan.pod.uid,
                                          R"(","Node":")", node, R"("})");
    rapidjson::Document doc = Answer(service_->Bind(body).body);
    const bool bound = doc.IsObject() && doc.HasMember("Error") && doc["Error"].IsString() &&
                       doc["Error"].GetStringLength() == 0;
    EXPECT_TRUE(binder_.Of(plan.pod.uid).empty()) << "no unit annotation";
    PodObject seen = plan.pod;
    seen.node_name = node;
    seen.phase = "Running";
    mirror_.Write([&](ClusterState& s) {
      s.ApplyPod(seen);
      return true;
    });
    EXPECT_TRUE(placer_->BindWithoutUnits(plan, node).ok());
    return bound;
  }
  // Both deletions: the service's watch event, the placer's DeletePod.
  void Delete(const PodPlan& plan) {
    mirror_.Write([&](ClusterState& s) {
      s.RemovePod(plan.pod.uid, plan.pod.Key());
      return true;
    });
    EXPECT_TRUE(placer_->DeletePod(plan.pod.namespace_name, plan.pod.name).ok());
  }

  Mirror& service_mirror() { return mirror_; }
  InProcessPlacer& placer() { return *placer_; }

 private:
  std::unique_ptr<PlacementPolicy> MakeNamed(const std::string& name) {
    // The service's policies as main() makes them (fgd with the mirror's host view), for
    // the service and the placer alike.
    absl::StatusOr<std::unique_ptr<PlacementPolicy>> p =
        name == "bestfit" ? MakeBestFitPolicy(catalog_, {}) : MakeServicePolicy(name, catalog_);
    EXPECT_TRUE(p.ok()) << p.status();
    return *std::move(p);
  }
  static std::string Args(const PodPlan& plan, const std::vector<std::string>& nodes) {
    std::vector<std::string> quoted;
    for (const std::string& n : nodes) quoted.push_back(absl::StrCat("\"", n, "\""));
    return absl::StrCat(R"({"Pod":)", plan.pod_json, R"(,"Nodes":null,"NodeNames":[)",
                        absl::StrJoin(quoted, ","), "]}");
  }
  static rapidjson::Document Answer(const std::string& body) {
    rapidjson::Document doc;
    doc.Parse(body.data(), body.size());
    return doc;
  }
  std::string LastLogLine() {
    absl::MutexLock lock(&log_mu_);
    return log_lines_.empty() ? "" : log_lines_.back();
  }

  std::shared_ptr<const Catalog> catalog_;
  Mirror mirror_;
  RecordingBinder binder_;
  absl::Mutex log_mu_;
  std::vector<std::string> log_lines_ ABSL_GUARDED_BY(log_mu_);
  DecisionLog log_;
  std::unique_ptr<ExtenderService> service_;
  std::unique_ptr<InProcessPlacer> placer_;
};

class ParityTest : public ::testing::TestWithParam<std::string> {
 protected:
  ParityTest() : pair_(GetParam()) {}

  // kube-scheduler's cycle as the replayer plays it: filter, prioritize the passing nodes,
  // bind on the best (ties to the lowest name). Returns the bind, or "refused" when nothing
  // passed.
  BindSeen Schedule(const std::string& ns, const std::string& name, const std::string& resource,
                    int amount = 1) {
    SCOPED_TRACE(absl::StrCat(ns, "/", name));
    const PodPlan plan = pair_.Plan(ns, name, resource, amount);
    const std::vector<std::string> candidates = {"agent", "ghost", "n1", "n2", "n3"};
    const std::map<std::string, std::string> verdicts = pair_.ServiceFilter(plan, candidates);
    EXPECT_EQ(verdicts, pair_.PlacerFilter(plan, candidates)) << "filter verdicts";
    std::vector<std::string> passed;
    for (const auto& [node, why] : verdicts) {
      if (why.empty()) passed.push_back(node);
    }
    if (passed.empty()) return BindSeen{};
    const std::vector<int64_t> scores = pair_.ServicePrioritize(plan, passed);
    EXPECT_EQ(scores, pair_.PlacerPrioritize(plan, passed)) << "prioritize scores";
    size_t best = 0;
    for (size_t i = 1; i < scores.size(); ++i) {
      if (scores[i] > scores[best]) best = i;
    }
    return BindBoth(plan, passed[best]);
  }

  // Bind on `node` whatever filter said (kube-scheduler binds on what its own view chose; a
  // bind re-checks). Filter runs first, as the service binds only pods it has seen.
  BindSeen BindOn(const std::string& ns, const std::string& name, const std::string& resource,
                  const std::string& node, int amount = 1) {
    SCOPED_TRACE(absl::StrCat(ns, "/", name, " on ", node));
    const PodPlan plan = pair_.Plan(ns, name, resource, amount);
    EXPECT_EQ(pair_.ServiceFilter(plan, {node}), pair_.PlacerFilter(plan, {node}));
    return BindBoth(plan, node);
  }

  BindSeen BindBoth(const PodPlan& plan, const std::string& node) {
    const BindSeen service = pair_.ServiceBind(plan, node);
    const BindSeen placer = pair_.PlacerBind(plan, node);
    EXPECT_EQ(service.Describe(), placer.Describe()) << "bind of " << plan.pod.Key() << " on " << node;
    return service;
  }

  Pair pair_;
};

TEST_P(ParityTest, TimeSlicedOwnUnitSpillAndAnotherProject) {
  const BindSeen first = Schedule("team-a", "ts-1", kTs);
  EXPECT_EQ(first.placement, "new_unit");
  EXPECT_EQ(Schedule("team-a", "ts-2", kTs).placement, "own_unit");
  // Another project never joins team-a's slice (I2).
  const BindSeen other = Schedule("team-b", "ts-1", kTs);
  EXPECT_TRUE(other.bound);
  EXPECT_EQ(other.placement, "new_unit");
  // team-a's slice is full (2 tickets): the next replica opens a new one.
  EXPECT_EQ(Schedule("team-a", "ts-3", kTs).placement, "new_unit");
  EXPECT_EQ(Schedule("team-a", "ts-4", kTs).placement, "own_unit");
  EXPECT_EQ(Holdings(pair_.service_mirror()), Holdings(pair_.placer().mirror()));
}

TEST_P(ParityTest, QuotaExhaustedAtFilterAndAtBind) {
  EXPECT_EQ(Schedule("team-q", "ts-1", kTs).placement, "new_unit");
  EXPECT_EQ(Schedule("team-q", "ts-2", kTs).placement, "own_unit");
  // The one slice team-q may hold is full: every node fails on quota, and a bind anyway is
  // refused.
  EXPECT_FALSE(Schedule("team-q", "ts-3", kTs).bound);
  EXPECT_FALSE(BindOn("team-q", "ts-3", kTs, "n3").bound);
  EXPECT_EQ(Holdings(pair_.service_mirror()), Holdings(pair_.placer().mirror()));
}

TEST_P(ParityTest, UnknownNodeAndPodsOutsideTheCatalog) {
  // A node the mirror does not know fails with a reason and is never bound to (I6).
  EXPECT_FALSE(BindOn("team-a", "gpu-1", kGpu, "ghost").bound);
  // A pod asking for no catalog resource passes every candidate, the unknown one too (I6).
  {
    const PodPlan plan = pair_.Plan("plain", "web", "");
    const std::vector<std::string> candidates = {"ghost", "n1"};
    const std::map<std::string, std::string> verdicts = pair_.ServiceFilter(plan, candidates);
    EXPECT_EQ(verdicts, (std::map<std::string, std::string>{{"ghost", ""}, {"n1", ""}}));
    EXPECT_EQ(verdicts, pair_.PlacerFilter(plan, candidates));
  }
  // More than one ticket of a time-sliced offering: unresolvable everywhere (I5).
  EXPECT_FALSE(Schedule("team-a", "ts-two", kTs, 2).bound);
  EXPECT_TRUE(Schedule("team-a", "gpu-2", kGpu).bound);
  EXPECT_EQ(Holdings(pair_.service_mirror()), Holdings(pair_.placer().mirror()));
}

TEST_P(ParityTest, AgentGateWaitsAndJoinsTheWaitingGroup) {
  // An exclusive pod bound on the agent's node waits for the agent: the next one is kept off
  // the node ("waiting for the node agent").
  EXPECT_TRUE(BindOn("team-a", "gpu-1", kGpu, "agent").bound);
  EXPECT_FALSE(BindOn("team-a", "gpu-2", kGpu, "agent").bound);
  // MPS behind a closed gate: another pod may only join the waiting pods' unit and amount,
  // whatever the policy would have chosen.
  const BindSeen mps1 = BindOn("team-a", "mps-1", kMps, "agent");
  EXPECT_TRUE(mps1.bound);
  const BindSeen mps2 = BindOn("team-b", "mps-2", kMps, "agent");
  EXPECT_TRUE(mps2.bound);
  EXPECT_EQ(mps2.units, mps1.units);
  EXPECT_EQ(Holdings(pair_.service_mirror()), Holdings(pair_.placer().mirror()));
}

TEST_P(ParityTest, ScoresFollowTheMirrorAsItFills) {
  for (int i = 0; i < 6; ++i) EXPECT_TRUE(Schedule("team-a", absl::StrCat("mps-", i), kMps).bound);
  for (int i = 0; i < 5; ++i) Schedule("team-b", absl::StrCat("gpu-", i), kGpu);
  EXPECT_EQ(Holdings(pair_.service_mirror()), Holdings(pair_.placer().mirror()));
}

// Free cpu and memory of every node as fgd reads them (MirrorHostFree).
std::vector<std::string> HostViews(const Mirror& mirror) {
  return mirror.Read([](const ClusterState& state) {
    std::vector<std::string> out;
    for (const auto& [name, node] : state.nodes()) {
      int64_t cpu = 0, memory = 0;
      const bool known = MirrorHostFree(state, *node, &cpu, &memory);
      out.push_back(absl::StrCat(name, known ? "" : " unknown", " cpu=", cpu, " memory=", memory));
    }
    std::sort(out.begin(), out.end());
    return out;
  });
}

TEST_P(ParityTest, PodsOutsideTheCatalogScoredBoundAndCountedAlike) {
  const std::vector<std::string> candidates = {"n1", "n2", "n3"};
  std::vector<PodPlan> web;
  for (int i = 0; i < 4; ++i) {
    SCOPED_TRACE(i);
    const PodPlan plan = pair_.Plan("plain", absl::StrCat("web-", i), "", 0, i % 2 ? "7" : "3");
    EXPECT_EQ(pair_.ServiceFilter(plan, candidates), pair_.PlacerFilter(plan, candidates));
    const std::vector<int64_t> scores = pair_.ServicePrioritize(plan, candidates);
    EXPECT_EQ(scores, pair_.PlacerPrioritize(plan, candidates)) << "prioritize scores";
    ASSERT_EQ(scores.size(), candidates.size());
    const size_t best = static_cast<size_t>(std::max_element(scores.begin(), scores.end()) - scores.begin());
    EXPECT_TRUE(pair_.BindWithoutUnits(plan, candidates[best]));
    web.push_back(plan);
  }
  // The host views agree (every bound pod counts in both), so GPU pods score alike after them.
  EXPECT_EQ(HostViews(pair_.service_mirror()), HostViews(pair_.placer().mirror()));
  EXPECT_NE(HostViews(pair_.placer().mirror()), HostViews(Pair(GetParam()).placer().mirror()))
      << "the CPU-only pods count in the placer's host view";
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(Schedule("team-a", absl::StrCat("gpu-", i), kGpu).bound);
  // Deleted, they count no more in either.
  for (const PodPlan& plan : web) pair_.Delete(plan);
  EXPECT_EQ(HostViews(pair_.service_mirror()), HostViews(pair_.placer().mirror()));
  EXPECT_TRUE(Schedule("team-b", "mps-0", kMps).bound);
  EXPECT_EQ(Holdings(pair_.service_mirror()), Holdings(pair_.placer().mirror()));
}

INSTANTIATE_TEST_SUITE_P(Policies, ParityTest,
                         ::testing::Values("affinity-pack", "spread", "bestfit", "fgd"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

// ---- fgd in the service: the mirror's host view ----

// A binder whose answer the test sets: bound, or refused by the API.
class SwitchBinder : public Binder {
 public:
  BindResult Bind(const BindTarget&, const std::map<std::string, std::string>&) override {
    absl::MutexLock lock(&mu_);
    return refuse_ ? BindResult::NotBound(absl::FailedPreconditionError("refused by the test"))
                   : BindResult::Bound();
  }
  void Refuse(bool refuse) {
    absl::MutexLock lock(&mu_);
    refuse_ = refuse;
  }

 private:
  absl::Mutex mu_;
  bool refuse_ ABSL_GUARDED_BY(mu_) = false;
};

// Nodes a and b alike in GPUs (2 whole GPUs, 8 cpus each); on b a CPU-only pod already takes
// 6 cpus. The expected tasks ask for 1 GPU and 4 cpus. A pod of 1 GPU and 2 cpus:
//   on a, both GPUs stay usable (8 - 2 = 6 cpus feed the other one): fragmentation 0 -> 0;
//   on b, the 2 free cpus already strand both idle GPUs (F = 2); placing the pod there uses
//   one of them up (F = 1): a negative delta, the better score.
// Without the host view the nodes are alike and the tie goes to a, leaving b's GPUs stranded.
class FgdHostTest : public ::testing::Test {
 protected:
  FgdHostTest() : catalog_(TestCatalog()), mirror_(catalog_, MirrorOptions{}) {
    mirror_.Write([&](ClusterState& s) {
      ObjectBatch b;
      b.namespaces.push_back({"team-a", {}});
      for (const char* name : {"a", "b"}) {
        NodeObject n;
        n.name = name;
        n.uid = absl::StrCat(name, "-uid");
        n.allocatable_milli[kGpu] = 2000;
        n.allocatable_milli["cpu"] = 8000;
        n.allocatable_milli["memory"] = (int64_t{64} << 30) * 1000;
        n.allocatable_milli["pods"] = 110000;
        b.nodes.push_back(n);
      }
      PodObject web = DecodePodText(PodJson("team-a", "web", "", 0, "6"));
      web.node_name = "b";
      b.pods.push_back(web);
      s.ApplyBatch(b);
      return true;
    });
  }

  std::unique_ptr<ExtenderService> Service(bool host_view) {
    FragmentationOptions o;
    TaskClass t;
    t.resource = kGpu;
    t.cpu_milli = 4000;
    o.tasks = {t};
    if (host_view) o.host_free = MirrorHostFree;
    absl::StatusOr<std::unique_ptr<PlacementPolicy>> p = MakeFragmentationPolicy(catalog_, o);
    EXPECT_TRUE(p.ok()) << p.status();
    return std::make_unique<ExtenderService>(&mirror_, *std::move(p), &binder_, ServiceOptions{});
  }

  static std::string Args(const std::string& pod_json) {
    return absl::StrCat(R"({"Pod":)", pod_json, R"(,"Nodes":null,"NodeNames":["a","b"]})");
  }
  static std::vector<int64_t> Scores(const std::string& body) {
    rapidjson::Document doc;
    doc.Parse(body.data(), body.size());
    std::vector<int64_t> out;
    if (!doc.IsArray()) return out;
    for (const auto& e : doc.GetArray()) out.push_back(e["Score"].GetInt64());
    return out;
  }
  static std::string BindBody(const std::string& name, const std::string& node) {
    return absl::StrCat(R"({"PodName":")", name, R"(","PodNamespace":"team-a","PodUID":"team-a-)",
                        name, R"(-uid","Node":")", node, R"("})");
  }
  int64_t FreeCpu(const std::string& node) {
    return mirror_.Read([&](const ClusterState& s) {
      int64_t cpu = -1;
      EXPECT_TRUE(s.HostFree(*s.FindNode(node), &cpu, nullptr, nullptr));
      return cpu;
    });
  }

  std::shared_ptr<const Catalog> catalog_;
  Mirror mirror_;
  SwitchBinder binder_;
};

TEST_F(FgdHostTest, PrefersTheNodeWhereThePodFragmentsLeastGivenHostCpu) {
  const std::string pod = PodJson("team-a", "p1", kGpu, 1, "2");
  const std::vector<int64_t> blind = Scores(Service(false)->Prioritize(Args(pod)).body);
  ASSERT_EQ(blind.size(), 2u);
  EXPECT_EQ(blind[0], blind[1]) << "without cpu the nodes look alike";

  std::unique_ptr<ExtenderService> service = Service(true);
  const std::vector<int64_t> seen = Scores(service->Prioritize(Args(pod)).body);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_GT(seen[1], seen[0]) << "b: the pod uses a GPU that b's cpu would strand anyway";
  EXPECT_EQ(seen[0], 5);  // a: delta 0
}

TEST_F(FgdHostTest, OurBindCountsBeforeTheWatchShowsItAndARefusedOneGivesItBack) {
  std::unique_ptr<ExtenderService> service = Service(true);
  ASSERT_EQ(FreeCpu("a"), 8000);
  // A refused bind: nothing of the pod stays counted.
  const std::string p1 = PodJson("team-a", "p1", kGpu, 1, "2");
  ASSERT_EQ(service->Filter(Args(p1)).status, 200);
  binder_.Refuse(true);
  EXPECT_NE(service->Bind(BindBody("p1", "a")).body.find("refused by the test"), std::string::npos);
  EXPECT_EQ(FreeCpu("a"), 8000);
  // A bound one counts at once (no watch here, as before the watch event arrives)...
  binder_.Refuse(false);
  EXPECT_NE(service->Bind(BindBody("p1", "a")).body.find(R"("Error":"")"), std::string::npos);
  EXPECT_EQ(FreeCpu("a"), 6000);
  // ...and the watch's bound pod (same UID, our annotations) replaces the count, once.
  PodObject seen = DecodePodText(p1);
  seen.node_name = "a";
  mirror_.Write([&](ClusterState& s) {
    const PodRecord* rec = s.FindPod("team-a/p1");
    EXPECT_NE(rec, nullptr);
    if (rec != nullptr) seen.annotations = AssignmentAnnotations(rec->assignment, s.catalog(), "team-a");
    s.ApplyPod(seen);
    s.ApplyPod(seen);
    return true;
  });
  EXPECT_EQ(FreeCpu("a"), 6000);

  // A bind still in flight (reserved, the API's answer not in yet): a pending event of the
  // pod (a list that predates the binding) keeps it counted, as it keeps its unit; the API's
  // refusal then takes it back.
  absl::StatusOr<std::unique_ptr<PlacementPolicy>> pack = MakePolicy("affinity-pack");
  ASSERT_TRUE(pack.ok());
  DecisionCore core(&mirror_, pack->get());
  const PodObject p2 = DecodePodText(PodJson("team-a", "p2", kGpu, 1, "3"));
  const PodRequest request = core.Resolve(p2).request;
  const PodClaim claim{p2.Key(), p2.uid, p2.namespace_name, request.project};
  const ReserveDecision d = core.Reserve(claim, request, "a");
  ASSERT_TRUE(d.assignment.ok()) << d.assignment.status();
  EXPECT_EQ(FreeCpu("a"), 3000);
  mirror_.Write([&](ClusterState& s) {
    s.ApplyPod(p2);
    return true;
  });
  EXPECT_EQ(FreeCpu("a"), 3000);
  EXPECT_TRUE(mirror_.ReleaseReservation(PodIdOf(p2.uid, p2.Key()), *d.assignment));
  EXPECT_EQ(FreeCpu("a"), 6000);
  mirror_.Read([](const ClusterState& s) {
    const AuditReport audit = s.Audit();
    EXPECT_EQ(audit.stale_summaries, 0) << absl::StrJoin(audit.problems, "; ");
  });
}

TEST_F(FgdHostTest, AMalformedHostRequestChangesNothing) {
  std::unique_ptr<ExtenderService> service = Service(true);
  const auto before = mirror_.Read([](const ClusterState& s) { return s.host_requested(); });
  std::string bad = PodJson("team-a", "p9", kGpu, 1, "lots");
  const VerbResult f = service->Filter(Args(bad));
  EXPECT_EQ(f.status, 400);
  EXPECT_NE(f.body.find("cpu"), std::string::npos) << f.body;
  EXPECT_GE(service->Prioritize(Args(bad)).status, 400);
  EXPECT_EQ(service->Bind(BindBody("p9", "a")).body.find("\"Error\":\"\""), std::string::npos);
  mirror_.Read([&](const ClusterState& s) {
    EXPECT_EQ(s.host_requested(), before);
    EXPECT_EQ(s.FindPod("team-a/p9"), nullptr);
  });
  EXPECT_EQ(FreeCpu("a"), 8000);
  EXPECT_EQ(FreeCpu("b"), 2000);
}

TEST(ParityPolicies, EveryServicePolicyIsCovered) {
  // A new policy must be added to the parity run above.
  for (const std::string& name : ServicePolicyNames()) {
    EXPECT_TRUE(name == "affinity-pack" || name == "spread" || name == "fgd") << name;
  }
}

}  // namespace
}  // namespace gse::replay
