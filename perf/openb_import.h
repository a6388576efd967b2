// Importer for the Alibaba openb traces (cluster-trace-gpu-v2023, ../shared/traces/
// alibaba-gpu-v2023/) into the replayer's trace format (trace.h). The mapping is documented in
// docs/replay.md; in short:
//
// Default mapping (GPU sharing by MPS):
//  * a node advertises its G GPUs twice, as nvidia.com/gpu (exclusive) and as
//    nvidia.com/gpu.mps (MPS, `mps_replicas` shares each, default 100 = 1% of a GPU); unit i
//    of both is GPU i (header twins), and the replayer's node agent marks a GPU's other half
//    taken while one half is in use. Labels: nvidia.com/gpu.product = the openb model (G2, T4,
//    ...), nvidia.com/gpu.count, alibabacloud.com/gpu-card-model; cpu, memory, pods 1001 (as
//    openb_node_list_gpu_node.yaml).
//  * a pod with num_gpu n and gpu_milli 1000 asks for n x nvidia.com/gpu; a sharing pod
//    (gpu_milli < 1000) for ceil(gpu_milli * mps_replicas / 1000) shares of nvidia.com/gpu.mps;
//    gpu_spec "A|B" becomes required node affinity nvidia.com/gpu.product In [A, B].
// MIG mapping (`mig`):
//  * models T4, P100, V100M16, A10 become NVIDIA-A100-SXM4-40GB, the others (V100M32, G2, G3)
//    NVIDIA-H100-80GB-HBM3 (label nvidia.com/gpu.product; the openb model stays in
//    alibabacloud.com/gpu-card-model, where gpu_spec affinity points). The last ceil(G/4) GPUs
//    of a node are MIG-partitioned, the others stay whole (nvidia.com/gpu, "mixed" strategy).
//    MIG GPUs alternate, in node file order, between layout A = 4g + 3g and layout B = 7g
//    (A100: 4g.20gb+3g.20gb | 7g.40gb; H100: 4g.40gb+3g.40gb | 7g.80gb); every slice is
//    time-sliced `ts_replicas` ways (nvidia.com/mig-<profile>.shared).
//  * whole-GPU pods ask for nvidia.com/gpu; a sharing pod asks for one ticket of the smallest
//    profile g with g/7 >= gpu_milli/1000 (7g when none smaller fits) of one family: the family
//    its gpu_spec allows, else drawn (seeded) in proportion to the families' MIG GPUs.
//  * GPU allocation counts what a pod reserves: whole GPUs, and for a ticket its slice's g/7
//    divided by `ts_replicas` (the resampling still stops at `load` of the original requests).
//  * every project gets a ResourceQuota: requests.<resource> = ceil(quota_factor x share x
//    cluster total) for nvidia.com/gpu and every time-sliced offering (tickets).
// Both: the FGD method (load > 0): pods are drawn uniformly with replacement (seeded) until
// the drawn GPU request reaches load x cluster GPUs, then submitted in file order (copies
// named <name>-c<k>); load <= 0 replays the file once as it is. Projects: each pod's project
// is drawn (seeded, separate stream) with probabilities proportional to the Helios Earth VC
// GPU quotas (the mean over the file's days of each VC column; VCs whose mean is 0 dropped);
// namespace = lower-cased VC name, labelled gpu.themelio.io/project=<VC>.
#ifndef GSE_PERF_OPENB_IMPORT_H_
#define GSE_PERF_OPENB_IMPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "perf/trace.h"

namespace gse::replay {

struct OpenbNode {
  std::string name;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  int32_t gpus = 0;
  std::string model;
};

struct OpenbPod {
  std::string name;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  int32_t num_gpu = 0;
  int32_t gpu_milli = 0;
  std::vector<std::string> gpu_spec;  // allowed models; empty = any
  double GpuRequest() const { return num_gpu * gpu_milli / 1000.0; }
};

struct ProjectShare {
  std::string name;  // the VC name
  double weight = 0;
};

// CSV parsers. Errors: "<origin>:<line>: <column>: <reason>".
absl::StatusOr<std::vector<OpenbNode>> ParseOpenbNodes(absl::string_view csv, absl::string_view origin);
absl::StatusOr<std::vector<OpenbPod>> ParseOpenbPods(absl::string_view csv, absl::string_view origin);
// Helios Earth_gpu_number.csv: date, one column per VC, total.
absl::StatusOr<std::vector<ProjectShare>> ParseHeliosQuotas(absl::string_view csv,
                                                            absl::string_view origin);

struct OpenbOptions {
  bool mig = false;
  int32_t mps_replicas = 100;
  int32_t ts_replicas = 4;
  double load = 1.3;          // <= 0: the file once, in order
  // Submit the drawn pods in a seeded random order instead of file order: the FGD simulator's
  // --shuffle-pod=true, with which its published figures were made.
  bool shuffle = false;
  uint64_t seed = 1;
  double quota_factor = 1.0;  // MIG mapping only; <= 0: no quotas
  std::vector<ProjectShare> projects;  // empty: one project "default"
  std::string source;  // for the trace header
};

struct OpenbImport {
  Trace trace;          // header (catalog, twins) + one objects event + pod_arrive events
  double cluster_gpus = 0;
  double arrived_gpu = 0;  // sum of the pods' GPU requests
};

absl::StatusOr<OpenbImport> ImportOpenb(const std::vector<OpenbNode>& nodes,
                                        const std::vector<OpenbPod>& pods,
                                        const OpenbOptions& options);

}  // namespace gse::replay

#endif  // GSE_PERF_OPENB_IMPORT_H_
