// Unit rules: how much of each offering a pod asks, which project may join a unit, what a
// project's holders on a unit cost it, and how much of a GPU one unit is. The one statement of each: scoring/feasibility.h (filter,
// preemption), the policies (ChooseUnits), ClusterState::Reserve and ClusterState::Audit all
// read them from here. The quota arithmetic itself is quota_charge.h's; which nodes an
// offering selects is OfferingSelectsNode (cluster_state.h).
// Pure functions; thread-safe.
#ifndef GSE_STATE_UNIT_RULES_H_
#define GSE_STATE_UNIT_RULES_H_

#include <cstdint>
#include <map>
#include <set>

#include "absl/functional/function_ref.h"
#include "state/catalog.h"
#include "state/cluster_state.h"

namespace gse {

// What `pod` asks of each catalog offering some container names, in milli-units, by offering
// id (0 for an offering named with quantity 0): per container its requests, the limit where
// no request is given (Kubernetes defaults one to the other; an alias adds to its offering),
// aggregated over the containers as Kubernetes does (AggregatePodRequest: sidecars add up,
// other init containers' units are reused). Offerings asked for in a fraction of a unit by
// some container are added to `fractional` when given. The one statement of "how much": the
// decisions (ResolvePodRequest) and the charge of pods bound by something else read it.
std::map<OfferingId, int64_t> PodCatalogDemand(const Catalog& catalog, const PodObject& pod,
                                               std::set<OfferingId>* fractional = nullptr);

// Whether every holder of one unit of `offering` must belong to one project (I2): all but
// MPS units, which may be shared between projects unless the catalog says
// mpsSingleProject (an exclusive unit has one holder anyway).
bool OneProjectPerUnit(const Offering& offering);

// May a new holder of `project` join a unit of `offering` (ignoring free capacity)? `empty`:
// the unit has no holder; `owner`: the one project of its holders, kNoProject when none is
// known or they are several. Empty units admit anyone; exclusive units no one else;
// one-project units only their owner; other MPS units anyone.
bool UnitAdmits(const Offering& offering, bool empty, ProjectId owner, ProjectId project);

// One project's holders on one unit: how many, and their tickets or shares in total.
struct ProjectHold {
  int64_t holdings = 0;
  int64_t amount = 0;
};
// The holders of `unit` for which `project_of` answers `project` (kNoProject: counts none).
ProjectHold HoldOf(const Unit& unit, ProjectId project,
                   absl::FunctionRef<ProjectId(const Holding&)> project_of);
// What one more holder taking `amount` adds to the charge of a project that holds `held` on
// `unit` (QuotaCharge after minus before): 0 when it joins a slice it already owns.
int64_t JoinCharge(const Offering& offering, const Unit& unit, const ProjectHold& held,
                   int64_t amount);

// GPU-equivalents of one unit of `offering`: 1 for a whole GPU, g/7 for a "<g>g.*" MIG slice
// (A100 and H100 have seven compute slices; 1/7 when the profile does not say), at most 1.
double UnitGpuFraction(const Offering& offering);

}  // namespace gse

#endif  // GSE_STATE_UNIT_RULES_H_
