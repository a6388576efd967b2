// Entitlement: what a pod on this node may receive of one served offering, and the pure rules
// that decide whether kubelet's device IDs fit it (docs/agent.md, "Honouring the choice").
//
//  * An annotated pod (gpu.themelio.io/unit, state/assignment.h) may receive device IDs of its
//    annotated units only: the unit's UUID for exclusive offerings, tickets or shares
//    "<uuid>::<k>" of that unit for time-sliced and MPS offerings.
//  * A pod that requests the offering without an annotation (bound by another scheduler or by
//    hand) is charged what the extender charges it (state/cluster_state.cc): whole units that
//    nobody holds and no pod's annotation names, lowest index first; for shared offerings one
//    such unit, so it never shares a unit with another project.
//  * An annotation that cannot be honoured (malformed, another node or resource, a unit the
//    node does not have, a count that disagrees with the pod's request) makes the pod an
//    error entitlement: it receives nothing, with the reason.
//  * Two entitlements are equivalent when any answer right for one is right for the other:
//    the same units, amount and need (replicas of one unit are interchangeable). Only then
//    may kubelet's anonymous call be attributed without knowing which pod it is for.
// Pure functions over values; thread-safe.
#ifndef GSE_AGENT_ENTITLEMENT_H_
#define GSE_AGENT_ENTITLEMENT_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "agent/node_pods.h"
#include "agent/unit_map.h"
#include "state/catalog.h"

namespace gse::agent {

struct Entitlement {
  std::string pod_key;
  std::string creation_timestamp;
  std::string project;  // annotation gpu.themelio.io/project, else the namespace
  bool annotated = false;
  std::vector<int32_t> units;  // annotated units (empty when not annotated)
  int32_t amount_per_unit = 1;
  int64_t need = 0;   // device IDs the pod needs of this offering in total
  std::string error;  // non-empty: the pod may receive nothing; the reason
};

// The entitlement of `pod` to `offering` on node `node`; nullopt when the pod requests no
// device of it.
std::optional<Entitlement> EntitlementFor(const NodePod& pod, absl::string_view node,
                                          const ServedOffering& offering, const Catalog& catalog);

bool Equivalent(const Entitlement& a, const Entitlement& b);

// Who uses the offering's units now: per unit, the pods holding IDs of it and their projects,
// and the units annotated on live pods (reserved for them even before kubelet allocates).
struct UnitUse {
  std::vector<std::map<std::string, int32_t>> holders;  // unit -> pod key -> IDs held
  std::vector<std::set<std::string>> projects;          // unit -> projects of its holders
  std::vector<bool> annotated;                          // unit named by a live pod's annotation
  explicit UnitUse(size_t units) : holders(units), projects(units), annotated(units, false) {}
  bool Free(int32_t unit) const {
    return holders[static_cast<size_t>(unit)].empty() && !annotated[static_cast<size_t>(unit)];
  }
};

// The units `e` may take IDs from, given `use`: its annotated units; for an unannotated pod
// every free unit, lowest index first.
std::vector<int32_t> AllowedUnits(const Entitlement& e, const ServedOffering& offering,
                                  const UnitUse& use);

// Checks that `ids` (one container's Allocate, or PreStartContainer) fit `e`, which already
// holds `held` IDs of the offering. Errors name the pod, the device, its unit and the rule.
absl::Status CheckIdsFit(const Entitlement& e, const ServedOffering& offering, const UnitUse& use,
                         const std::vector<std::string>& ids, int64_t held);

// The preferred allocation for `e`: `must_include` first, then IDs of its allowed units that
// are in `available`, in unit and ticket order, up to `size`. Exactly the annotated unit's
// IDs when enough are free; fewer when not (kubelet fills the rest, and Allocate refuses).
std::vector<std::string> PreferredIds(const Entitlement& e, const ServedOffering& offering,
                                      const UnitUse& use, const std::vector<std::string>& available,
                                      const std::vector<std::string>& must_include, int32_t size);

}  // namespace gse::agent

#endif  // GSE_AGENT_ENTITLEMENT_H_
