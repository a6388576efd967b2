// The Placer: the decision maker behind the extender protocol's verbs as the replay driver
// (replay_engine.h) drives it, and where the trace's facts go, and the pod plan it is handed.
// Implementations: InProcessPlacer (in_process_placer.h), HttpPlacer (replay_http.h). fgd
// reads free cpu/memory from the placer's own mirror (MirrorHostFree), as the service does.
#ifndef GSE_PERF_PLACER_H_
#define GSE_PERF_PLACER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "perf/trace.h"
#include "scoring/fragmentation_policy.h"
#include "state/assignment.h"
#include "state/cluster_state.h"
#include "state/k8s_objects.h"

namespace gse::replay {

// One arriving pod as the driver hands it to a Placer.
struct PodPlan {
  const PodArrival* arrival = nullptr;
  PodObject pod;         // decoded (uid set, pending)
  std::string pod_json;  // the same pod as a Pod object (HTTP bodies, API server)
  std::string project;   // the project it is charged to
  double gpu = 0;        // GPU request counted for allocation
  OfferingId offering = kNoOffering;  // the first catalog offering it asks for (allocation ceiling)
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
  // The extender's bind of a pod that asks for no catalog resource (extender_all_pods): it
  // binds it as the default binder would, without units. FailedPrecondition when it refused.
  virtual absl::Status BindWithoutUnits(const PodPlan& pod, const std::string& node) = 0;

  // Facts.
  virtual absl::Status ApplyObjects(const std::string& list_json, const ObjectBatch& batch) = 0;
  virtual absl::Status ApplyNode(const std::string& node_json, const NodeObject& node) = 0;
  virtual absl::Status RemoveNode(const std::string& name) = 0;
  virtual absl::Status DeletePod(const std::string& namespace_name, const std::string& name) = 0;
  // A pod bound by someone else, with its assignment annotations (the node agent's twins).
  virtual absl::Status ApplyBoundPod(const PodObject& pod, const std::string& pod_json) = 0;
  // Waits until the decision maker has seen every fact applied so far.
  virtual absl::Status Sync() { return absl::OkStatus(); }
  // Whether the decision maker was set up for kube-scheduler sending it every pod
  // (ReplayOptions::extender_all_pods; in-process DecisionCore::Options::every_pod, over HTTP
  // the service's --score-all-pods): Filter/Prioritize/Bind accept a pod that asks for no
  // catalog resource and let the policy score it, and a policy may then name the node
  // outright. A run must agree with its placer on this.
  virtual bool ScoresEveryPod() const { return false; }
  // ClusterState::Audit of the decision maker's own mirror, when it can be reached.
  virtual std::optional<AuditReport> MirrorAudit() { return std::nullopt; }
};

}  // namespace gse::replay

#endif  // GSE_PERF_PLACER_H_
