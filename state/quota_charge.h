// Quota charging: what holding a unit costs a project, and whether a project may take more.
// The one home of DESIGN.md I4's arithmetic: ClusterState (usage, Reserve, Audit) and
// scoring/feasibility.h (filter, preemption) all call these.
//
// The currency is that of ProjectState::usage and of the ResourceQuota hard value:
//  * exclusive: one per unit held;
//  * time-sliced: tickets, counted per slice the project owns: once it holds any ticket of a
//    slice it is charged all of that slice's tickets, with the slice's real ticket count
//    (Unit::capacity: the node's `<resource>.replicas` label, else the catalog's replicas),
//    however many its pods use. A project may open a new slice while the slices it owns give
//    it fewer tickets than its quota, whatever the new slice's size: with R tickets per slice
//    on every node that is ceil(hard / R) slices, and when the node's label and the catalog
//    disagree the node's real count decides;
//  * mps: shares held.
// Pure functions; thread-safe.
#ifndef GSE_STATE_QUOTA_CHARGE_H_
#define GSE_STATE_QUOTA_CHARGE_H_

#include <cstdint>

#include "state/catalog.h"
#include "state/cluster_state.h"

namespace gse {

// The charge for a project that has `holdings` holders with `amount` tickets or shares in
// total on `unit` (0 when it has none).
int64_t QuotaCharge(const Offering& offering, const Unit& unit, int64_t holdings,
                    int64_t amount);

// Whether a project charged `usage` may add a charge of `more` (> 0) under `quota`
// (-1 = unlimited). Time-sliced: while usage < quota (a slice is opened whole).
bool QuotaAllows(Sharing sharing, int64_t quota, int64_t usage, int64_t more);

// Whether holdings charged `usage` in total, of which `largest_unit` on the single unit
// charged most, stay within `quota`: they could have been taken one unit after another under
// QuotaAllows. Audit's I4 check.
bool WithinQuota(Sharing sharing, int64_t quota, int64_t usage, int64_t largest_unit);

}  // namespace gse

#endif  // GSE_STATE_QUOTA_CHARGE_H_
