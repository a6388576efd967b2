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
// Placers (placer.h): InProcessPlacer (in_process_placer.h: the service's DecisionCore, no
// HTTP) and HttpPlacer (replay_http.h); the Ledger is replay_ledger.h. The driver is single-threaded unless concurrency > 1, when
// consecutive arrivals are decided by that many threads (binds are serialised with their
// twin placeholders).
#ifndef GSE_PERF_REPLAY_ENGINE_H_
#define GSE_PERF_REPLAY_ENGINE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "perf/placer.h"
#include "perf/replay_ledger.h"
#include "perf/trace.h"
#include "scoring/fragmentation_policy.h"
#include "scoring/policies.h"
#include "state/catalog.h"
#include "state/cluster_state.h"

namespace gse::replay {

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
  // Spills while a node holding the project's unit with a free ticket passed kube-scheduler's
  // built-in fit for the pod: the pod could have joined its own unit (the policy, or the
  // candidate cut-off of percentageOfNodesToScore, sent it elsewhere). A spill forced by cpu,
  // memory or a selector is not avoidable.
  int64_t avoidable_spills = 0;
  // The fewest units any packing had to open for these tickets (replay_ledger.h) and the
  // affinity ratio's ceiling it gives: 1 - floor / tickets placed (< 0: no ticket placed).
  int64_t unit_openings_floor = 0;
  double affinity_ceiling = -1;
  // An upper bound of gpu_allocation that no policy can pass: for each pool of GPU capacity
  // (an offering's units on the live nodes at the end, twins as one pool), the lesser of its
  // capacity and the GPU request that arrived for it, over the cluster's GPUs. It leaves out
  // cpu, memory, selectors and the shape of multi-unit requests, so it is loose, never
  // low. 0 when the cluster has no GPU.
  double allocation_ceiling = 0;
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
  // in-tree scores alone place them, as with the project's gpu-scheduler.yaml. Must equal the
  // Placer's ScoresEveryPod() (in-process: InProcessPlacer built with every_pod; HTTP:
  // HttpPlacerOptions::score_all_pods, the service's --score-all-pods).
  bool extender_all_pods = false;
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

// Builds a policy by name: "fgd" (with the input's task mix, twins and the deciding mirror's
// free cpu/memory, MirrorHostFree, as the service reads them), "fgd-gpu" (the same without the
// host view), "fgd-learned" (the service's fgd, MakeServicePolicy: the mix learned online
// from the pods filter sees, seeded from the catalog; the input's twins) and "bestfit" here;
// anything else through MakePolicy.
absl::StatusOr<std::unique_ptr<PlacementPolicy>> MakeReplayPolicy(const std::string& name,
                                                                  const ReplayInput& input);

// Option combinations a run refuses, whatever the input; the error names the option and says
// why: extender_all_pods with a placer whose extender does not score pods without a catalog
// resource (an HttpPlacer without HttpPlacerOptions::score_all_pods: ExtenderService's
// prioritize then scores them 0), or with concurrency > 1 (such a pod is bound where the
// built-in fit found room, which another client may have taken since).
absl::Status ValidateReplayOptions(const ReplayOptions& options, const Placer& placer);

// Runs ValidateReplayOptions first (InvalidArgument when it fails, nothing replayed).
absl::StatusOr<RunResult> RunReplay(const ReplayInput& input, Placer& placer,
                                    const ReplayOptions& options);

}  // namespace gse::replay

#endif  // GSE_PERF_REPLAY_ENGINE_H_
