// InProcessPlacer: the replay's Placer over a Mirror in this process, through the same
// DecisionCore (scoring/decision_core.h) that ExtenderService calls: no JSON, no HTTP, no
// second copy of any decision. tests/replay_core_parity_test.cc holds it to the service.
#ifndef GSE_PERF_IN_PROCESS_PLACER_H_
#define GSE_PERF_IN_PROCESS_PLACER_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "perf/placer.h"
#include "scoring/decision_core.h"
#include "scoring/policies.h"
#include "state/catalog.h"
#include "state/cluster_state.h"
#include "state/mirror.h"

namespace gse::replay {

// Placer over a Mirror in this process: every verb is a call on the DecisionCore that
// ExtenderService calls (scoring/decision_core.h), without JSON or HTTP.
class InProcessPlacer : public Placer {
 public:
  // `options.every_pod`: the replay sends every pod to the extender (--extender-all-pods).
  InProcessPlacer(std::shared_ptr<const Catalog> catalog, std::unique_ptr<PlacementPolicy> policy,
                  DecisionCore::Options options = {});
  std::string Describe() const override { return "in-process"; }
  absl::Status Start(const std::string& list_json, const ObjectBatch& batch) override;
  absl::StatusOr<FilterAnswer> Filter(const PodPlan& pod, const std::vector<std::string>& candidates) override;
  absl::StatusOr<std::vector<int64_t>> Prioritize(const PodPlan& pod, const std::vector<std::string>& nodes) override;
  absl::StatusOr<Assignment> Bind(const PodPlan& pod, const std::string& node) override;
  // Bind with what the service reports of it besides the units (refusal kind, own or new
  // unit): the reservation, confirmed at once (no API server to wait for).
  ReserveDecision BindWithOutcome(const PodPlan& pod, const std::string& node);
  // A pod bound without units (by kube-scheduler's default binder, or by the extender's bind
  // for a pod outside the catalog) goes into the mirror as the service's watch would show it:
  // its cpu and memory count in the node's host view (ClusterState::HostFree), which fgd reads.
  absl::Status BindPlain(const PodPlan& pod, const std::string& node) override;
  absl::Status BindWithoutUnits(const PodPlan& pod, const std::string& node) override {
    return BindPlain(pod, node);
  }
  bool ScoresEveryPod() const override { return core_.options().every_pod; }
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
  // UIDs of the pods bound without units, by namespace/name: they hold no PodRecord to find
  // them by name when deleted, only their host view count, kept by UID.
  absl::Mutex plain_mu_;
  absl::flat_hash_map<std::string, std::string> plain_uids_ ABSL_GUARDED_BY(plain_mu_);
};

// A replay names each live pod uniquely, so its deletions go by name: the pod recorded under
// `key` (whatever its UID) leaves `state`.
void ReleasePodNamed(ClusterState& state, const std::string& key);

}  // namespace gse::replay

#endif  // GSE_PERF_IN_PROCESS_PLACER_H_
