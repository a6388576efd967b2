// Placement policies: score a feasible node 0..10 and choose the units on the chosen node.
//
// Contract of every policy: ChooseUnits picks units that CheckNode accepts, and on an
// unchanged state the node with the best Score is the one whose ChooseUnits result the score
// described (the unit chosen at bind is the one the scores favoured). Policies are stateless
// and thread-safe; they read a const ClusterState and do no I/O.
#ifndef GSE_SCORING_POLICIES_H_
#define GSE_SCORING_POLICIES_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "scoring/feasibility.h"
#include "scoring/pod_request.h"
#include "state/assignment.h"
#include "state/cluster_state.h"

namespace gse {

inline constexpr int64_t kMaxExtenderPriority = 10;

// What filter read of the mirror for a policy that learns (PlacementPolicy::ObservePending).
struct ClusterOutlook {
  // ClusterState::recent_host_demand(); all zero when every pod comes to the extender
  // (DecisionCore::Options::every_pod): those pods are the policy's own placements.
  ClusterState::RecentHostDemand recent_host_demand;
  std::vector<int64_t> open_units;  // ClusterState::open_units(); empty when every pod comes
};

class PlacementPolicy {
 public:
  virtual ~PlacementPolicy() = default;
  virtual absl::string_view name() const = 0;
  // 0..10 for a node where CheckNode fits; 0 for any other node.
  virtual int64_t Score(const ClusterState& state, const PodRequest& request,
                        const NodeState& node) const = 0;
  // Score of a node that FilterNodes accepted for `request` on this same state, with the
  // request's project already looked up (state.FindProject(request.project)). Prioritize
  // filters first, so a policy may skip re-checking the node; the default re-checks (Score).
  virtual int64_t ScoreFiltered(const ClusterState& state, const PodRequest& request,
                                ProjectId project, const NodeState& node) const {
    return Score(state, request, node);
  }
  // ScoreFiltered from the node's row in the request offering's room table
  // (ClusterState::RoomRows) alone, when the row holds everything the policy reads; nullopt
  // otherwise, and the caller asks ScoreFiltered. A 5,000-node prioritize then reads the
  // nodes themselves only where it must. The default never can.
  virtual std::optional<int64_t> ScoreFilteredRow(const ClusterState& state,
                                                  const PodRequest& request, ProjectId project,
                                                  const RoomRow& row) const {
    (void)state, (void)request, (void)project, (void)row;
    return std::nullopt;
  }
  // The units to reserve on `node`; FailedPrecondition with a reason when none fit.
  virtual absl::StatusOr<Assignment> ChooseUnits(const ClusterState& state,
                                                 const PodRequest& request,
                                                 const NodeState& node) const = 0;
  // A policy that changes as it learns (fgd's task mix, scoring/task_mix.h) returns the
  // policy to decide one call with, so that a prioritize or bind never mixes two versions;
  // nullptr (the default) means this policy itself.
  virtual std::shared_ptr<const PlacementPolicy> Snapshot() const { return nullptr; }
  // Called by filter with each pod kube-scheduler asks about (any number of times per pod),
  // outside the mirror's locks, with what filter read of the mirror (ClusterOutlook). A
  // policy that learns from them must be thread-safe.
  virtual void ObservePending(const PodObject& pod, const PodRequest& request,
                              const ClusterOutlook& outlook) const {
    (void)pod, (void)request, (void)outlook;
  }
  // Whether, when kube-scheduler sends the extender every pod (DecisionCore::Options::
  // every_pod), this policy's best node should win outright rather than share the decision
  // with kube-scheduler's in-tree scores (DecisionCore::Prioritize says how). A policy that
  // sees every pod's cpu and memory can pack the host as well as the GPUs; the in-tree
  // NodeResourcesFit (LeastAllocated) spreads instead and undoes that packing.
  virtual bool DecidesOutrightSeeingEveryPod() const { return false; }
};

// "affinity-pack": the project's partly filled unit first (fullest first), then nodes
//   where the project already owns units, then packing that keeps whole GPUs and nodes free.
// "spread": least loaded node and unit first (still honours project affinity inside a node).
std::vector<std::string> PolicyNames();
absl::StatusOr<std::unique_ptr<PlacementPolicy>> MakePolicy(absl::string_view name);

}  // namespace gse

#endif  // GSE_SCORING_POLICIES_H_
