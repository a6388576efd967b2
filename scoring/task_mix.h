// The task mix that the service's fgd scores against, learned online from the pods the
// extender is asked about (docs/fgd.md, "The task mix").
//
// TaskMixLearner keeps one class per (resource, amount, products) with an exponentially
// decaying weight — each new pod counts 1, every earlier one 2^(-1/half_life) less per pod
// seen since — and the decayed mean cpu and memory of its pods. It starts from a seed (the
// catalog's offerings, or a file's classes) worth `seed_pods` pods, which fades as real pods
// arrive. A pod counts once however often kube-scheduler asks about it (its UID is
// remembered among the last kRecentUids).
//
// LearnedFgdPolicy is fgd over the learner's current mix: every `republish_every` new pods
// it builds a fresh fgd policy from the mix (MakeFragmentationPolicy), with the host demand
// of pods without a GPU that the mirror saw arrive (ClusterState::recent_host_demand;
// FragmentationOptions::other_*), and swaps it in; a
// decision uses the policy current when it started (PlacementPolicy::Snapshot), so one
// filter/prioritize/bind never mixes two.
// Thread-safe: any number of threads may observe and decide at once.
#ifndef GSE_SCORING_TASK_MIX_H_
#define GSE_SCORING_TASK_MIX_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "scoring/fragmentation_policy.h"
#include "scoring/policies.h"
#include "state/catalog.h"

namespace gse {

struct TaskMixOptions {
  double half_life_pods = 2000;  // a pod weighs half as much after this many newer pods
  double seed_pods = 100;        // what the seed weighs at the start, in pods
  size_t max_classes = 64;       // the lightest class leaves when a new one needs room
  int64_t republish_every = 64;  // new pods between rebuilds of the policy
};

// A task mix file: {"tasks":[{"resource":"nvidia.com/gpu","amount":1,"weight":3,
// "cpu":"8","memory":"32Gi","products":["NVIDIA-A100-SXM4-80GB"]}, ...]}; every field but
// "resource" optional (amount 1, weight 1, no cpu/memory, any product). Errors name the
// task index and the field; resources and amounts are checked by MakeFragmentationPolicy.
absl::StatusOr<std::vector<TaskClass>> ParseTaskMix(absl::string_view json);

class TaskMixLearner {
 public:
  static constexpr size_t kRecentUids = 8192;
  TaskMixLearner(std::vector<TaskClass> seed, TaskMixOptions options);

  // Counts the pod `uid` asking for `pod` (resource, amount, products, cpu_milli,
  // memory_milli; weight ignored) unless it was counted already. Returns true when counted.
  bool Observe(absl::string_view uid, const TaskClass& pod);
  // The classes with their current weights (summing to 1) and mean cpu/memory.
  std::vector<TaskClass> Current() const;
  // Pods counted so far.
  int64_t observed() const;

 private:
  using Key = std::tuple<std::string, int64_t, std::vector<std::string>>;
  struct Sums {
    double weight = 0;
    double cpu = 0;     // weight-scaled sums of the pods' cpu and memory
    double memory = 0;
  };
  void Renormalise() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const TaskMixOptions options_;
  const double growth_;  // 2^(1/half_life): the next pod's weight over this one's

  mutable absl::Mutex mu_;  // guards the classes, the weight scale and the recent UIDs
  std::map<Key, Sums> classes_ ABSL_GUARDED_BY(mu_);
  double next_weight_ ABSL_GUARDED_BY(mu_) = 1;  // decay as growth of the newest weight
  absl::flat_hash_set<std::string> recent_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> recent_order_ ABSL_GUARDED_BY(mu_);
  int64_t observed_ ABSL_GUARDED_BY(mu_) = 0;
};

// The class a pod falls in: its offering's resource, amount and required GPU products, and
// its cpu (milli) and memory (bytes x 1000). False for a pod without a catalog resource.
bool TaskOfRequest(const Catalog& catalog, const PodRequest& request,
                   const std::vector<std::string>& products, TaskClass* out);

// The GPU products (label nvidia.com/gpu.product) a pod accepts, sorted, as its task class
// records them: the nodeSelector's value; else, when every required node-affinity term
// restricts the label with In, the union of those values (terms are ORed); else none, any
// product. Pods that pin a model by affinity (the common form for "A100 or H100") would
// otherwise teach fgd a mix in which they fit everywhere.
std::vector<std::string> AcceptedGpuProducts(const PodObject& pod);

class LearnedFgdPolicy final : public PlacementPolicy {
 public:
  // The learner's mix with `host_free` (MirrorHostFree in the service) and `twins`
  // (FragmentationOptions::twins: none in a cluster, the replayer's physical twins in a
  // replay); fails when the seed does not make a valid policy.
  static absl::StatusOr<std::unique_ptr<LearnedFgdPolicy>> Create(
      std::shared_ptr<const Catalog> catalog, std::vector<TaskClass> seed, TaskMixOptions options,
      HostFreeFn host_free, std::vector<std::pair<std::string, std::string>> twins = {});

  absl::string_view name() const override { return "fgd"; }
  int64_t Score(const ClusterState& state, const PodRequest& request,
                const NodeState& node) const override {
    return Current()->Score(state, request, node);
  }
  absl::StatusOr<Assignment> ChooseUnits(const ClusterState& state, const PodRequest& request,
                                         const NodeState& node) const override {
    return Current()->ChooseUnits(state, request, node);
  }
  std::shared_ptr<const PlacementPolicy> Snapshot() const override { return Current(); }
  // Learns the pod's class; the next publish uses the latest outlook's ratio of the host
  // demand of pods without a GPU to that of GPU pods (FragmentationOptions::other_*) and its
  // open units (FragmentationOptions::open_units).
  void ObservePending(const PodObject& pod, const PodRequest& request,
                      const ClusterOutlook& outlook) const override;
  bool DecidesOutrightSeeingEveryPod() const override { return true; }  // as fgd

  const TaskMixLearner& learner() const { return learner_; }
  // The ratios of the policy in use (metrics): cpu and memory asked by pods without a GPU per
  // unit asked by GPU pods, among the mirror's recent arrivals (FragmentationOptions::other_*).
  std::pair<double, double> OtherHostDemand() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  LearnedFgdPolicy(std::shared_ptr<const Catalog> catalog, std::vector<TaskClass> seed,
                   TaskMixOptions options, HostFreeFn host_free,
                   std::vector<std::pair<std::string, std::string>> twins);
  std::shared_ptr<const PlacementPolicy> Current() const;

  const std::shared_ptr<const Catalog> catalog_;
  const TaskMixOptions options_;
  const HostFreeFn host_free_;
  const std::vector<std::pair<std::string, std::string>> twins_;
  // Observing is what a policy may do while deciding stays const (PlacementPolicy::
  // ObservePending): the learner and the published policy are internally synchronised.
  mutable TaskMixLearner learner_;

  mutable absl::Mutex mu_;
  // The fgd policy over the mix as last published, and the pods counted since.
  mutable std::shared_ptr<const PlacementPolicy> current_ ABSL_GUARDED_BY(mu_);
  mutable int64_t since_publish_ ABSL_GUARDED_BY(mu_) = 0;
  // The ratios current_ was built with (FragmentationOptions::other_*).
  mutable double other_cpu_ ABSL_GUARDED_BY(mu_) = 0;
  mutable double other_memory_ ABSL_GUARDED_BY(mu_) = 0;
};

// The policies the service can run (--policy): PolicyNames() and "fgd".
std::vector<std::string> ServicePolicyNames();
struct ServicePolicyOptions {
  std::vector<TaskClass> fgd_seed;  // empty: CatalogTaskMix
  TaskMixOptions fgd_mix;
  // Physical twins (FragmentationOptions::twins): the replayer's, to run the service's fgd on
  // its traces; empty in the service.
  std::vector<std::pair<std::string, std::string>> fgd_twins;
};
// PolicyNames()' policies, and "fgd": LearnedFgdPolicy seeded from `options.fgd_seed` with the
// mirror's host view (MirrorHostFree). The decision core hands the policy the state it holds
// the lock on, so the host view and the units are read in one consistent view.
absl::StatusOr<std::unique_ptr<PlacementPolicy>> MakeServicePolicy(
    absl::string_view name, std::shared_ptr<const Catalog> catalog,
    ServicePolicyOptions options = {});

}  // namespace gse

#endif  // GSE_SCORING_TASK_MIX_H_
