// The replay driver and its inputs (replay_engine.h).
#include "perf/replay_engine.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <deque>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "rapidjson/document.h"
#include "rapidjson/stringbuffer.h"
#include "rapidjson/writer.h"
#include "perf/in_process_placer.h"
#include "scoring/feasibility.h"
#include "scoring/pod_request.h"
#include "scoring/task_mix.h"
#include "state/assignment.h"
#include "state/quantity.h"
#include "state/unit_rules.h"

namespace gse::replay {
namespace {

using Clock = std::chrono::steady_clock;
using Writer = rapidjson::Writer<rapidjson::StringBuffer>;

constexpr char kAgentNamespace[] = "gse-node-agent";
constexpr char kSchedulerName[] = "gpu-scheduler";

double Micros(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

void Str(Writer& w, absl::string_view s) { w.String(s.data(), static_cast<rapidjson::SizeType>(s.size())); }

std::vector<std::string> SortedNames(const std::vector<std::string>& names) {
  std::vector<std::string> out = names;
  std::sort(out.begin(), out.end());
  return out;
}

// A Pod object as kube-scheduler and the API server know it.
std::string PodJson(const std::string& ns, const std::string& name, const std::string& uid,
                    const std::map<std::string, std::string>& requests, const Catalog& catalog,
                    const std::map<std::string, std::string>& node_selector,
                    const std::vector<SelectorRequirement>& affinity, const std::string& node,
                    const std::map<std::string, std::string>& annotations, const char* phase) {
  rapidjson::StringBuffer buf;
  Writer w(buf);
  w.StartObject();
  w.Key("apiVersion");
  w.String("v1");
  w.Key("kind");
  w.String("Pod");
  w.Key("metadata");
  w.StartObject();
  w.Key("name");
  Str(w, name);
  w.Key("namespace");
  Str(w, ns);
  w.Key("uid");
  Str(w, uid);
  if (!annotations.empty()) {
    w.Key("annotations");
    w.StartObject();
    for (const auto& [k, v] : annotations) {
      Str(w, k);
      Str(w, v);
    }
    w.EndObject();
  }
  w.EndObject();
  w.Key("spec");
  w.StartObject();
  w.Key("schedulerName");
  w.String(kSchedulerName);
  if (!node.empty()) {
    w.Key("nodeName");
    Str(w, node);
  }
  if (!node_selector.empty()) {
    w.Key("nodeSelector");
    w.StartObject();
    for (const auto& [k, v] : node_selector) {
      Str(w, k);
      Str(w, v);
    }
    w.EndObject();
  }
  if (!affinity.empty()) {
    w.Key("affinity");
    w.StartObject();
    w.Key("nodeAffinity");
    w.StartObject();
    w.Key("requiredDuringSchedulingIgnoredDuringExecution");
    w.StartObject();
    w.Key("nodeSelectorTerms");
    w.StartArray();
    w.StartObject();
    w.Key("matchExpressions");
    WriteSelectorRequirements(w, affinity);
    w.EndObject();
    w.EndArray();
    w.EndObject();
    w.EndObject();
    w.EndObject();
  }
  w.Key("containers");
  w.StartArray();
  w.StartObject();
  w.Key("name");
  w.String("main");
  w.Key("image");
  w.String("replay");
  w.Key("resources");
  w.StartObject();
  w.Key("requests");
  w.StartObject();
  for (const auto& [k, v] : requests) {
    Str(w, k);
    Str(w, v);
  }
  w.EndObject();
  // Kubernetes requires limits equal to requests for extended resources.
  w.Key("limits");
  w.StartObject();
  for (const auto& [k, v] : requests) {
    if (k == "cpu" || k == "memory" || k == "ephemeral-storage") continue;
    Str(w, k);
    Str(w, v);
  }
  w.EndObject();
  w.EndObject();
  w.EndObject();
  w.EndArray();
  w.EndObject();
  w.Key("status");
  w.StartObject();
  w.Key("phase");
  w.String(phase);
  w.EndObject();
  w.EndObject();
  (void)catalog;
  return std::string(buf.GetString(), buf.GetSize());
}

absl::StatusOr<PodObject> DecodePodJson(const std::string& json) {
  rapidjson::Document doc;
  if (absl::Status s = ParseJsonLimited(json, doc); !s.ok()) return s;
  return DecodePod(doc, "pod");
}

LatencySummary Summarise(std::vector<double> us) {
  LatencySummary s;
  s.count = static_cast<int64_t>(us.size());
  if (us.empty()) return s;
  std::sort(us.begin(), us.end());
  auto at = [&](double q) {
    return us[std::min(us.size() - 1, static_cast<size_t>(q * static_cast<double>(us.size())))];
  };
  s.p50_us = at(0.5);
  s.p90_us = at(0.9);
  s.p99_us = at(0.99);
  s.max_us = us.back();
  return s;
}

std::string Dominant(const std::map<std::string, int64_t>& counts) {
  std::string best;
  int64_t n = -1;
  for (const auto& [k, v] : counts) {
    if (v > n) {
      best = k;
      n = v;
    }
  }
  return best.empty() ? "no_nodes" : best;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Inputs

absl::StatusOr<ReplayInput> PrepareInput(Trace trace, const std::string& catalog_override,
                                         const std::string& snapshot_json) {
  ReplayInput in;
  const std::string& text = !catalog_override.empty() ? catalog_override : trace.header.catalog;
  if (text.empty()) {
    in.catalog = std::make_shared<const Catalog>(Catalog::BuiltIn());
  } else {
    absl::StatusOr<Catalog> c = Catalog::Parse(text);
    if (!c.ok()) return absl::InvalidArgumentError(absl::StrCat("catalog: ", c.status().message()));
    in.catalog = std::make_shared<const Catalog>(*std::move(c));
  }
  in.twins = trace.header.twins;
  for (size_t i = 0; i < in.twins.size(); ++i) {
    const Offering* a = in.catalog->Find(in.twins[i].first);
    const Offering* b = in.catalog->Find(in.twins[i].second);
    if (a == nullptr || b == nullptr || a->sharing != Sharing::kExclusive || b->sharing != Sharing::kMps) {
      return absl::InvalidArgumentError(absl::StrCat(
          "header: twins[", i, "]: must name an exclusive and an mps offering of the catalog"));
    }
  }
  if (!snapshot_json.empty()) {
    absl::StatusOr<ObjectBatch> batch = DecodeObjects(snapshot_json);
    if (!batch.ok()) return absl::InvalidArgumentError(absl::StrCat("snapshot: ", batch.status().message()));
    Event ev;
    ev.type = EventType::kObjects;
    ev.json = snapshot_json;
    trace.events.insert(trace.events.begin(), std::move(ev));
  }
  in.trace = std::move(trace);
  return in;
}

std::vector<TaskClass> TaskMixOf(const ReplayInput& input) {
  std::map<std::tuple<std::string, int64_t, std::vector<std::string>, int64_t, int64_t>, double> counts;
  for (const Event& ev : input.trace.events) {
    if (ev.type != EventType::kPodArrive) continue;
    std::string resource;
    int64_t amount = 0;
    for (const auto& [k, v] : ev.pod.resources) {
      const Offering* o = input.catalog->Find(k);
      if (o == nullptr) continue;
      absl::StatusOr<int64_t> q = ParseQuantityMilli(v);
      if (!q.ok() || *q <= 0) continue;
      resource = o->resource;
      amount = *q / 1000;
    }
    if (resource.empty() || amount <= 0) continue;
    std::vector<std::string> products;
    for (const SelectorRequirement& r : ev.pod.affinity) {
      if (r.key == "nvidia.com/gpu.product" && r.op == "In") products = r.values;
    }
    std::sort(products.begin(), products.end());
    int64_t cpu = 0, memory = 0;
    for (const auto& [k, v] : ev.pod.resources) {
      if (k != "cpu" && k != "memory") continue;
      absl::StatusOr<int64_t> q = ParseQuantityMilli(v);
      if (q.ok()) (k == "cpu" ? cpu : memory) = *q;
    }
    counts[{resource, amount, products, cpu, memory}] += 1;
  }
  std::vector<TaskClass> out;
  for (const auto& [k, n] : counts) {
    TaskClass t;
    t.resource = std::get<0>(k);
    t.amount = std::get<1>(k);
    t.products = std::get<2>(k);
    t.cpu_milli = std::get<3>(k);
    t.memory_milli = std::get<4>(k);
    t.weight = n;
    out.push_back(std::move(t));
  }
  return out;
}

absl::StatusOr<std::unique_ptr<PlacementPolicy>> MakeReplayPolicy(const std::string& name,
                                                                  const ReplayInput& input) {
  if (name == "fgd" || name == "fgd-gpu") {
    FragmentationOptions o;
    o.tasks = TaskMixOf(input);
    o.twins = input.twins;
    // The placer's mirror, as the service reads it: every bound pod counts there.
    if (name == "fgd") o.host_free = MirrorHostFree;
    if (o.tasks.empty()) {
      return absl::InvalidArgumentError("policy fgd: the trace has no pod asking for a catalog resource (empty task mix)");
    }
    return MakeFragmentationPolicy(input.catalog, std::move(o));
  }
  if (name == "fgd-learned") {
    // The service's fgd as --policy=fgd builds it: seeded from the catalog, learning the mix
    // from the pods its filter sees; only the twins are the replay's.
    ServicePolicyOptions o;
    o.fgd_twins = input.twins;
    return MakeServicePolicy("fgd", input.catalog, std::move(o));
  }
  if (name == "bestfit") return MakeBestFitPolicy(input.catalog, input.twins);
  absl::StatusOr<std::unique_ptr<PlacementPolicy>> p = MakePolicy(name);
  if (!p.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(p.status().message(), ", fgd, bestfit"));
  }
  return p;
}

// ---------------------------------------------------------------------------------------------
// The driver

namespace {

class Driver {
 public:
  Driver(const ReplayInput& input, Placer& placer, const ReplayOptions& options,
         FragmentationModel model)
      : input_(input),
        placer_(placer),
        options_(options),
        model_(std::move(model)),
        ledger_(input.catalog, input.twins),
        shadow_(input.catalog, MirrorOptions{}) {
    twin_of_.assign(input.catalog->size(), kNoOffering);
    for (const auto& [a, b] : input.twins) {
      const OfferingId ia = input.catalog->Find(a)->id, ib = input.catalog->Find(b)->id;
      twin_of_[static_cast<size_t>(ia)] = ib;
      twin_of_[static_cast<size_t>(ib)] = ia;
    }
  }

  // Mutex addresses are reused by the next run: drop them from Abseil's lock-order graph.
  ~Driver() {
    mu_.ForgetDeadlockInfo();
    bind_mu_.ForgetDeadlockInfo();
  }

  absl::StatusOr<RunResult> Run();
  // For the run's own fragmentation model, called with mu_ held.
  bool HostFreeLocked(absl::string_view node, int64_t* cpu, int64_t* memory) const
      ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return ledger_.FreeHost(node, cpu, memory);
  }

 private:
  absl::Status ApplyObjects(const Event& ev, bool start);
  // The initial cluster (the trace's first `objects` event, else an empty one) to the placer
  // and the ledger, and the cluster's GPU count; returns the index of the first event left.
  absl::StatusOr<size_t> StartCluster();
  // node_add, node_update, node_remove (event number i, for messages).
  absl::Status NodeEvent(const Event& ev, size_t i);
  // An arriving pod's plan, its project labelled and the pod created at the placer.
  absl::StatusOr<PodPlan> Plan(const PodArrival& arrival);
  // The arrivals events[i, end), decided by options_.concurrency clients at once.
  absl::Status ArriveConcurrently(size_t i, size_t end);
  // The run's result once every event is played.
  RunResult Finish(double wall);
  // A pod_arrive naming a project its namespace does not map to: the namespace gets the
  // project label (a fact, as an operator would set it), since the extender reads projects
  // from namespaces.
  absl::Status EnsureProject(const PodArrival& a);
  absl::Status Arrive(const Event& ev);
  // One arriving pod through kube-scheduler's cycle: BuiltInFilter, then BestInTree for a pod
  // the extender does not manage, else AskExtender and the placer's bind (RecordBound).
  absl::Status Schedule(const PodPlan& plan);
  absl::Status Delete(const std::string& ns, const std::string& name);
  // The node agent's twin placeholders: recorded here under mu_, applied to the Placer by the
  // caller after mu_ is released.
  struct Hold {
    PodObject pod;
    std::string json;
  };
  absl::Status AddTwinHolds(const Assignment& a, std::vector<Hold>* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseTwinHolds(const Assignment& a, std::vector<std::string>* names) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<PodPlan> MakePlan(const PodArrival& arrival);
  // kube-scheduler's own filters over the ledger, from where the last search stopped, up to
  // the percentageOfNodesToScore cut-off; each failing node's reason counted in `reasons`.
  std::vector<std::string> BuiltInFilter(const Ledger::Demand& demand, const PodArrival& a,
                                         std::map<std::string, int64_t>* reasons)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The feasible node with the best in-tree score, ties to the lowest name.
  std::string BestInTree(const Ledger::Demand& demand, const std::vector<std::string>& feasible)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A pod bound without units (kube-scheduler's default binder): ledger and placements.
  void RecordPlain(const PodPlan& plan, const std::string& node) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The extender's filter and prioritize (prioritize skipped for one passing node) and the
  // node of the best total score, kube-scheduler's in-tree scores plus the extender's
  // weighted score, ties to the lowest name; best "" when no node passed.
  struct ExtenderPick {
    std::string best;
    double filter_us = 0;
    double prioritize_us = -1;  // < 0: not called
    std::map<std::string, int64_t> reasons;  // filter's failures by label
  };
  absl::StatusOr<ExtenderPick> AskExtender(const PodPlan& plan, const Ledger::Demand& demand,
                                           const std::vector<std::string>& feasible)
      ABSL_LOCKS_EXCLUDED(mu_);
  void ObservePick(const ExtenderPick& pick) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A bind the extender made: affinity and spill counters, ledger, shadow state, placements,
  // and the twin placeholders to apply once mu_ is released (`holds`).
  absl::Status RecordBound(const PodPlan& plan, const Ledger::Demand& demand, const std::string& node,
                           const Assignment& bound, std::vector<Hold>* holds) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Fail(const std::string& reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Counts an arrival (and its GPU request, by the offering it asks for) and, when `placed`,
  // its allocation.
  void Arrived(const PodPlan& plan, bool placed) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // RunResult::allocation_ceiling of the arrivals so far on the live nodes.
  double AllocationCeiling() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Observe(const std::string& verb, double us) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    latency_[verb].push_back(us);
  }
  int64_t FeasibleToFind(int64_t n) const;
  int64_t PluginScore(const Ledger::Demand& d, const std::string& node) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ReplayInput& input_;
  Placer& placer_;
  const ReplayOptions& options_;
  FragmentationModel model_;

  absl::Mutex mu_;       // ledger, shadow, counters
  absl::Mutex bind_mu_;  // binds with their twin holds, one at a time
  Ledger ledger_ ABSL_GUARDED_BY(mu_);
  UnitOpeningFloor opening_floor_ ABSL_GUARDED_BY(mu_);
  ClusterState shadow_ ABSL_GUARDED_BY(mu_);  // the placements, for fragmentation figures
  std::vector<OfferingId> twin_of_;
  RunResult result_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::vector<double>> latency_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, PodObject> bound_ ABSL_GUARDED_BY(mu_);  // workload pods placed (GPU ones with annotations)
  std::map<std::string, double> gpu_of_ ABSL_GUARDED_BY(mu_);
  // GPU request arrived per offering (PodPlan::offering), placed or not.
  std::vector<double> arrived_by_offering_ ABSL_GUARDED_BY(mu_);
  int64_t next_start_ ABSL_GUARDED_BY(mu_) = 0;
  int next_step_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t uid_counter_ ABSL_GUARDED_BY(mu_) = 0;
};

int64_t Driver::FeasibleToFind(int64_t n) const {
  const int32_t pct = options_.percentage_of_nodes_to_score;
  if (pct >= 100 || n < 100) return n;
  int64_t p = pct;
  if (p <= 0) p = std::max<int64_t>(5, 50 - n / 125);
  return std::max<int64_t>(100, n * p / 100);
}

int64_t Driver::PluginScore(const Ledger::Demand& d, const std::string& node) const {
  int64_t total = 0;
  for (const auto& [name, weight] : options_.score_plugins) {
    if (name == "least-allocated") {
      total += weight * ledger_.LeastAllocated(d, node);
    } else if (name == "most-allocated") {
      total += weight * ledger_.MostAllocated(d, node);
    } else if (name == "balanced-allocation") {
      total += weight * ledger_.BalancedAllocation(d, node);
    }
  }
  return total;
}

void Driver::Fail(const std::string& reason) {
  ++result_.pods_failed[reason];
  if (reason == "quota_exhausted") ++result_.quota_rejections;
}

void Driver::Arrived(const PodPlan& plan, bool placed) {
  const double gpu = plan.gpu;
  if (plan.offering != kNoOffering) {
    arrived_by_offering_.resize(input_.catalog->size(), 0);
    arrived_by_offering_[static_cast<size_t>(plan.offering)] += gpu;
  }
  ++result_.pods_arrived;
  result_.arrived_gpu += gpu;
  if (placed) {
    ++result_.pods_placed;
    result_.allocated_gpu += gpu;
  }
  const double cap = result_.cluster_gpus;
  if (cap <= 0) return;
  const double arrived_pct = 100 * result_.arrived_gpu / cap;
  while (next_step_ <= arrived_pct) {
    result_.curve.emplace_back(next_step_, 100 * result_.allocated_gpu / cap);
    ++next_step_;
  }
}

double Driver::AllocationCeiling() const {
  if (result_.cluster_gpus <= 0) return 0;
  // Capacity per offering in GPUs, then per pool: twins are one set of devices seen two
  // ways, so their pool holds the larger of the two views, and takes both sides' requests.
  std::vector<double> capacity(input_.catalog->size(), 0);
  for (const auto& [name, node] : shadow_.nodes()) {
    for (const NodeOffering& no : node->offerings) {
      capacity[static_cast<size_t>(no.offering)] +=
          static_cast<double>(no.units.size()) * UnitGpuFraction(input_.catalog->Get(no.offering));
    }
  }
  double bound = 0;
  for (size_t o = 0; o < capacity.size(); ++o) {
    double demand = o < arrived_by_offering_.size() ? arrived_by_offering_[o] : 0;
    double pool = capacity[o];
    const OfferingId twin = twin_of_.empty() ? kNoOffering : twin_of_[o];
    if (twin != kNoOffering) {
      if (static_cast<size_t>(twin) < o) continue;  // counted with its twin
      const auto t = static_cast<size_t>(twin);
      demand += t < arrived_by_offering_.size() ? arrived_by_offering_[t] : 0;
      pool = std::max(pool, capacity[t]);
    }
    bound += std::min(pool, demand);
  }
  return std::min(1.0, bound / result_.cluster_gpus);
}

absl::StatusOr<PodPlan> Driver::MakePlan(const PodArrival& a) {
  PodPlan plan;
  plan.arrival = &a;
  std::string uid;
  {
    absl::MutexLock lock(&mu_);
    uid = absl::StrCat("replay-", ++uid_counter_);
  }
  plan.pod_json = PodJson(a.namespace_name, a.name, uid, a.resources, *input_.catalog,
                          a.node_selector, a.affinity, "", {}, "Pending");
  absl::StatusOr<PodObject> pod = DecodePodJson(plan.pod_json);
  if (!pod.ok()) return absl::InvalidArgumentError(absl::StrCat("pod ", a.Key(), ": ", pod.status().message()));
  plan.pod = *std::move(pod);
  {
    absl::MutexLock lock(&mu_);
    plan.project = shadow_.ProjectOfNamespace(a.namespace_name);  // EnsureProject ran before
  }
  for (const auto& [k, v] : a.resources) {
    if (const Offering* o = input_.catalog->Find(k); o != nullptr) {
      plan.offering = o->id;
      break;
    }
  }
  if (a.gpu >= 0) {
    plan.gpu = a.gpu;
  } else {
    // Derived: units x size (GPU 1, MIG g/7), shares/replicas, a ticket as 1/replicas.
    for (const auto& [k, v] : a.resources) {
      const Offering* o = input_.catalog->Find(k);
      if (o == nullptr) continue;
      absl::StatusOr<int64_t> q = ParseQuantityMilli(v);
      if (!q.ok()) continue;
      const double size = UnitGpuFraction(*o);
      const double n = static_cast<double>(*q) / 1000;
      plan.gpu += o->sharing == Sharing::kExclusive ? n * size : n * size / std::max(1, o->replicas);
    }
  }
  return plan;
}

absl::Status Driver::AddTwinHolds(const Assignment& a, std::vector<Hold>* out) {
  const OfferingId twin = twin_of_[static_cast<size_t>(a.offering)];
  if (twin == kNoOffering) return absl::OkStatus();
  const Offering& o = input_.catalog->Get(twin);
  for (int32_t i : a.units) {
    const Ledger::UnitKey key{a.node, twin, i};
    auto it = ledger_.units().find(key);
    if (it != ledger_.units().end()) continue;  // already held (by its placeholder)
    const int32_t cap = ledger_.UnitCapacity(a.node, twin, i);
    if (cap <= 0) continue;
    Assignment hold;
    hold.node = a.node;
    hold.offering = twin;
    hold.units = {i};
    hold.amount_per_unit = o.sharing == Sharing::kMps ? cap : 1;
    const std::string name = absl::StrCat("twin-", a.node, "-", twin, "-", i);
    const std::map<std::string, std::string> annotations =
        AssignmentAnnotations(hold, *input_.catalog, kAgentNamespace);
    const std::string json = PodJson(kAgentNamespace, name, absl::StrCat("twin-", ++uid_counter_),
                                     {{o.resource, absl::StrCat(hold.amount_per_unit)}},
                                     *input_.catalog, {}, {}, a.node, annotations, "Running");
    absl::StatusOr<PodObject> pod = DecodePodJson(json);
    if (!pod.ok()) return pod.status();
    ledger_.Bind(*pod, kAgentNamespace, a.node, &hold, /*placeholder=*/true);
    shadow_.ApplyPod(*pod);
    out->push_back(Hold{*std::move(pod), json});
  }
  return absl::OkStatus();
}

void Driver::ReleaseTwinHolds(const Assignment& a, std::vector<std::string>* names) {
  const OfferingId twin = twin_of_[static_cast<size_t>(a.offering)];
  if (twin == kNoOffering) return;
  for (int32_t i : a.units) {
    auto mine = ledger_.units().find(Ledger::UnitKey{a.node, a.offering, i});
    if (mine != ledger_.units().end()) continue;  // other pods still use this half
    const std::string name = absl::StrCat("twin-", a.node, "-", twin, "-", i);
    const std::string key = absl::StrCat(kAgentNamespace, "/", name);
    auto held = ledger_.units().find(Ledger::UnitKey{a.node, twin, i});
    if (held == ledger_.units().end()) continue;
    ledger_.Delete(key);
    ReleasePodNamed(shadow_, key);
    names->push_back(name);
  }
}

std::vector<std::string> Driver::BuiltInFilter(const Ledger::Demand& demand, const PodArrival& a,
                                               std::map<std::string, int64_t>* reasons) {
  std::vector<std::string> feasible;
  const std::vector<std::string>& names = ledger_.NodeNames();
  const int64_t n = static_cast<int64_t>(names.size());
  const int64_t want = FeasibleToFind(n);
  int64_t processed = 0;
  for (int64_t k = 0; k < n; ++k) {
    const size_t index = static_cast<size_t>((next_start_ + k) % n);
    ++processed;
    const std::string r = ledger_.BuiltInFitAt(demand, a, index);
    if (r.empty()) {
      feasible.push_back(names[index]);
      if (static_cast<int64_t>(feasible.size()) >= want) break;
    } else {
      ++(*reasons)[r];
    }
  }
  if (want < n && n > 0) next_start_ = (next_start_ + processed) % n;
  return feasible;
}

std::string Driver::BestInTree(const Ledger::Demand& demand,
                               const std::vector<std::string>& feasible) {
  std::string best;
  int64_t best_score = -1;
  for (const std::string& node : SortedNames(feasible)) {
    const int64_t s = PluginScore(demand, node);
    if (s > best_score) {
      best = node;
      best_score = s;
    }
  }
  return best;
}

void Driver::RecordPlain(const PodPlan& plan, const std::string& node) {
  ledger_.Bind(plan.pod, plan.project, node, nullptr, false);
  if (options_.keep_placements) result_.placements.push_back(absl::StrCat(plan.arrival->Key(), " ", node));
  Arrived(plan, true);
}

absl::StatusOr<Driver::ExtenderPick> Driver::AskExtender(const PodPlan& plan,
                                                         const Ledger::Demand& demand,
                                                         const std::vector<std::string>& feasible) {
  ExtenderPick pick;
  auto t0 = Clock::now();
  absl::StatusOr<FilterAnswer> fa = placer_.Filter(plan, feasible);
  pick.filter_us = Micros(t0);
  if (!fa.ok()) return fa.status();
  for (const auto& [node, label] : fa->failed) ++pick.reasons[label];
  if (fa->passed.size() == 1) {
    pick.best = fa->passed.front();  // kube-scheduler skips scoring for a single feasible node
    return pick;
  }
  if (fa->passed.empty()) return pick;
  t0 = Clock::now();
  absl::StatusOr<std::vector<int64_t>> scores = placer_.Prioritize(plan, fa->passed);
  pick.prioritize_us = Micros(t0);
  if (!scores.ok()) return scores.status();
  if (scores->size() != fa->passed.size()) return absl::InternalError("prioritize: wrong number of scores");
  // kube-scheduler: in-tree plugin scores + extender score x weight x (100 / 10).
  absl::MutexLock lock(&mu_);
  int64_t top = -1;
  for (size_t i = 0; i < scores->size(); ++i) {
    const std::string& node = fa->passed[i];
    const int64_t s = PluginScore(demand, node) + (*scores)[i] * options_.extender_weight * 10;
    if (s > top || (s == top && node < pick.best)) {
      top = s;
      pick.best = node;
    }
  }
  return pick;
}

void Driver::ObservePick(const ExtenderPick& pick) {
  Observe("filter", pick.filter_us);
  if (pick.prioritize_us >= 0) Observe("prioritize", pick.prioritize_us);
}

absl::Status Driver::RecordBound(const PodPlan& plan, const Ledger::Demand& demand, const std::string& node,
                                 const Assignment& bound, std::vector<Hold>* holds) {
  const Offering& o = input_.catalog->Get(bound.offering);
  if (o.sharing == Sharing::kTimeSliced && !bound.units.empty()) {
    const Ledger::UnitKey key{bound.node, bound.offering, bound.units.front()};
    ++result_.tickets_placed;
    opening_floor_.Placed(plan.pod.Key(), plan.project, bound.offering, ledger_.MaxUnitCapacity(bound.offering));
    if (ledger_.ProjectHoldsUnit(key, plan.project)) {
      ++result_.tickets_on_owned_unit;
    } else if (ledger_.OwnsFreeTicket(plan.project, bound.offering)) {
      ++result_.spills;
      if (!ledger_.OwnedFreeTicketNodeThatFits(plan.project, bound.offering, demand, *plan.arrival).empty()) {
        ++result_.avoidable_spills;
      }
    }
  }
  ledger_.Bind(plan.pod, plan.project, node, &bound, false);
  PodObject pod = plan.pod;
  pod.node_name = node;
  pod.phase = "Running";
  pod.annotations = AssignmentAnnotations(bound, *input_.catalog, plan.project);
  shadow_.ApplyPod(pod);
  bound_[pod.Key()] = pod;
  gpu_of_[pod.Key()] = plan.gpu;
  if (absl::Status s = AddTwinHolds(bound, holds); !s.ok()) return s;
  if (options_.keep_placements) {
    result_.placements.push_back(absl::StrCat(plan.arrival->Key(), " ", node, " ", o.resource, "/",
                                              absl::StrJoin(bound.units, ","), "x", bound.amount_per_unit));
  }
  Arrived(plan, true);
  return absl::OkStatus();
}

absl::Status Driver::Schedule(const PodPlan& plan) {
  const PodArrival& a = *plan.arrival;
  bool interested = false;
  for (const auto& [k, v] : a.resources) interested = interested || input_.catalog->Find(k) != nullptr;
  for (int attempt = 0; attempt < 3; ++attempt) {
    // ---- kube-scheduler's own filters (and the percentageOfNodesToScore cut-off)
    std::vector<std::string> feasible;
    Ledger::Demand demand;
    std::string plain_node;
    {
      absl::MutexLock lock(&mu_);
      demand = ledger_.DemandOf(plan.pod);
      std::map<std::string, int64_t> reasons;
      feasible = BuiltInFilter(demand, a, &reasons);
      if (feasible.empty()) {
        Fail(Dominant(reasons));
        Arrived(plan, false);
        return absl::OkStatus();
      }
      if (!interested && !options_.extender_all_pods) {
        // Not the extender's pod: kube-scheduler's in-tree scores only.
        plain_node = BestInTree(demand, feasible);
        RecordPlain(plan, plain_node);
      }
    }
    if (!plain_node.empty()) {
      if (absl::Status s = placer_.BindPlain(plan, plain_node); !s.ok()) return s;
      return placer_.Sync();  // the extender's host view counts it before the next decision
    }

    // ---- the extender: filter -> prioritize -> bind
    absl::StatusOr<ExtenderPick> pick = AskExtender(plan, demand, feasible);
    if (!pick.ok()) return pick.status();
    const std::string& best = pick->best;
    if (best.empty()) {
      absl::MutexLock lock(&mu_);
      Observe("filter", pick->filter_us);
      Fail(Dominant(pick->reasons));
      Arrived(plan, false);
      return absl::OkStatus();
    }
    if (!interested) {
      // extender_all_pods: the extender binds a pod that takes no unit as the default binder
      // would (one client: nothing changed since the built-in fit above).
      const absl::Status bound = placer_.BindWithoutUnits(plan, best);
      if (!bound.ok() && !absl::IsFailedPrecondition(bound)) return bound;
      {
        absl::MutexLock lock(&mu_);
        ObservePick(*pick);
        if (bound.ok()) {
          RecordPlain(plan, best);
        } else {
          Fail("bind_rejected");
          Arrived(plan, false);
        }
      }
      return placer_.Sync();
    }

    absl::MutexLock bind_lock(&bind_mu_);
    {
      // Another client may have taken cpu or memory since (concurrency > 1).
      absl::MutexLock lock(&mu_);
      if (!ledger_.BuiltInFit(demand, a, best).empty()) continue;
    }
    const auto t0 = Clock::now();
    absl::StatusOr<Assignment> bound = placer_.Bind(plan, best);
    const double bind_us = Micros(t0);
    std::vector<Hold> holds;
    {
      absl::MutexLock lock(&mu_);
      ObservePick(*pick);
      Observe("bind", bind_us);
      if (!bound.ok()) {
        if (absl::IsFailedPrecondition(bound.status()) && options_.concurrency > 1 && attempt < 2) continue;
        if (!absl::IsFailedPrecondition(bound.status())) return bound.status();
        Fail("bind_rejected");
        Arrived(plan, false);
        return absl::OkStatus();
      }
      if (absl::Status s = RecordBound(plan, demand, best, *bound, &holds); !s.ok()) return s;
    }
    for (const Hold& h : holds) {
      if (absl::Status s = placer_.ApplyBoundPod(h.pod, h.json); !s.ok()) return s;
    }
    return placer_.Sync();
  }
  absl::MutexLock lock(&mu_);
  Fail("bind_conflict");
  Arrived(plan, false);
  return absl::OkStatus();
}

absl::Status Driver::Delete(const std::string& ns, const std::string& name) {
  const std::string key = absl::StrCat(ns, "/", name);
  absl::MutexLock bind_lock(&bind_mu_);
  if (absl::Status s = placer_.DeletePod(ns, name); !s.ok()) return s;
  std::vector<std::string> released;
  {
    absl::MutexLock lock(&mu_);
    ++result_.pods_deleted;
    auto it = bound_.find(key);
    std::optional<Assignment> held;
    if (it != bound_.end()) {
      absl::StatusOr<Assignment> a =
          ParseAssignmentAnnotations(it->second.annotations, it->second.node_name, *input_.catalog);
      if (a.ok()) held = *a;
      bound_.erase(it);
    }
    ledger_.Delete(key);
    opening_floor_.Removed(key);
    ReleasePodNamed(shadow_, key);
    if (held.has_value()) ReleaseTwinHolds(*held, &released);
    auto g = gpu_of_.find(key);
    if (g != gpu_of_.end()) {
      result_.allocated_gpu -= g->second;
      gpu_of_.erase(g);
    }
  }
  for (const std::string& n : released) {
    if (absl::Status s = placer_.DeletePod(kAgentNamespace, n); !s.ok()) return s;
  }
  return placer_.Sync();
}

absl::Status Driver::EnsureProject(const PodArrival& a) {
  if (a.project.empty()) return absl::OkStatus();
  {
    absl::MutexLock lock(&mu_);
    if (shadow_.ProjectOfNamespace(a.namespace_name) == a.project) return absl::OkStatus();
  }
  rapidjson::StringBuffer buf;
  Writer w(buf);
  w.StartObject();
  w.Key("kind");
  w.String("List");
  w.Key("items");
  w.StartArray();
  WriteProjectNamespace(w, a.namespace_name, a.project);
  w.EndArray();
  w.EndObject();
  Event ev;
  ev.type = EventType::kObjects;
  ev.json.assign(buf.GetString(), buf.GetSize());
  return ApplyObjects(ev, false);
}

absl::Status Driver::ApplyObjects(const Event& ev, bool start) {
  absl::StatusOr<ObjectBatch> batch = DecodeObjects(ev.json);
  if (!batch.ok()) return batch.status();
  absl::Status s = start ? placer_.Start(ev.json, *batch) : placer_.ApplyObjects(ev.json, *batch);
  if (!s.ok()) return s;
  {
    absl::MutexLock lock(&mu_);
    ledger_.ApplyBatch(*batch);
    shadow_.ApplyBatch(*batch);
  }
  return placer_.Sync();
}

absl::StatusOr<size_t> Driver::StartCluster() {
  const std::vector<Event>& events = input_.trace.events;
  size_t first = 0;
  if (!events.empty() && events[0].type == EventType::kObjects) {
    if (absl::Status s = ApplyObjects(events[0], true); !s.ok()) return s;
    if (options_.record != nullptr) options_.record->Write(events[0]);
    first = 1;
  } else {
    const std::string empty = "{\"kind\":\"List\",\"items\":[]}";
    if (absl::Status s = placer_.Start(empty, ObjectBatch{}); !s.ok()) return s;
  }
  absl::MutexLock lock(&mu_);
  if (input_.cluster_gpus > 0) {
    result_.cluster_gpus = input_.cluster_gpus;
    return first;
  }
  // Physical GPUs: nvidia.com/gpu.count labels of the initial nodes.
  absl::StatusOr<ObjectBatch> batch = first == 1 ? DecodeObjects(events[0].json) : ObjectBatch{};
  if (batch.ok()) {
    for (const NodeObject& n : batch->nodes) {
      auto it = n.labels.find("nvidia.com/gpu.count");
      int64_t c = 0;
      if (it != n.labels.end() && absl::SimpleAtoi(it->second, &c)) result_.cluster_gpus += static_cast<double>(c);
    }
  }
  return first;
}

absl::Status Driver::NodeEvent(const Event& ev, size_t i) {
  if (ev.type == EventType::kNodeRemove) {
    if (absl::Status s = placer_.RemoveNode(ev.name); !s.ok()) return s;
    {
      absl::MutexLock lock(&mu_);
      ledger_.RemoveNode(ev.name);
      shadow_.RemoveNode(ev.name);
    }
    return placer_.Sync();
  }
  absl::StatusOr<ObjectBatch> b = DecodeObjects(ev.json);
  if (!b.ok() || b->nodes.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat("event ", i + 1, ": node: ",
                                                   b.ok() ? "not one Node" : b.status().message()));
  }
  if (absl::Status s = placer_.ApplyNode(ev.json, b->nodes[0]); !s.ok()) return s;
  {
    absl::MutexLock lock(&mu_);
    ledger_.ApplyNode(b->nodes[0]);
    shadow_.ApplyNode(b->nodes[0]);
  }
  return placer_.Sync();
}

absl::StatusOr<PodPlan> Driver::Plan(const PodArrival& arrival) {
  if (absl::Status p = EnsureProject(arrival); !p.ok()) return p;
  absl::StatusOr<PodPlan> plan = MakePlan(arrival);
  if (!plan.ok()) return plan.status();
  if (absl::Status c = placer_.PodCreated(*plan); !c.ok()) return c;
  return plan;
}

absl::Status Driver::ArriveConcurrently(size_t i, size_t end) {
  const std::vector<Event>& events = input_.trace.events;
  std::vector<PodPlan> plans;
  for (size_t j = i; j < end; ++j) {
    if (j > i && options_.record != nullptr) options_.record->Write(events[j]);
    absl::StatusOr<PodPlan> plan = Plan(events[j].pod);
    if (!plan.ok()) return plan.status();
    plans.push_back(*std::move(plan));
  }
  std::atomic<size_t> next{0};
  absl::Mutex err_mu;
  absl::Status first_error;
  std::vector<std::thread> workers;
  for (int32_t w = 0; w < options_.concurrency; ++w) {
    workers.emplace_back([&] {
      for (size_t k = next++; k < plans.size(); k = next++) {
        absl::Status e = Schedule(plans[k]);
        if (!e.ok()) {
          absl::MutexLock l(&err_mu);
          if (first_error.ok()) first_error = e;
        }
      }
    });
  }
  for (std::thread& t : workers) t.join();
  return first_error;
}

RunResult Driver::Finish(double wall) {
  std::optional<AuditReport> mirror_audit = placer_.MirrorAudit();  // not under mu_: lock order
  absl::MutexLock lock(&mu_);
  RunResult r = std::move(result_);
  r.mirror_audit = std::move(mirror_audit);
  r.wall_seconds = wall;
  r.decisions_per_second = wall > 0 ? static_cast<double>(r.pods_arrived) / wall : 0;
  if (r.cluster_gpus > 0) {
    r.gpu_allocation = r.allocated_gpu / r.cluster_gpus;
    r.unallocated_gpus = r.cluster_gpus - r.allocated_gpu;
    r.curve.emplace_back(100 * r.arrived_gpu / r.cluster_gpus, 100 * r.gpu_allocation);
  }
  r.fragmentation = model_.ClusterFragmentation(shadow_);
  r.idle_gpus = model_.ClusterIdle(shadow_);
  r.affinity_ratio = r.tickets_placed > 0
                         ? static_cast<double>(r.tickets_on_owned_unit) / static_cast<double>(r.tickets_placed)
                         : -1;
  r.unit_openings_floor = opening_floor_.openings();
  r.affinity_ceiling = r.tickets_placed > 0 ? 1.0 - static_cast<double>(r.unit_openings_floor) /
                                                        static_cast<double>(r.tickets_placed)
                                            : -1;
  r.allocation_ceiling = AllocationCeiling();
  r.audit = ledger_.Audit();
  for (auto& [verb, us] : latency_) r.latency[verb] = Summarise(std::move(us));
  return r;
}

absl::StatusOr<RunResult> Driver::Run() {
  const std::vector<Event>& events = input_.trace.events;
  {
    absl::MutexLock lock(&mu_);
    result_.policy = options_.policy;
    result_.mode = placer_.Describe();
    result_.seed = options_.seed;
    result_.load = options_.load;
  }
  absl::StatusOr<size_t> first = StartCluster();
  if (!first.ok()) return first.status();

  const auto start = Clock::now();
  size_t done = *first;
  auto progress = [&] {
    if (options_.progress) options_.progress(done, events.size());
  };
  for (size_t i = *first; i < events.size(); ++i) {
    const Event& ev = events[i];
    if (options_.record != nullptr) options_.record->Write(ev);
    absl::Status s;
    switch (ev.type) {
      case EventType::kObjects:
        s = ApplyObjects(ev, false);
        break;
      case EventType::kNodeAdd:
      case EventType::kNodeUpdate:
      case EventType::kNodeRemove:
        s = NodeEvent(ev, i);
        break;
      case EventType::kPodDelete:
        s = Delete(ev.pod.namespace_name, ev.pod.name);
        break;
      case EventType::kPodArrive: {
        if (options_.concurrency <= 1) {
          absl::StatusOr<PodPlan> plan = Plan(ev.pod);
          if (!plan.ok()) return plan.status();
          s = Schedule(*plan);
          break;
        }
        // A run of consecutive arrivals, decided by `concurrency` clients at once.
        size_t end = i;
        while (end < events.size() && events[end].type == EventType::kPodArrive) ++end;
        s = ArriveConcurrently(i, end);
        done += end - i - 1;
        i = end - 1;
        break;
      }
    }
    if (!s.ok()) return absl::Status(s.code(), absl::StrCat("event ", i + 1, " (", EventTypeName(ev.type), "): ", s.message()));
    ++done;
    if ((done & 255) == 0) progress();
  }
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();
  progress();
  return Finish(wall);
}

}  // namespace

absl::Status ValidateReplayOptions(const ReplayOptions& options, const Placer& placer) {
  if (options.extender_all_pods && !placer.ScoresEveryPod()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "extender_all_pods (--extender-all-pods): the ", placer.Describe(),
        " placer is not set up to be sent every pod (in-process: DecisionCore::Options::every_pod; "
        "over HTTP: HttpPlacerOptions::score_all_pods, the service's --score-all-pods), so "
        "CPU-only pods would silently be placed otherwise"));
  }
  if (!options.extender_all_pods && placer.ScoresEveryPod()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "extender_all_pods (--extender-all-pods): false, but the ", placer.Describe(),
        " placer was set up to be sent every pod (DecisionCore::Options::every_pod), where a "
        "policy may decide GPU pods differently: the run would not stand for either deployment"));
  }
  if (options.extender_all_pods && options.concurrency > 1) {
    return absl::InvalidArgumentError(
        "extender_all_pods (--extender-all-pods): needs concurrency 1 (a pod without a catalog "
        "resource is bound where kube-scheduler's own fit found room, which another client may "
        "have taken since)");
  }
  return absl::OkStatus();
}

absl::StatusOr<RunResult> RunReplay(const ReplayInput& input, Placer& placer,
                                    const ReplayOptions& options) {
  if (absl::Status s = ValidateReplayOptions(options, placer); !s.ok()) return s;
  FragmentationOptions fo;
  fo.tasks = TaskMixOf(input);
  fo.twins = input.twins;
  // The report's fragmentation counts host resources too (read under the driver's lock).
  const Driver* self = nullptr;
  fo.host_free = [&self](const ClusterState&, const NodeState& node, int64_t* cpu, int64_t* memory) {
    return self != nullptr && self->HostFreeLocked(node.name, cpu, memory);
  };
  absl::StatusOr<FragmentationModel> model = FragmentationModel::Create(input.catalog, std::move(fo));
  if (!model.ok()) return model.status();
  Driver driver(input, placer, options, *std::move(model));
  self = &driver;
  absl::StatusOr<RunResult> r = driver.Run();
  absl::Status stopped = placer.Stop();
  if (!r.ok()) return r;
  if (!stopped.ok()) return stopped;
  return r;
}

}  // namespace gse::replay
