// The unit assignment recorded on a bound pod: the contract with node agents and the key to
// rebuilding the mirror from the API server after a restart.
//
// Annotations (all under gpu.themelio.io/, written in the v1.Binding's metadata so that the API
// server stores them on the pod in the same write as spec.nodeName):
//   gpu.themelio.io/unit        "<node>/<resource>/<i>[,<j>...]"  unit indices on that node, e.g.
//                               "mig-a/nvidia.com/mig-1g.5gb.shared/0" or "h100-1/nvidia.com/gpu/2,3"
//   gpu.themelio.io/amount      tickets (time-sliced, always "1") or shares (mps) per unit;
//                               "1" for exclusive units
//   gpu.themelio.io/sharing     "exclusive" | "time-sliced" | "mps"
//   gpu.themelio.io/mig-profile MIG profile of the unit ("1g.5gb"), absent for whole GPUs
//   gpu.themelio.io/project     project the unit is charged to
// Unit index i of resource R on a node is the i-th device of R as the device plugin lists it
// (MIG slices and GPUs are enumerated in the same stable order the node agent sees).
// `unit`, `amount` and `project` are read back; the others are for people and node agents.
// The project read back is authoritative for the bound pod: it stays charged to the project
// it was bound for across relists and restarts, whatever its namespace's label says later.
// (Like every annotation, these are only as trustworthy as the pod-update rights in the
// namespace: whoever may patch them may move the pod's charge; see README, In a cluster.)
#ifndef GSE_STATE_ASSIGNMENT_H_
#define GSE_STATE_ASSIGNMENT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "state/catalog.h"

namespace gse {

inline constexpr absl::string_view kAnnotationUnit = "gpu.themelio.io/unit";
inline constexpr absl::string_view kAnnotationAmount = "gpu.themelio.io/amount";
inline constexpr absl::string_view kAnnotationSharing = "gpu.themelio.io/sharing";
inline constexpr absl::string_view kAnnotationMigProfile = "gpu.themelio.io/mig-profile";
inline constexpr absl::string_view kAnnotationProject = "gpu.themelio.io/project";
// Written by the node agent (docs/agent.md, "Extender cooperation"): on a pod, the device IDs
// kubelet recorded for its annotated unit(s) once the agent verified them; on a Node, the
// units the agent serves there (JSON, units[i] is unit i above). The extender reads both: a
// node carrying the inventory has an agent, whose per-node gate (cluster_state.h) waits for
// the pod annotation.
inline constexpr absl::string_view kAnnotationAllocated = "gpu.themelio.io/allocated";
// DRA mode (docs/dra.md): on a pod bound to DRA-backed units, the devices the allocator gave
// it, "<driver>/<pool>/<device>=<uuid>" per unit of gpu.themelio.io/unit, comma-separated,
// in the same order. For people and node agents; not read back (the pod's claim is the
// truth: unit i of a DRA-backed offering is the i-th device of its class in the allocator's
// walk order, and a restart maps the claim's devices to units again).
inline constexpr absl::string_view kAnnotationDraDevices = "gpu.themelio.io/dra-devices";
inline constexpr absl::string_view kAnnotationInventory = "gpu.themelio.io/inventory";
inline constexpr int kMaxUnitsPerPod = 64;
inline constexpr int kMaxAmountPerUnit = 1024;

// Which units one pod holds. `units` are indices into the node's units of `offering`, sorted
// and distinct; `amount_per_unit` is 1 for exclusive and time-sliced, k shares for mps.
struct Assignment {
  std::string node;
  OfferingId offering = kNoOffering;
  std::vector<int32_t> units;
  int32_t amount_per_unit = 1;

  bool operator==(const Assignment& o) const {
    return node == o.node && offering == o.offering && units == o.units &&
           amount_per_unit == o.amount_per_unit;
  }
  bool operator!=(const Assignment& o) const { return !(*this == o); }
};

// Human-readable unit id "node/resource/index" used in /debug/state, logs and annotations.
std::string UnitId(absl::string_view node, absl::string_view resource, int32_t index);

// Annotations to write for `a` (resource names are the catalog's canonical names).
std::map<std::string, std::string> AssignmentAnnotations(const Assignment& a, const Catalog& catalog,
                                                         absl::string_view project);

// Reads an assignment back from a pod's annotations. Returns NotFound when the pod carries no
// gpu.themelio.io/unit annotation, InvalidArgument (naming the annotation and the reason) when
// it is malformed, names an unknown resource, or disagrees with `pod_node` (spec.nodeName).
absl::StatusOr<Assignment> ParseAssignmentAnnotations(
    const std::map<std::string, std::string>& annotations, absl::string_view pod_node,
    const Catalog& catalog);

// The project a bound pod was charged to (gpu.themelio.io/project). NotFound when the pod
// carries no such annotation, InvalidArgument (naming the annotation and the reason) when it
// is empty, longer than 253 bytes or holds a control character.
absl::StatusOr<std::string> ParseProjectAnnotation(
    const std::map<std::string, std::string>& annotations);

}  // namespace gse

#endif  // GSE_STATE_ASSIGNMENT_H_
