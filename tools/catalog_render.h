// The catalog renders the rest of the platform and checks it for drift (issue 7).
//
// Render: pure functions from a Catalog to YAML text (deterministic: catalog order, fixed
// formatting), for `gpu-slice-extender catalog render --what=...`:
//   device-classes      DRA DeviceClass objects (resource.k8s.io/v1), one per offering with a
//                       deviceClass, spec.extendedResourceName = the offering's resource and a
//                       CEL selector on the NVIDIA DRA driver's attributes (DeviceClassCel),
//                       annotated with the DRA node label (kDraNodeLabelAnnotation)
//   resource-quotas     one ResourceQuota template "gpu-quota" listing every quota key at "0"
//   kubeflow            the Kubeflow notebook spawner's GPU vendor list (limitsKey, uiName)
//   scheduler-extender  the managedResources block of a KubeSchedulerConfiguration extender
//
// Check: functions that append problems to a CheckReport, for `catalog check`. A problem is
// one line naming the file and the field: "error: FILE: FIELD: message". Errors are drift
// that breaks scheduling or quotas; warnings are facts worth knowing that break nothing by
// themselves (an offering no node advertises yet). The CLI fails on errors, and with --strict
// on warnings too.
//
// Everything here is pure (no I/O, no globals) and thread-compatible.
#ifndef GSE_TOOLS_CATALOG_RENDER_H_
#define GSE_TOOLS_CATALOG_RENDER_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "state/catalog.h"

namespace gse {

// ---------------------------------------------------------------------------------------
// Render

enum class RenderTarget { kDeviceClasses, kResourceQuotas, kKubeflow, kSchedulerExtender };

// "device-classes", "resource-quotas", "kubeflow", "scheduler-extender", in that order.
std::vector<std::string> RenderTargetNames();
// InvalidArgument naming the valid targets for anything else.
absl::StatusOr<RenderTarget> ParseRenderTarget(absl::string_view what);

// YAML for the target; a multi-document stream for device-classes.
std::string RenderCatalog(const Catalog& catalog, RenderTarget target);

// The CEL expression that selects an offering's devices from the NVIDIA DRA driver
// (driver gpu.nvidia.com, PROTOCOL.md §6):
//   device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'
//     && device.attributes['gpu.nvidia.com'].profile == '1g.5gb'
// plus, for an offering with a product, a match of the DRA productName attribute against the
// product prefix. The catalog's product is a GPU feature discovery label value, in which GFD
// replaced every space of the NVML name by '-' ("NVIDIA A100-SXM4-40GB" becomes label
// "NVIDIA-A100-SXM4-40GB"); the DRA attribute keeps the NVML name. A '-' of the prefix may
// therefore stand for either, and the prefix becomes the RE2 pattern '^NVIDIA[ -]A100'
// (matches(), a standard CEL function) rather than a startsWith() that would have to guess.
std::string DeviceClassCel(const Offering& offering);

// ---------------------------------------------------------------------------------------
// Check

enum class Severity { kError, kWarning };

struct CheckProblem {
  Severity severity = Severity::kError;
  std::string file;   // path as given, or "built-in catalog"
  std::string field;  // e.g. extenders[0].managedResources[3].name, nodes/a100-1: ...
  std::string message;
  // "error: FILE: FIELD: message" (or "warning: ..."), one line.
  std::string Line() const;
};

class CheckReport {
 public:
  void Error(std::string file, std::string field, std::string message);
  void Warning(std::string file, std::string field, std::string message);
  const std::vector<CheckProblem>& problems() const { return problems_; }
  int errors() const;
  int warnings() const;
  // Whether `catalog check` exits 1: any error, or with `strict` any warning.
  bool Failed(bool strict) const { return errors() > 0 || (strict && warnings() > 0); }

 private:
  std::vector<CheckProblem> problems_;
};

// The catalog on its own: two offerings publishing one DeviceClass or one quota key (errors:
// a DeviceClass has one extendedResourceName, a quota key one unit), an exclusive offering
// without a deviceClass (warning: render skips it), a time-sliced or MPS offering with one
// (warning: DRA gives every pod's extended-resource claim a whole device, so the sharing does
// not happen on the nodes the class serves; docs/dra.md). `catalog_name` names the file in
// messages.
void CheckCatalog(const Catalog& catalog, const std::string& catalog_name, CheckReport* report);

// A KubeSchedulerConfiguration (YAML) against the catalog:
//  * kube-scheduler's own validation of `extenders` (PROTOCOL.md §3), with its messages:
//    positive weight when prioritizeVerb is set, at most one bindVerb, every managed name a
//    valid extended resource name, no name managed twice across all extenders; plus the
//    strict decoding of the entries (unknown fields, wrong types);
//  * the gpu-slice-extender entry (urlPrefix containing "gpu-slice-extender", else the one
//    entry managing catalog names): every catalog name managed (errors name missing
//    resources and unmanaged aliases separately), no managed name the catalog lacks,
//    ignoredByScheduler false (error), ignorable true and percentageOfNodesToScore other than
//    100 (warnings: they weaken the invariants, kube-scheduler accepts them).
// `score_all_pods` (catalog check --score-all-pods, for an extender run with
// --score-all-pods): the entry is meant to have no managedResources, so that kube-scheduler
// sends it every pod; a list is then the error instead of its absence.
// Unparseable YAML is an error of the file, not an exception.
void CheckSchedulerConfig(const Catalog& catalog, const std::string& catalog_name,
                          absl::string_view config_yaml, const std::string& config_file,
                          CheckReport* report, bool score_all_pods = false);

// What a node advertises: the fields of a Node that the check reads (state/k8s_objects.h
// decodes them; kept separate so that this layer does not depend on the JSON decoder).
struct NodeAdvertisement {
  std::string name;
  std::map<std::string, std::string> labels;
  std::map<std::string, int64_t> allocatable_milli;  // status.allocatable
};

// Nodes (from a snapshot) against the catalog:
//  * error: a node's allocatable names a GPU resource the catalog does not know. A GPU
//    resource is a name of the device plugin's (nvidia.com/gpu*, nvidia.com/mig-*) or any
//    extended resource with a GPU feature discovery label under its base name
//    (<name>.count|.product|.replicas|.sharing-strategy|.memory, ".shared" removed). Other
//    nvidia.com names (the network operator's rdma/sriov devices) are not GPUs and are
//    ignored.
//  * warning: an offering that no node advertises (by name or alias, any value);
//  * warning: a node advertises an offering that the mirror will treat as unusable (product
//    label not matching the offering's product; an exclusive offering time-sliced on the
//    node; a shared offering with replicas 1 on the node), the same rules as ClusterState.
void CheckNodes(const Catalog& catalog, const std::string& catalog_name,
                const std::vector<NodeAdvertisement>& nodes, const std::string& snapshot_file,
                CheckReport* report);

}  // namespace gse

#endif  // GSE_TOOLS_CATALOG_RENDER_H_
