// ExtenderMetrics: every Prometheus series the service exports, on one prometheus-cpp
// registry that GET /metrics serialises with prometheus::TextSerializer.
//
// Label sets are bounded: verbs, outcomes, offerings (catalog size), fixed reason vocabularies
// and projects — never node or pod names, so the series count does not grow with the cluster
// (tests/metrics_cardinality_test.cc counts them at 500 and 5,000 nodes). Every series is
// documented in docs/metrics.md.
// Series that alerts and dashboard panels divide or compare are created at 0 before any
// traffic (InitSeries, and the fixed vocabularies of the live-cluster counters), so that a
// quiet extender answers those queries with 0 rather than with nothing.
// Thread-safe (prometheus-cpp metrics are atomic; family lookups are cached at construction
// or guarded).
#ifndef GSE_EXTENDER_METRICS_H_
#define GSE_EXTENDER_METRICS_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "prometheus/registry.h"
#include "state/catalog.h"

namespace gse {

class ExtenderMetrics {
 public:
  ExtenderMetrics();
  ~ExtenderMetrics();

  // Label values of the live-cluster series; any other value is counted as "other".
  static constexpr const char* kWatchResources[] = {"nodes", "pods", "namespaces",
                                                    "resourcequotas"};
  static constexpr const char* kApiOps[] = {"list", "watch", "get", "bind", "lease"};
  static constexpr const char* kDriftKinds[] = {"pod", "node", "project_quota"};
  // Writes paced by the client's write limiter (kube/write_limiter.h).
  static constexpr const char* kApiWriteOps[] = {"bind", "lease"};
  static constexpr const char* kLeaderEvents[] = {"acquired", "lost"};
  static constexpr const char* kRequeuePodOutcomes[] = {"touched", "already", "changed",
                                                        "failed"};
  static constexpr const char* kRequeuePassOutcomes[] = {"completed", "list_failed",
                                                         "cancelled"};

  // Creates at 0 the per-offering series that dashboards and alerts query: gse_bind_total for
  // every offering and bind outcome (and "none" for requests that name no offering), and for
  // time-sliced offerings gse_affinity_placements_total (own_unit, new_unit) and
  // gse_affinity_spills_total. Idempotent; ExtenderService calls it with its catalog.
  void InitSeries(const Catalog& catalog);

  // One HTTP request: verb is filter|prioritize|bind|preempt|healthz|readyz|metrics|debug_state|other;
  // code is the HTTP status (200, 400, 404, 405, 413, 500); outcome ok|error|bad_request.
  void ObserveRequest(absl::string_view verb, int code, absl::string_view outcome,
                      double seconds);
  // Requests of a verb (filter|prioritize|bind|preempt) whose handler runs: +1 when it starts,
  // -1 when its answer is ready.
  void AddRequestsInFlight(absl::string_view verb, int delta);
  // One node's filter verdict: reason is FitReasonLabel ("fits", "quota_exhausted", ...).
  void ObserveFilterVerdict(absl::string_view offering, absl::string_view reason);
  // The same for `count` nodes at once: filter aggregates its verdicts per reason, so a
  // 5,000-node call costs one increment per distinct reason, not one per node.
  void ObserveFilterVerdicts(absl::string_view offering, absl::string_view reason, int64_t count);
  void ObserveFilterNodes(int passed, int failed);
  // Bind outcome: bound|unit_taken|quota|api_error|api_unknown|client_throttled|lease_lost|
  // overloaded|not_synced|not_leader|unknown_pod|bad_request|...
  // api_seconds is the Binder call's duration; negative when the Binder was not called.
  void ObserveBind(absl::string_view offering, absl::string_view outcome, double api_seconds);
  // Time-sliced placements: "own_unit" or "new_unit"; spills by cause.
  void ObserveAffinity(absl::string_view offering, absl::string_view placement);
  void ObserveSpill(absl::string_view offering, absl::string_view cause);
  void ObservePreemption(int nodes_proposed, int victims);

  // The live cluster (Kubernetes API). resource: kWatchResources; op: kApiOps; kind:
  // kDriftKinds (a relist found the mirror different from the API server and repaired it).
  void ObserveWatchRestart(absl::string_view resource, int64_t n = 1);
  void ObserveApiError(absl::string_view op, int64_t n = 1);
  // One write after the client's write limiter decided (op: kApiWriteOps): sent after
  // `waited`, or not sent because its turn came after its deadline.
  void ObserveApiWrite(absl::string_view op, bool sent, absl::Duration waited);
  void ObserveDriftRepair(absl::string_view kind, int64_t n = 1);
  // When the last full list from the API server was applied to the mirror (0 until then, and
  // always 0 standalone, where the snapshot loaded at start-up is the whole truth).
  void SetLastSync(absl::Time when);

  // Leader election (kube/leader_election.h LeadershipStats): transitions of this replica
  // (event: kLeaderEvents), and at its acquisitions the bound on how long no replica led
  // (the increment of the total, and the last value).
  void ObserveLeaderTransition(absl::string_view event, int64_t n = 1);
  void ObserveLeaderless(double seconds_added, double last_seconds);
  // The take-over requeue (kube/pod_requeue.h): pods by outcome (kRequeuePodOutcomes) and
  // passes by outcome (kRequeuePassOutcomes).
  void ObserveRequeuePods(absl::string_view outcome, int64_t n);
  void ObserveRequeuePasses(absl::string_view outcome, int64_t n);
  // The node agent's per-node gate (state/agent_gate.cc): waits that ended by the timeout
  // (--agent-gate-timeout), and the pods awaiting their node's agent now.
  void ObserveAgentGateTimeouts(int64_t n);
  // DRA mode: bind read the pod's extended-resource claim from the API (the mirror had not
  // shown it in time); `ok`: the API answered with a claim.
  void ObserveDraClaimRead(bool ok);
  void SetAgentGateWaitingPods(int64_t n);
  // gse_nodes_agent_stale (LiveCluster::SweepAgentLiveness).
  void SetNodesAgentStale(int64_t n);

  prometheus::Registry& registry();
  // Text exposition format (Content-Type text/plain; version=0.0.4).
  std::string Serialize() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gse

#endif  // GSE_EXTENDER_METRICS_H_
