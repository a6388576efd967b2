// Fragmentation-aware placement ("fgd") and a BestFit comparator ("bestfit").
//
// "fgd" re-derives Fragmentation Gradient Descent (Weng et al., USENIX ATC'23) for the
// extender's units. The idle capacity of a node is a set of devices: a whole GPU, a MIG slice
// (worth g/7 of a GPU for a "<g>g.*" profile), each with what is free on it (a free exclusive
// unit, free MPS shares, an empty time-sliced unit). Given the expected task mix M (task
// classes with popularity p_t), the fragmentation of a node is
//     F(node) = sum_t p_t * frag_t(node)
//     frag_t  = all idle capacity of the node,            when task t fits nowhere on it
//             = idle capacity on devices that cannot host t, when it fits
// i.e. the idle GPU capacity that the task mix is expected not to be able to use. A placement
// is scored by how little it increases F (the "gradient" of the cluster's fragmentation is the
// node's delta, since other nodes are unchanged); on the node, ChooseUnits takes the unit whose
// placement increases F least, so the score describes exactly the units bind will reserve.
//
// Host resources (FragmentationOptions::host_free, where the caller knows free cpu/memory):
// a task that lacks cpu or memory on a node fits nowhere on it (FGD's "lack CPU" quadrants),
// and a placement is also charged the change of the node's *starved* capacity: the idle GPU
// capacity that its free cpu and memory cannot feed at the mix's mean cpu and memory per GPU
// (plus what the pods taking no GPU ask for beside them, FragmentationOptions::other_*).
// F only sees the cliff where a task stops fitting; the starved term sees the approach to it,
// so that cpu-hungry pods go where cpu is plentiful relative to idle GPUs. Both are in GPUs.
//
// Pods that ask for no catalog resource (a deployment that sends every pod to the extender):
// Score(request with offering kNoOffering) is fgd's value of the pod's cpu/memory alone (the
// devices do not change; 0 on a node without idle GPUs), from the request's own cpu/memory
// (PodRequest::host); without a host view, and for "fgd-gpu" and "bestfit", every node
// scores alike (5 and 0).
//
// Twins: an offering pair (exclusive, mps) whose unit i on a node is the same physical GPU
// (the replayer's openb mapping advertises every GPU both ways; see docs/replay.md). Such a
// device's idle capacity is the larger of its two views, never their sum.
//
// "bestfit" scores by the idle capacity the node has left after the placement (less is
// better) and takes the fullest unit that fits; like the FGD paper's BestFit, but GPU-only
// (the extender sees no CPU).
//
// Scores are integers 0..10 (kube-scheduler's extender range): fgd round(10 / (1 + e^(1.5 x)))
// with x its value above (GPUs; FGD's sigmoid, steeper for 11 levels), bestfit a bucket of the
// capacity left (finer near 0).
// Both policies are stateless toward callers and thread-safe; "fgd" memoises F per node state
// (its devices in unit order) behind a reader/writer mutex (bounded by entries and key bytes,
// cleared when full), and keeps prioritize's score of each node (ScoreFiltered) per node slot
// under the node's NodeState::version and the request's shape, lock-free; a policy with
// another host view than MirrorHostFree (whose inputs the version may not cover) keeps none.
#ifndef GSE_SCORING_FRAGMENTATION_POLICY_H_
#define GSE_SCORING_FRAGMENTATION_POLICY_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "scoring/policies.h"
#include "state/catalog.h"
#include "state/cluster_state.h"

namespace gse {

// One class of the expected task mix.
struct TaskClass {
  std::string resource;  // catalog resource name (or alias) the task requests
  int64_t amount = 1;    // units (exclusive), shares (mps), 1 (time-sliced)
  // GPU products the task may run on (prefix of the node's nvidia.com/gpu.product, as catalog
  // products are matched); empty = any.
  std::vector<std::string> products;
  double weight = 1;  // popularity; normalised over the mix
  // Host resources the task asks for besides the GPU (milli-cpu, bytes x 1000), used only
  // with FragmentationOptions::host_free; 0 = none.
  int64_t cpu_milli = 0;
  int64_t memory_milli = 0;
};

// Free cpu and memory of `node` (milli-units) on `state`, the view the policy is deciding on,
// when the caller knows them; false = unknown. Called under whatever lock the caller holds
// on `state` (the Mirror's reader or writer lock): it must not take the Mirror's locks.
using HostFreeFn = std::function<bool(const ClusterState& state, const NodeState& node,
                                      int64_t* cpu_milli, int64_t* memory_milli)>;

// The mirror's own host view (ClusterState::HostFree: allocatable minus the requests of the
// pods bound there and of our reservations in flight) in the policy's units: milli-cpu and
// memory bytes x 1000. What the service and the in-process replay hand to fgd.
bool MirrorHostFree(const ClusterState& state, const NodeState& node, int64_t* cpu_milli,
                    int64_t* memory_milli);

struct FragmentationOptions {
  std::vector<TaskClass> tasks;
  // (exclusive offering, mps offering) pairs whose unit i on a node is one device.
  std::vector<std::pair<std::string, std::string>> twins;
  // Optional host view (MirrorHostFree for the service and the in-process replay). Where the
  // free cpu and memory of nodes are known, a task that lacks them on a node counts all the
  // node's idle GPU capacity as fragment, as FGD's "lack CPU" quadrants do, the starved
  // capacity counts (above), and a placement takes the pod's own cpu/memory
  // (PodRequest::host), or the mean of its task class for a request built without a pod.
  HostFreeFn host_free;
  // The cpu and memory that pods taking no GPU ask for, per unit the mix's own tasks ask for
  // (finite, 0 to kMaxOtherHostDemand; 0: none expected). They land beside the GPUs too, so
  // the starved term feeds each idle GPU the mix's cpu and memory per GPU times (1 + this).
  // The service's fgd reads it from the mirror's recent arrivals (ClusterState::
  // recent_host_demand; docs/fgd.md, "Pods beside the GPUs").
  double other_cpu_per_task_cpu = 0;
  double other_memory_per_task_memory = 0;
  // The cluster's open units per offering (ClusterState::open_units(), by OfferingId; empty:
  // unknown). The starved term counts each pool's idle capacity by how much the mix asks of
  // it per unit of capacity, relative to the pool most asked of (1 for that pool, and for
  // every pool when empty): idle capacity that no expected task comes for needs no cpu
  // beside it (docs/fgd.md, "Pools the mix asks little of").
  std::vector<int64_t> open_units;
};
// The largest FragmentationOptions::other_*: a bound against nonsense (100 times the GPU
// pods' own demand already leaves every idle GPU of any real node starved).
inline constexpr double kMaxOtherHostDemand = 100;

// Validates the options against the catalog (known resources, amounts within the offering,
// twins exclusive+mps of unit kind gpu). Errors name the task index or twin and the field.
absl::StatusOr<std::unique_ptr<PlacementPolicy>> MakeFragmentationPolicy(
    std::shared_ptr<const Catalog> catalog, FragmentationOptions options);
absl::StatusOr<std::unique_ptr<PlacementPolicy>> MakeBestFitPolicy(
    std::shared_ptr<const Catalog> catalog,
    std::vector<std::pair<std::string, std::string>> twins);

// The task mix seeded from the catalog alone: one class per offering, one unit (or share,
// or ticket) of it, equal popularity, no host demand. What the service's fgd assumes until
// it is told better; without host demand in the mix, the host view only decides where a task
// lacks cpu/memory for nothing at all.
std::vector<TaskClass> CatalogTaskMix(const Catalog& catalog);

// The same model, for reports: fragmentation and idle capacity in GPU-equivalents.
class FragmentationModel {
 public:
  static absl::StatusOr<FragmentationModel> Create(std::shared_ptr<const Catalog> catalog,
                                                   FragmentationOptions options);
  FragmentationModel(FragmentationModel&&) noexcept;
  FragmentationModel& operator=(FragmentationModel&&) noexcept;
  ~FragmentationModel();

  double NodeFragmentation(const ClusterState& state, const NodeState& node) const;
  double NodeIdle(const NodeState& node) const;
  // Sums over every node that is not removed.
  double ClusterFragmentation(const ClusterState& state) const;
  double ClusterIdle(const ClusterState& state) const;

  struct Impl;
  const Impl& impl() const { return *impl_; }

 private:
  explicit FragmentationModel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gse

#endif  // GSE_SCORING_FRAGMENTATION_POLICY_H_
