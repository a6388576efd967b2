// DecisionCore: the extender's decisions without a transport — filter, prioritize, reserve
// (bind's commit point) and preempt for a decoded pod and its candidate nodes, on one
// consistent view of the Mirror each.
//
// ExtenderService decodes a request, calls the core and encodes its answer; the replayer's
// in-process placer calls the same core, so both run one pipeline and no rule is written
// twice. Unlike the rest of scoring/ (pure functions over a view), the core takes the
// Mirror's locks: reader lock for Filter, Prioritize and Preempt, the writer lock for
// Reserve, where the unit is chosen and committed in one step (mirror.h).
// Thread-safe: any number of threads may call any method at once.
#ifndef GSE_SCORING_DECISION_CORE_H_
#define GSE_SCORING_DECISION_CORE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "scoring/feasibility.h"
#include "scoring/pod_request.h"
#include "scoring/policies.h"
#include "state/assignment.h"
#include "state/cluster_state.h"
#include "state/dra_objects.h"
#include "state/k8s_objects.h"
#include "state/mirror.h"

namespace gse {

// The label of a request's offering in metrics and logs: its resource name, "none" when the
// pod asks for no catalog resource.
std::string OfferingLabel(const ClusterState& state, const PodRequest& request);

// The candidates as FilterNodes takes them: the nodes (null when unknown) and their slots.
struct CandidateNodes {
  std::vector<const NodeState*> nodes;
  std::vector<uint32_t> slots;
};

struct FilterDecision {
  PodRequest request;
  std::string offering_label;
  // One per candidate, in input order; kFits for every node when the pod is not ours (I6).
  std::vector<FitReason> verdicts;
  // Time-sliced only: the project owns units with free tickets on none of the candidates.
  bool spill_outside_candidates = false;
  // DRA mode, with Filter's `dra_notes` (the decision log's, DraFilterNotes): passing nodes
  // of a shared offering with no prediction of the allocator's pick ("<node>: no prediction:
  // <why>", at most kMaxUnpredictedNotes of them, then one line counting the rest), and
  // "catalog drift: <disagreement>" per DraState::Drift line while a DRA-backed node passed.
  std::vector<std::string> dra_notes;
};

// Why Reserve refused, as bind's metrics count it.
enum class ReserveRefusal {
  kNone,
  kUnitTaken,  // capacity went since filter (or never was), or Reserve's re-check refused
  kQuota,      // project quota exhausted
  kNoFit,      // anything else the node cannot host (unknown node, offering, gate, ...)
  // DRA node: the device the allocator picked breaks an invariant, or its claim is not in the
  // mirror (DraAllocatedUnits): kube-scheduler deletes the claim and retries the pod.
  kDraRefused,
};

struct ReserveDecision {
  // The units reserved (kReserved, to be confirmed or released by the caller), or why not.
  absl::StatusOr<Assignment> assignment = absl::UnknownError("not decided");
  ReserveRefusal refusal = ReserveRefusal::kNone;
  // Time-sliced only: the unit reserved was one the project already held tickets of (its own
  // unit), not a new one. Affinity metrics and the decision log report it.
  bool own_unit = false;
  bool time_sliced = false;
};

// Bind on a DRA node (docs/dra.md, "Verify at bind"): kube-scheduler's allocator picked the
// device(s) and wrote the pod's extended-resource claim before calling bind. The assignment
// is those devices' units, checked against the invariants: the claim is allocated on this node
// with devices of the class there (DraState::VerifyAllocation); an exclusive request holds as
// many devices as it asks and none of them is held by another claim; a shared device holds no
// claim of another project (restricted sharing) and no user-made claim. FailedPrecondition
// with the reason otherwise. ClusterState::Reserve then checks capacity, owner and quota in
// units as on any node.
//
// The claim is the mirror's. Only when the mirror has no allocated, live claim `claim_key` of
// the pod on the node (its claim watch trails kube-scheduler's PreBind) is `read` used: the
// claim as bind read it from the API (DraBindClaim::read), or why that read failed. It is
// checked the same way against the mirror's other claims, and never stored in the mirror: a
// read applied out of the watch's order could be overtaken by an older event of that claim.
// The reservation holds its units until the watch delivers the claim (RechargeDraPods leaves
// reservations and pods that hold their claim's units as they are). A mirror that has
// `claim_key` at a resourceVersion at least as new as the read's wins (CompareResourceVersions).
absl::StatusOr<Assignment> DraAllocatedUnits(const ClusterState& state, const PodClaim& claim,
                                             const PodRequest& request, const NodeState& node,
                                             const NodeOffering& no,
                                             const std::string& claim_key = "",
                                             const absl::StatusOr<DraResourceClaim>* read = nullptr);

// How long bind waits for the pod's extended-resource claim to reach the mirror: the claim
// watch may trail kube-scheduler's PreBind by a moment.
inline constexpr absl::Duration kDraClaimWait = absl::Seconds(1);

// Bind on a DRA node: which claim of the pod to verify, and how to read it when the mirror
// lags (DecisionCore::Reserve).
struct DraBindClaim {
  // "namespace/name" as the pod's status.extendedResourceClaimStatus names it (read from the
  // API at bind): that claim, and no older one the mirror may still hold, is verified. "":
  // unknown; the mirror's only live extended-resource claim of the pod is taken.
  std::string key;
  absl::Duration wait = kDraClaimWait;
  // Reads claim `key` from the API (one GET), called when the mirror has not shown it
  // allocated within `wait` (a claim watch lagging at start-up or under load). nullptr: bind
  // then refuses, and kube-scheduler retries the pod.
  std::function<absl::StatusOr<DraResourceClaim>()> read;
};

// One node kube-scheduler proposes for preemption and the pods (UIDs) it would evict there.
struct VictimProposal {
  absl::string_view node;
  const std::vector<std::string>* uids = nullptr;
};

// How the deployment calls the extender (namespace scope: a default argument of a nested
// struct with member initialisers does not compile in GCC).
struct DecisionCoreOptions {
  // kube-scheduler sends the extender every pod (its extender entry has no
  // managedResources): prioritize scores pods that ask for no catalog resource too, and a
  // policy that DecidesOutrightSeeingEveryPod names the node outright (Prioritize), and
  // the policy keeps no room for pods without a GPU beside idle GPUs (they are its own
  // placements; Filter passes ObservePending no recent host demand).
  bool every_pod = false;
};

class DecisionCore {
 public:
  using Options = DecisionCoreOptions;
  // `mirror` and `policy` must outlive the core.
  DecisionCore(Mirror* mirror, const PlacementPolicy* policy, Options options = {});
  const Options& options() const { return options_; }

  // What `pod` asks for, under the reader lock.
  struct Resolved {
    PodRequest request;
    std::string offering_label;  // OfferingLabel
    bool time_sliced = false;    // the offering is time-sliced (bind reports own/new unit)
  };
  Resolved Resolve(const PodObject& pod) const;

  // filter: the verdict per candidate name (FilterNodes over the looked-up candidates).
  // `dra_notes`: also fill FilterDecision::dra_notes (when the decision log will write them).
  FilterDecision Filter(const PodObject& pod, const std::vector<absl::string_view>& names,
                        bool dra_notes = false);
  static constexpr size_t kMaxUnpredictedNotes = 10;

  // The decision log's notes for a bind of `request` on `node_name` (BindDecision::dra_notes):
  // "catalog drift: <disagreement>" per DraState::Drift line when the node's offering is
  // DRA-backed; empty otherwise.
  std::vector<std::string> DraBindNotes(const PodRequest& request, absl::string_view node_name) const;

  // prioritize: 0..10 per candidate name, 0 where filter fails. The policy scores a node
  // from its room row (ClusterState::RoomRows) where it can, else from the node. With
  // Options::every_pod, a pod that asks for no catalog resource is scored by the policy on
  // every known node (else it scores 0), and for a policy that DecidesOutrightSeeingEveryPod
  // the best node — ties to the lowest name: First Fit in one fixed order — scores 10 and
  // every other score is halved (at most 5). kube-scheduler adds score x weight x 10, so at
  // the shipped weight 5 the winner leads by at least 250, more than the in-tree
  // NodeResourcesFit and BalancedAllocation (weight 1 each, 0..100) can make up.
  std::vector<int64_t> Prioritize(const PodObject& pod, const std::vector<absl::string_view>& names);

  // bind's commit point for an interested, resolvable `request` of `claim`'s pod on
  // `node_name`: under one writer lock, re-check the node (CheckNode), take the group's units
  // behind a closed agent gate or the policy's choice (ChooseUnits), and reserve them. A pod
  // that already holds a reservation on that node gets it back (a retried bind). The pod's
  // cpu/memory (request.host) count in the node's host view from here, before the watch
  // shows the bind (ClusterState "the host view"; docs/fgd.md). On a DRA
  // node (NodeOffering::dra) the units are the devices the allocator picked
  // (DraAllocatedUnits), never the policy's: the extender cannot choose there, only refuse.
  // Bind waits up to `dra.wait` for the pod's claim to reach the mirror, then reads it with
  // `dra.read` (outside the lock) when it did not.
  ReserveDecision Reserve(const PodClaim& claim, const PodRequest& request,
                          const std::string& node_name, const DraBindClaim& dra = {});

  // preempt: for each proposal, whether `pod` fits on its node once its victims are gone.
  // Pods that ask for no catalog resource fit wherever victims are proposed.
  std::vector<bool> Preempt(const PodObject& pod, const std::vector<VictimProposal>& proposals);

  // The candidates named by `names` on `state`, which must come from this core's mirror
  // under a lock held by the caller. kube-scheduler sends the same names pod after pod while
  // the node set is stable: comparing them with the last list is a sequential scan, much
  // cheaper than 5,000 hash lookups, so the last lookup is kept and reused.
  std::shared_ptr<const CandidateNodes> LookUp(const ClusterState& state,
                                               const std::vector<absl::string_view>& names);

  Mirror& mirror() const { return *mirror_; }
  const PlacementPolicy& policy() const { return *policy_; }

 private:
  Mirror* const mirror_;
  const PlacementPolicy* const policy_;
  const Options options_;

  absl::Mutex lookup_mu_;
  // The last lookup: its names back to back, their lengths, what was found, and the
  // ClusterState::node_set_version() the pointers and slots belong to.
  std::string lookup_names_ ABSL_GUARDED_BY(lookup_mu_);
  std::vector<uint32_t> lookup_lengths_ ABSL_GUARDED_BY(lookup_mu_);
  std::shared_ptr<const CandidateNodes> lookup_found_ ABSL_GUARDED_BY(lookup_mu_);
  uint64_t lookup_version_ ABSL_GUARDED_BY(lookup_mu_) = 0;
};

}  // namespace gse

#endif  // GSE_SCORING_DECISION_CORE_H_
