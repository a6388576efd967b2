// FaultCluster: the small, crowded cluster of the randomized fault run (tests/fault_run_test.cc)
// as Kubernetes objects in the FakeApiServer, and the changes a cluster sees while the
// extender works: pods created, deleted, completed, recreated under the same name (a new
// UID, as a StatefulSet does), namespaces relabelled (their project changes), ResourceQuotas
// changed, nodes shrinking and growing back (the device plugin's allocatable).
//
// The cluster (Node objects built from the recorded gpu-node-a of
// shared/protocol/nodelist-2-gpu-nodes.json, GPU feature discovery labels as the device
// plugin writes them):
//   dgx-a   nvidia.com/gpu                4 whole GPUs (exclusive)
//   mig-x   nvidia.com/mig-1g.5gb         4 MIG slices (exclusive)
//   ts-a    nvidia.com/mig-1g.5gb.shared  3 MIG slices x 4 tickets (time-sliced)
//   ts-b    nvidia.com/mig-1g.5gb.shared  3 MIG slices x 4 tickets
//   mps-a   nvidia.com/gpu.mps            2 GPUs x 4 shares (MPS)
// and two DRA nodes (issue 16, docs/dra.md), where the NVIDIA DRA driver publishes the devices
// in a ResourceSlice, DeviceClasses map the same extended resource names, and the test
// allocator (testsupport/dra_allocator.h, driven by SchedulerClients) allocates claims:
//   dra-m   nvidia.com/mig-1g.5gb         4 MIG devices (exclusive), next to mig-x's
//   dra-g   nvidia.com/gpu.shared         2 GPUs x 4 shares (consumable capacity)
// A pod's extended-resource claims go with it: deleting or recreating a pod deletes them (the
// garbage collector follows their owner reference), and so does completing it (the claim
// controller releases a finished pod's claim).
// Namespaces alpha, beta (labelled with their project), gamma (unlabelled: its own project,
// no quota), lab (project alpha) and shared (project beta) — the last two are relabelled during
// the run. ResourceQuotas in alpha, beta and lab. A node shrinks by whole units and keeps its
// `.count` label, as when the device plugin drops an unhealthy device.
//
// Thread-safe as far as FakeApiServer is (every change is one store write or two).
#ifndef GSE_TESTS_TESTING_FAULT_CLUSTER_H_
#define GSE_TESTS_TESTING_FAULT_CLUSTER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "tests/testing/api_audit.h"
#include "testsupport/fake_apiserver.h"

namespace gse::testing {

struct PodPlan {
  std::string namespace_name;
  std::string name;
  std::string resource;  // empty: a pod without GPUs
  int64_t amount = 0;
};

class FaultCluster {
 public:
  // The offerings the run uses, as DESIGN.md and the built-in catalog define them.
  static const std::vector<AuditOffering>& Offerings();
  static const std::vector<std::string>& NodeNames();
  static const std::vector<std::string>& Namespaces();
  // Namespaces whose project label the run changes, and the values it sets ("" = none).
  static const std::vector<std::string>& RelabelledNamespaces();
  static const std::vector<std::string>& ProjectLabelValues();
  // Namespaces with a ResourceQuota ("gpu"), whose hard values the run changes.
  static const std::vector<std::string>& QuotaNamespaces();
  // Nodes whose allocatable the run shrinks and restores (the device-plugin nodes).
  static const std::vector<std::string>& DevicePluginNodes();
  static bool IsDraNode(const std::string& node);
  // What the referee is told of the DRA nodes: devices in the slices' walk order (the
  // extender's unit order) and capacity per device.
  static std::vector<AuditDraNode> DraNodes();
  // Units per node offering at the start, which SetNodeUnits never exceeds.
  static int64_t FullUnits(const std::string& node);
  static std::string ResourceOf(const std::string& node);
  static constexpr const char* kProjectLabel = "gpu.themelio.io/project";

  explicit FaultCluster(FakeApiServer* fake) : fake_(fake) {}

  absl::Status Load();
  absl::Status CreatePod(const PodPlan& pod);
  absl::Status DeletePod(const std::string& key);
  // Deletes the pod and creates it again: same name and spec, a new UID, not bound.
  absl::Status RecreatePod(const std::string& key);
  absl::Status CompletePod(const std::string& key);  // status.phase Succeeded
  absl::Status Relabel(const std::string& namespace_name, const std::string& project);
  absl::Status SetQuota(const std::string& namespace_name, const std::string& resource, int64_t hard);
  // allocatable (and capacity) = units x tickets/shares per unit; labels unchanged.
  absl::Status SetNodeUnits(const std::string& node, int64_t units);
  // The garbage collector: deletes the extended-resource claims whose controller is pod `uid`.
  void DeleteClaimsOf(const std::string& namespace_name, const std::string& uid);

  // Keys (namespace/name), sorted: pods bound and not terminal; pods not bound.
  std::vector<std::string> BoundPods() const;
  std::vector<std::string> PendingPods() const;
  std::vector<std::string> TerminalPods() const;

 private:
  FakeApiServer* const fake_;
};

}  // namespace gse::testing

#endif  // GSE_TESTS_TESTING_FAULT_CLUSTER_H_
