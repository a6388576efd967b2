// The replay driver: plays a trace (trace.h) against a decision maker (a Placer) the way
// kube-scheduler would drive the extender, and measures the outcome.
//
// Per arriving pod:
//   built-in fit checks kube-scheduler runs before extenders (node unschedulable, nodeSelector
//   and required node affinity, pod count, cpu, memory, each requested extended resource
//   against allocatable minus what bound pods request), with an optional
//   percentageOfNodesToScore cut-off (kube-scheduler's rotating search)
//   -> pods asking for a catalog resource: Placer::Filter -> Placer::Prioritize (skipped when
//      one node is left) -> the best score, ties to the lowest node name -> Placer::Bind;
//   -> other pods (the extender is not interested): the best in-tree score (ReplayOptions::
//      score_plugins), ties to the lowest name, bound without the extender; with
//      ReplayOptions::extender_all_pods they take the extender's path too (filter passes every
//      node, the policy's score counts, bind reserves no unit).
// Scores: in-tree plugins + the extender's score x extender_weight x 10, as kube-scheduler.
// A pod that fits nowhere is dropped (counted by reason), never retried. Deletions, node
// events and the replay's node agent ("twin" GPUs: while one half of a GPU advertised both as
// an exclusive and an MPS unit is in use, the other half is held by a placeholder pod) reach
// the Placer as facts.
//
// Measures (RunResult): GPU allocation over arrived load, FGD fragmentation, per-project
// affinity of time-sliced tickets, spills, pods failed by reason, per-verb latency, decisions
// per second, and an independent audit of the final placements (Ledger): it recounts every
// unit from the assignments the binds produced and the node facts of the trace, with its own
// rules (capacity, one owner per time-sliced unit, twins, cpu/memory/pods, quotas), never
// reading the mirror's counters.
//
// Placers: InProcessPlacer (Mirror + scoring, exactly the service's pipeline, no HTTP) here;
// HttpPlacer in replay_http.h. The driver is single-threaded unless concurrency > 1, when
// consecutive arrivals are decided by that many threads (binds are serialised with their
// twin placeholders).
#ifndef GSE_PERF_REPLAY_ENGINE_H_
#define GSE_PERF_REPLAY_ENGINE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/node_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "perf/trace.h"
#include "scoring/decision_core.h"
#include "scoring/fragmentation_policy.h"
#include "scoring/policies.h"
#include "state/cluster_state.h"
#include "state/k8s_objects.h"
#include "state/mirror.h"

namespace gse::replay {

// kube-scheduler's view of free cpu and memory per node, for policies that count host
// resources (fgd's HostFreeFn). RunReplay attaches its ledger for the run; thread-safe.
class HostView {
 public:
  HostView() = default;
  ~HostView() { mu_.ForgetDeadlockInfo(); }
  bool Free(absl::string_view node, int64_t* cpu_milli, int64_t* memory_milli) const {
    absl::MutexLock lock(&mu_);
    return fn_ ? fn_(node, cpu_milli, memory_milli) : false;
  }
  void Attach(HostFreeFn fn) {
    absl::MutexLock lock(&mu_);
    fn_ = std::move(fn);
  }
  HostFreeFn AsFn() {
    return [this](absl::string_view n, int64_t* c, int64_t* m) { return Free(n, c, m); };
  }
  // The pod being decided (set by the driver around its verbs when it runs one client).
  void SetPod(bool known, int64_t cpu, int64_t memory) {
    absl::MutexLock lock(&mu_);
    pod_known_ = known;
    pod_cpu_ = cpu;
    pod_memory_ = memory;
  }
  bool Pod(int64_t* cpu, int64_t* memory) const {
    absl::MutexLock lock(&mu_);
    *cpu = pod_cpu_;
    *memory = pod_memory_;
    return pod_known_;
  }

 private:
  mutable absl::Mutex mu_;
  HostFreeFn fn_ ABSL_GUARDED_BY(mu_);
  bool pod_known_ ABSL_GUARDED_BY(mu_) = false;
  int64_t pod_cpu_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t pod_memory_ ABSL_GUARDED_BY(mu_) = 0;
};

// One arriving pod as the driver hands it to a Placer.
struct PodPlan {
  const PodArrival* arrival = nullptr;
  PodObject pod;         // decoded (uid set, pending)
  std::string pod_json;  // the same pod as a Pod object (HTTP bodies, API server)
  std::string project;   // the project it is charged to
  double gpu = 0;        // GPU request counted for allocation
};

struct FilterAnswer {
  std::vector<std::string> passed;
  std::map<std::string, std::string> failed;  // node -> reason label (FitReasonLabel)
};

// The decision maker behind the extender protocol's verbs, and where facts go.
class Placer {
 public:
  virtual ~Placer() = default;
  virtual std::string Describe() const = 0;
  // The initial cluster (namespaces, quotas, nodes) before any event.
  virtual absl::Status Start(const std::string& list_json, const ObjectBatch& batch) = 0;
  virtual absl::Status Stop() { return absl::OkStatus(); }

  virtual absl::Status PodCreated(const PodPlan& pod) { return absl::OkStatus(); }
  virtual absl::StatusOr<FilterAnswer> Filter(const PodPlan& pod,
                                              const std::vector<std::string>& candidates) = 0;
  virtual absl::StatusOr<std::vector<int64_t>> Prioritize(const PodPlan& pod,
                                                          const std::vector<std::string>& nodes) = 0;
  // Binds through the extender; returns the units it reserved. FailedPrecondition when the
  // extender refused (the pod is then dropped).
  virtual absl::StatusOr<Assignment> Bind(const PodPlan& pod, const std::string& node) = 0;
  // Binds a pod the extender is not interested in (kube-scheduler's default binder).
  virtual absl::Status BindPlain(const PodPlan& pod, const std::string& node) = 0;

  // Facts.
  virtual absl::Status ApplyObjects(const std::string& list_json, const ObjectBatch& batch) = 0;
  virtual absl::Status ApplyNode(const std::string& node_json, const NodeObject& node) = 0;
  virtual absl::Status RemoveNode(const std::string& name) = 0;
  virtual absl::Status DeletePod(const std::string& namespace_name, const std::string& name) = 0;
  // A pod bound by someone else, with its assignment annotations (the node agent's twins).
  virtual absl::Status ApplyBoundPod(const PodObject& pod, const std::string& pod_json) = 0;
  // Waits until the decision maker has seen every fact applied so far.
  virtual absl::Status Sync() { return absl::OkStatus(); }
  // Whether Filter/Prioritize/Bind accept a pod that asks for no catalog resource and let the
  // policy score it (ReplayOptions::extender_all_pods).
  virtual bool ScoresEveryPod() const { return false; }
  // ClusterState::Audit of the decision maker's own mirror, when it can be reached.
  virtual std::optional<AuditReport> MirrorAudit() { return std::nullopt; }
};

// Placer over a Mirror in this process: every verb is a call on the DecisionCore that
// ExtenderService calls (scoring/decision_core.h), without JSON or HTTP.
class InProcessPlacer : public Placer {
 public:
  InProcessPlacer(std::shared_ptr<const Catalog> catalog, std::unique_ptr<PlacementPolicy> policy);
  std::string Describe() const override { return "in-process"; }
  absl::Status Start(const std::string& list_json, const ObjectBatch& batch) override;
  absl::StatusOr<FilterAnswer> Filter(const PodPlan& pod, const std::vector<std::string>& candidates) override;
  absl::StatusOr<std::vector<int64_t>> Prioritize(const PodPlan& pod, const std::vector<std::string>& nodes) override;
  absl::StatusOr<Assignment> Bind(const PodPlan& pod, const std::string& node) override;
  // Bind with what the service reports of it besides the units (refusal kind, own or new
  // unit): the reservation, confirmed at once (no API server to wait for).
  ReserveDecision BindWithOutcome(const PodPlan& pod, const std::string& node);
  absl::Status BindPlain(const PodPlan&, const std::string&) override { return absl::OkStatus(); }
  bool ScoresEveryPod() const override { return true; }
  absl::Status ApplyObjects(const std::string& list_json, const ObjectBatch& batch) override;
  absl::Status ApplyNode(const std::string& node_json, const NodeObject& node) override;
  absl::Status RemoveNode(const std::string& name) override;
  absl::Status DeletePod(const std::string& namespace_name, const std::string& name) override;
  absl::Status ApplyBoundPod(const PodObject& pod, const std::string& pod_json) override;
  std::optional<AuditReport> MirrorAudit() override;
  Mirror& mirror() { return mirror_; }

 private:
  std::unique_ptr<PlacementPolicy> policy_;
  Mirror mirror_;
  DecisionCore core_;  // over mirror_ and policy_
};

// The independent ledger of what was placed, and the audit over it.
class Ledger {
 public:
  explicit Ledger(std::shared_ptr<const Catalog> catalog,
                  std::vector<std::pair<std::string, std::string>> twins = {});

  // Facts (the same the Placer gets).
  void ApplyBatch(const ObjectBatch& batch);
  void ApplyNode(const NodeObject& node);
  void RemoveNode(const std::string& name);

  // Records a bound pod (its cpu/memory/extended requests and, when `a` names units, its
  // holdings). `placeholder` marks the node agent's twin pods (not workload).
  void Bind(const PodObject& pod, const std::string& project, const std::string& node,
            const Assignment* a, bool placeholder);
  void Delete(const std::string& pod_key);

  struct UnitKey {
    std::string node;
    OfferingId offering;
    int32_t index;
    bool operator<(const UnitKey& o) const {
      return std::tie(node, offering, index) < std::tie(o.node, o.offering, o.index);
    }
  };
  struct Holder {
    std::string pod_key;
    std::string project;
    int32_t amount;
    bool placeholder;
  };
  const std::map<UnitKey, std::vector<Holder>>& units() const { return units_; }
  // Test hook: adds a holder without any check (to corrupt the ledger on purpose).
  void AddHolderForTesting(const UnitKey& key, Holder holder) { units_[key].push_back(std::move(holder)); }

  // Capacity of a unit from the node facts: tickets/shares/1; 0 when the node does not
  // advertise that many units of the offering.
  int32_t UnitCapacity(const std::string& node, OfferingId offering, int32_t index) const;
  // Does `project` hold (own) a time-sliced unit of `offering` with a free ticket?
  bool OwnsFreeTicket(const std::string& project, OfferingId offering) const;
  bool ProjectHoldsUnit(const UnitKey& key, const std::string& project) const;

  struct AuditResult {
    int64_t oversubscribed_units = 0;  // capacity, exclusivity, twins
    int64_t multi_owner_units = 0;
    int64_t over_capacity_nodes = 0;  // cpu, memory, pods
    int64_t over_quota = 0;
    std::vector<std::string> problems;  // first 50
  };
  AuditResult Audit() const;

  // What a pod asks of a node in kube-scheduler's resource view, computed once per pod.
  struct Demand {
    int64_t cpu = 0, memory = 0;
    std::vector<std::pair<int32_t, int64_t>> ext;  // (resource id, milli)
  };
  Demand DemandOf(const PodObject& pod);
  // Built-in fit (kube-scheduler's own filters). Returns "" when the pod fits, else a reason
  // label ("node_affinity", "too_many_pods", "insufficient_cpu", ...).
  std::string BuiltInFit(const Demand& d, const PodArrival& arrival, const std::string& node) const;
  // The same for NodeNames()[i] (no lookup by name: the hot loop).
  std::string BuiltInFitAt(const Demand& d, const PodArrival& arrival, size_t i) const;
  // kube-scheduler's in-tree scores of the node after placing the pod, 0..100 (integers, as
  // kube-scheduler computes them) over cpu and memory.
  int64_t LeastAllocated(const Demand& d, const std::string& node) const;
  int64_t MostAllocated(const Demand& d, const std::string& node) const;
  int64_t BalancedAllocation(const Demand& d, const std::string& node) const;
  // Free cpu and memory (milli) of a node; false when unknown.
  bool FreeHost(absl::string_view node, int64_t* cpu, int64_t* memory) const;
  const std::vector<std::string>& NodeNames() const { return names_; }  // live nodes, sorted
  bool HasNode(const std::string& node) const;

 private:
  struct NodeFacts {
    NodeObject object;
    bool removed = false;
    int64_t alloc_cpu = 0, alloc_memory = 0, alloc_pods = 0;
    int64_t used_cpu = 0, used_memory = 0, used_pods = 0;
    std::vector<int64_t> alloc_ext, used_ext;  // by resource id
    std::map<OfferingId, std::pair<int32_t, int32_t>> units;  // offering -> (count, capacity)
  };
  struct PodFacts {
    std::string node;
    std::string project;
    Demand demand;
    Assignment assignment;
    bool has_assignment = false;
    bool placeholder = false;
  };
  void Derive(NodeFacts* n);
  std::string Fit(const Demand& d, const PodArrival& arrival, const NodeFacts& n) const;
  int32_t ResourceId(const std::string& name);
  void RebuildNames();

  std::shared_ptr<const Catalog> catalog_;
  std::vector<OfferingId> twin_of_;
  absl::node_hash_map<std::string, NodeFacts> nodes_;  // stable addresses (order_)
  std::vector<std::string> names_;
  std::vector<const NodeFacts*> order_;  // parallel to names_
  std::map<std::string, int32_t> resource_ids_;
  std::vector<std::string> resource_names_;
  std::map<std::string, PodFacts> pods_;
  std::map<UnitKey, std::vector<Holder>> units_;
  std::map<std::string, std::string> namespace_project_;
  // project -> offering -> quota in usage units (exclusive units, owned ts units, mps shares)
  std::map<std::string, std::map<OfferingId, int64_t>> quota_;
};

struct LatencySummary {
  int64_t count = 0;
  double p50_us = 0, p90_us = 0, p99_us = 0, max_us = 0;
};

struct RunResult {
  std::string policy;
  std::string mode;
  uint64_t seed = 0;
  double load = 0;
  int64_t pods_arrived = 0;
  int64_t pods_placed = 0;
  int64_t pods_deleted = 0;
  double cluster_gpus = 0;
  double arrived_gpu = 0;
  double allocated_gpu = 0;
  double gpu_allocation = 0;    // allocated / cluster GPUs, 0..1
  double unallocated_gpus = 0;  // cluster GPUs - allocated
  double fragmentation = 0;     // FGD fragmentation at the end, GPU-equivalents
  double idle_gpus = 0;         // idle GPU-equivalents at the end (model view)
  int64_t tickets_placed = 0;
  int64_t tickets_on_owned_unit = 0;
  double affinity_ratio = -1;   // < 0: no time-sliced ticket placed
  int64_t spills = 0;
  int64_t quota_rejections = 0;
  std::map<std::string, int64_t> pods_failed;  // reason label -> pods
  Ledger::AuditResult audit;
  std::optional<AuditReport> mirror_audit;
  std::map<std::string, LatencySummary> latency;  // verb -> summary
  double decisions_per_second = 0;
  double wall_seconds = 0;
  // (arrived GPU request, allocated GPU request) in % of cluster GPUs, at each whole percent
  // of arrival, plus the final point.
  std::vector<std::pair<double, double>> curve;
  // Placements in order: "ns/name node units" (determinism checks, identical-mode tests).
  std::vector<std::string> placements;
};

struct ReplayOptions {
  std::string policy;  // for the report
  uint64_t seed = 0;
  double load = 0;
  // kube-scheduler's percentageOfNodesToScore: >= 100 every node; 1..99 a cut-off (at least
  // 100 nodes, rotating start); 0 the adaptive default (50 - nodes/125, at least 5).
  int32_t percentage_of_nodes_to_score = 100;
  int32_t concurrency = 1;
  // kube-scheduler's in-tree score plugins (name, weight) added to the extender's score x
  // extender_weight x 10: "least-allocated", "most-allocated" (NodeResourcesFit on cpu and
  // memory), "balanced-allocation". Default: the project's scheduler-config/gpu-scheduler.yaml
  // (default plugins, extender weight 5).
  std::vector<std::pair<std::string, int64_t>> score_plugins = {{"least-allocated", 1},
                                                                {"balanced-allocation", 1}};
  int64_t extender_weight = 5;
  // Every pod goes to the extender (a KubeSchedulerConfiguration extender entry without
  // managedResources): pods asking for no catalog resource also pass through filter (which
  // passes every node, I6) and prioritize, where the policy scores them (fgd: by how the pod's
  // cpu/memory change the fragmentation of the node's idle GPUs), and the extender binds them
  // without units. false (the default): they never reach the extender and kube-scheduler's
  // in-tree scores alone place them, as with the project's gpu-scheduler.yaml. Needs a Placer
  // whose ScoresEveryPod() (in-process only).
  bool extender_all_pods = false;
  HostView* host = nullptr;  // attached to the run's ledger when set
  TraceWriter* record = nullptr;
  bool keep_placements = false;
  // Called now and then with (events done, events total).
  std::function<void(size_t, size_t)> progress;
};

// The whole input of one run.
struct ReplayInput {
  std::shared_ptr<const Catalog> catalog;
  std::vector<std::pair<std::string, std::string>> twins;
  Trace trace;  // the snapshot, when given, is its first (objects) event
  double cluster_gpus = 0;  // 0: from the nodes' nvidia.com/gpu.count labels
};

// Builds the catalog from the trace header ("" = built-in, or `catalog_override` text).
absl::StatusOr<ReplayInput> PrepareInput(Trace trace, const std::string& catalog_override,
                                         const std::string& snapshot_json);

// The expected task mix of a trace: one class per (resource, amount, products, cpu, memory),
// weighted by how often it arrives; products come from required affinity on
// nvidia.com/gpu.product.
std::vector<TaskClass> TaskMixOf(const ReplayInput& input);

// Builds a policy by name: "fgd" (with the input's task mix, twins and, when `host` is given,
// kube-scheduler's cpu/memory view), "fgd-gpu" (the same without the host view) and
// "bestfit" here; anything else through MakePolicy.
absl::StatusOr<std::unique_ptr<PlacementPolicy>> MakeReplayPolicy(const std::string& name,
                                                                  const ReplayInput& input,
                                                                  HostView* host = nullptr);

// Option combinations a run refuses, whatever the input; the error names the option and says
// why: extender_all_pods with a placer that cannot score pods without a catalog resource (the
// HTTP placers: ExtenderService's prioritize scores only pods that ask for a catalog
// resource, and its mirror knows no cpu/memory), or with concurrency > 1 (the pod's own
// cpu/memory, which the score needs, is known only with one client).
absl::Status ValidateReplayOptions(const ReplayOptions& options, const Placer& placer);

// Runs ValidateReplayOptions first (InvalidArgument when it fails, nothing replayed).
absl::StatusOr<RunResult> RunReplay(const ReplayInput& input, Placer& placer,
                                    const ReplayOptions& options);

}  // namespace gse::replay

#endif  // GSE_PERF_REPLAY_ENGINE_H_
