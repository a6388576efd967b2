// Synthetic clusters at production size for benchmarks and load tests: N nodes x 8 GPUs, a
// mix of MIG-partitioned A100s (small slices time-sliced, larger slices exclusive) and
// whole-GPU H100s, with namespaces per project, ResourceQuotas, and pods already bound with
// assignment annotations (so the mirror is rebuilt exactly as after a restart).
//
// Output is a `kubectl get ... -o json` style List, the same input path as a live cluster.
// Deterministic for a given spec (seeded).
#ifndef GSE_PERF_SYNTHETIC_CLUSTER_H_
#define GSE_PERF_SYNTHETIC_CLUSTER_H_

#include <cstdint>
#include <string>
#include <vector>

namespace gse::perf {

struct SyntheticClusterSpec {
  int nodes = 5000;
  int gpus_per_node = 8;
  // Fraction of nodes whose GPUs are MIG-partitioned: half of each such node's GPUs as 7 x
  // 1g.5gb time-sliced `replicas` ways, the other half as 2 x 3g.20gb exclusive.
  double mig_fraction = 0.5;
  int replicas = 4;
  int projects = 40;
  int bound_pods = 150000;
  uint64_t seed = 1;
};

// The whole cluster as one List document.
std::string SyntheticClusterJson(const SyntheticClusterSpec& spec);
// Node names in index order ("node-00000", ...).
std::vector<std::string> SyntheticNodeNames(const SyntheticClusterSpec& spec);
// One Node object (no kind/apiVersion, as kube-scheduler embeds them) for filter bodies with
// nodeCacheCapable: false.
std::string SyntheticNodeJson(const SyntheticClusterSpec& spec, int index);
// A pending pod (no kind/apiVersion) asking for `amount` of `resource` in namespace `ns`.
std::string PendingPodJson(const std::string& ns, const std::string& name, const std::string& uid,
                           const std::string& resource, int amount);
// Namespace of project p ("proj-007").
std::string ProjectNamespace(int project);

}  // namespace gse::perf

#endif  // GSE_PERF_SYNTHETIC_CLUSTER_H_
