// Filter: can a node host a pod's request, and if not, why.
//
// Reasons are fixed strings (kube-scheduler groups identical messages and counts them, so no
// node names or numbers inside) and double as the `reason` label of the filter metrics.
// Pure functions over a const ClusterState, no I/O, no locks.
#ifndef GSE_SCORING_FEASIBILITY_H_
#define GSE_SCORING_FEASIBILITY_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/string_view.h"
#include "scoring/pod_request.h"
#include "state/cluster_state.h"

namespace gse {

enum class FitReason {
  kFits,
  // unresolvable (preemption cannot help):
  kNodeUnknown,          // "node unknown to gpu-slice-extender"
  kOfferingNotOnNode,    // "offering not on node"
  kOfferingUnusable,     // "offering not usable as catalogued on node" (sharing/product mismatch)
  kNodeSelector,         // "node does not match offering nodeSelector"
  kQuotaExhausted,       // "project quota exhausted"
  kPodUnresolvable,      // the pod's own unresolvable reason (PodRequest::unresolvable)
  // capacity (preemption may help):
  kNoFreeUnit,           // "no free unit"
  kNoFreeTicket,         // "no free ticket on project's units and no free unit"
  kNoUnitWithShares,     // "no unit with enough free shares"
  // affinity (I3): the project owns a unit with a free ticket on another candidate node, so
  // opening a new unit here is refused; unresolvable (preemption must not evict for it).
  kAffinityElsewhere,    // "project's own unit has a free ticket on another node"
  // The node agent's per-node gate (ClusterState::AgentGateOf): pods bound to the node wait
  // for its agent to confirm other units; transient, and preemption cannot help (unresolvable).
  kWaitingForAgent,      // "waiting for the node agent"
  // The node carries an agent's inventory but its agent has not renewed its heartbeat Lease
  // within --agent-heartbeat-timeout (ClusterState::SetAgentStale): a dead agent cannot
  // admit a pod; unresolvable (preemption cannot revive it).
  kAgentStale,           // "node agent not renewing its heartbeat Lease"
  // DRA mode, shared offerings (restricted sharing, docs/dra.md): on a DRA node the
  // allocator picks the device (its first fit in walk order, DraState::PredictExtended
  // ResourcePick), and the predicted device holds another project's pods or a user-made
  // claim; unresolvable (preemption must not evict another project for it).
  kDraDeviceOfOtherProject,  // "DRA allocator would pick a device another project holds"
};

// The number of FitReason values (arrays indexed by reason).
inline constexpr int kFitReasonCount = static_cast<int>(FitReason::kDraDeviceOfOtherProject) + 1;

struct NodeFit {
  FitReason reason = FitReason::kFits;
  bool fits() const { return reason == FitReason::kFits; }
  bool unresolvable() const;
  // The text sent to kube-scheduler (for kPodUnresolvable: the pod's own reason).
  std::string Message(const PodRequest& request) const;
};

absl::string_view FitReasonText(FitReason reason);
// Short stable label for metrics ("node_unknown", "quota_exhausted", ...).
absl::string_view FitReasonLabel(FitReason reason);

// May a new holder of `project` join `unit` (ignoring free capacity)? UnitAdmits
// (state/unit_rules.h) for a unit of the mirror, by its recorded owner: what the policies ask
// when they choose units.
bool UnitAdmitsProject(const Unit& unit, const Offering& offering, ProjectId project);

// Pods (PodRecord::id, their UIDs) whose holdings are to be ignored (preemption victims);
// empty for plain filter.
using Evictions = absl::flat_hash_set<std::string>;

// DESIGN.md placement rules for one node. `node` may be null (unknown node).
NodeFit CheckNode(const ClusterState& state, const PodRequest& request, const NodeState* node,
                  const Evictions& evicted = {});

// DRA mode, for an offering on a DRA node (NodeOffering::dra): kDraDeviceOfOtherProject when
// the allocator's predicted first fit (one device) is a user-made claim's; kNoFreeUnit when
// the model predicts no device fits, or the predicted device has no room in the mirror (a
// bound pod whose claim was deleted still holds it); kDraDeviceOfOtherProject when it holds
// another project's pods (restricted sharing, shared offerings); kFits otherwise, and
// where the walk cannot be predicted (bind verifies the device then), with the reason in
// `no_prediction` (when given; left alone otherwise). FilterNodes applies it to the nodes
// that pass.
FitReason DraPredictedVerdict(const ClusterState& state, const Offering& offering,
                              ProjectId project, const NodeState* node,
                              std::string* no_prediction = nullptr);
// DraPredictedVerdict as the room row tells it (RoomRow::dra, any value but kDraRowReadNode,
// where the node must be read): what FilterNodes uses, so that a DRA candidate costs no read
// of its node. kFits for kDraRowNone (not DRA-backed).
FitReason DraRowVerdict(int32_t dra, ProjectId project);

// Filter over the candidate list: CheckNode per node, then the cross-node affinity rule (I3):
// for a time-sliced request, when some candidate node has a unit owned by the project with a
// free ticket, every candidate that would have to open a new unit fails kAffinityElsewhere.
// `nodes[i]` may be null (unknown). Result is parallel to `nodes`.
struct FilterOutcome {
  std::vector<NodeFit> fits;
  // Time-sliced only: the project owns units with free tickets, but on none of the candidates
  // (so a passing node opens a new unit: an affinity spill, counted in metrics).
  bool spill_outside_candidates = false;
  // DRA mode, shared offerings: the candidates (index into `nodes`) that DraPredictedVerdict
  // passed with no prediction, and why. The affinity rule may still refuse them (`fits`).
  std::vector<std::pair<size_t, std::string>> dra_unpredicted;
};
FilterOutcome FilterNodes(const ClusterState& state, const PodRequest& request,
                          const std::vector<const NodeState*>& nodes);
// The same, calling `on_fit(i)` for every node that CheckNode accepts, right after checking it
// (while its memory is still in cache: prioritize scores there), before the cross-node rule
// may still turn it into kAffinityElsewhere; callers keep only what `fits` finally accepts.
FilterOutcome FilterNodes(const ClusterState& state, const PodRequest& request,
                          const std::vector<const NodeState*>& nodes,
                          absl::FunctionRef<void(size_t)> on_fit);
// The same with the nodes' slots in the room tables given (`slots[i]` == SlotsOf(nodes)[i]):
// callers that look the same candidates up again and again keep both, and a filter then
// reads the dense rows (ClusterState::RoomRows) instead of the nodes.
FilterOutcome FilterNodes(const ClusterState& state, const PodRequest& request,
                          const std::vector<const NodeState*>& nodes,
                          const std::vector<uint32_t>& slots,
                          absl::FunctionRef<void(size_t)> on_fit);
// Each node's NodeState::slot, ClusterState::kUnknownSlot for null.
std::vector<uint32_t> SlotsOf(const std::vector<const NodeState*>& nodes);

}  // namespace gse

#endif  // GSE_SCORING_FEASIBILITY_H_
