// Filter: DESIGN.md's placement rules for one node, and the cross-node affinity rule (I3).
//
// Preemption asks "would this node fit if these pods were gone?". Rather than copying the
// state and releasing the victims, every rule reads units through ViewUnit(), which overlays
// the evictions on the fly: evicted holders' amounts are given back, the owner is recomputed
// from the remaining holders, and the project's usage is lowered by what the victims held.
// With no evictions the overlay is the unit itself, so plain filter and preemption share one
// code path and cannot drift apart.
#include "scoring/feasibility.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "state/quota_charge.h"
#include "state/unit_rules.h"

namespace gse {

bool NodeFit::unresolvable() const {
  switch (reason) {
    case FitReason::kFits:
    case FitReason::kNoFreeUnit:
    case FitReason::kNoFreeTicket:
    case FitReason::kNoUnitWithShares:
      return false;
    case FitReason::kNodeUnknown:
    case FitReason::kOfferingNotOnNode:
    case FitReason::kOfferingUnusable:
    case FitReason::kNodeSelector:
    case FitReason::kQuotaExhausted:
    case FitReason::kPodUnresolvable:
    case FitReason::kAffinityElsewhere:
    case FitReason::kWaitingForAgent:
    case FitReason::kAgentStale:
    case FitReason::kDraDeviceOfOtherProject:
      return true;
  }
  return true;
}

std::string NodeFit::Message(const PodRequest& request) const {
  if (reason == FitReason::kPodUnresolvable && !request.unresolvable.empty()) {
    return request.unresolvable;
  }
  return std::string(FitReasonText(reason));
}

absl::string_view FitReasonText(FitReason reason) {
  switch (reason) {
    case FitReason::kFits: return "fits";
    case FitReason::kNodeUnknown: return "node unknown to gpu-slice-extender";
    case FitReason::kOfferingNotOnNode: return "offering not on node";
    case FitReason::kOfferingUnusable: return "offering not usable as catalogued on node";
    case FitReason::kNodeSelector: return "node does not match offering nodeSelector";
    case FitReason::kQuotaExhausted: return "project quota exhausted";
    case FitReason::kPodUnresolvable: return "pod request cannot be satisfied";
    case FitReason::kNoFreeUnit: return "no free unit";
    case FitReason::kNoFreeTicket: return "no free ticket on project's units and no free unit";
    case FitReason::kNoUnitWithShares: return "no unit with enough free shares";
    case FitReason::kAffinityElsewhere:
      return "project's own unit has a free ticket on another node";
    case FitReason::kWaitingForAgent: return "waiting for the node agent";
    case FitReason::kAgentStale: return "node agent not renewing its heartbeat Lease";
    case FitReason::kDraDeviceOfOtherProject:
      return "DRA allocator would pick a device another project holds";
  }
  return "unknown";
}

absl::string_view FitReasonLabel(FitReason reason) {
  switch (reason) {
    case FitReason::kFits: return "fits";
    case FitReason::kNodeUnknown: return "node_unknown";
    case FitReason::kOfferingNotOnNode: return "offering_not_on_node";
    case FitReason::kOfferingUnusable: return "offering_unusable";
    case FitReason::kNodeSelector: return "node_selector";
    case FitReason::kQuotaExhausted: return "quota_exhausted";
    case FitReason::kPodUnresolvable: return "pod_unresolvable";
    case FitReason::kNoFreeUnit: return "no_free_unit";
    case FitReason::kNoFreeTicket: return "no_free_ticket";
    case FitReason::kNoUnitWithShares: return "no_unit_with_shares";
    case FitReason::kAffinityElsewhere: return "affinity_elsewhere";
    case FitReason::kWaitingForAgent: return "waiting_for_agent";
    case FitReason::kAgentStale: return "agent_stale";
    case FitReason::kDraDeviceOfOtherProject: return "dra_device_of_other_project";
  }
  return "unknown";
}

namespace {

// A unit as a new holder of the request's project would see it once `evicted` are gone.
struct UnitView {
  int32_t free = 0;              // tickets / shares / 1 a new holder could take
  bool empty = true;             // no holders remain
  ProjectId owner = kNoProject;  // the one project of the remaining holders
  bool mixed = false;            // remaining holders of several or unknown projects
};

ProjectId ProjectOfPod(const ClusterState& state, const std::string& pod_id) {
  const PodRecord* rec = state.FindPodById(pod_id);
  return rec == nullptr ? kNoProject : rec->project;
}

bool TouchedByEvictions(const Unit& unit, const Evictions& evicted) {
  if (evicted.empty()) return false;
  for (const Holding& h : unit.holders) {
    if (evicted.contains(h.pod_id)) return true;
  }
  return false;
}

UnitView ViewUnit(const ClusterState& state, const Unit& unit, const Evictions& evicted) {
  UnitView v;
  if (!TouchedByEvictions(unit, evicted)) {
    // The mirror keeps owner and used current; holders without a single owner show as
    // kNoProject while non-empty (MPS shared between projects, or facts breaking I2).
    v.free = unit.Free();
    v.empty = unit.Empty();
    v.owner = unit.owner;
    v.mixed = !v.empty && unit.owner == kNoProject;
    return v;
  }
  int64_t used = 0;
  for (const Holding& h : unit.holders) {
    if (evicted.contains(h.pod_id)) continue;
    used += h.amount;
    v.empty = false;
    const ProjectId p = ProjectOfPod(state, h.pod_id);
    if (p == kNoProject) {
      v.mixed = true;  // a holder we cannot attribute: nobody may share the unit with it
    } else if (v.owner == kNoProject && !v.mixed) {
      v.owner = p;
    } else if (p != v.owner) {
      v.mixed = true;
    }
  }
  if (v.mixed) v.owner = kNoProject;
  const int64_t free = unit.TakesNoNewHolders() ? 0 : int64_t{unit.capacity} - used;
  v.free = static_cast<int32_t>(std::max<int64_t>(0, free));
  return v;
}

// Whether a new holder of `project` may join a unit with this view (UnitAdmits; a unit whose
// holders are mixed has no owner).
bool AdmitsProject(const UnitView& v, const Offering& offering, ProjectId project) {
  return UnitAdmits(offering, v.empty, v.mixed ? kNoProject : v.owner, project);
}

// What the project is charged for one unit (state/quota_charge.h), counting only holders not
// evicted when `skip_evicted`.
int64_t ChargeOnUnit(const ClusterState& state, const Unit& unit, const Offering& offering,
                     ProjectId project, const Evictions& evicted, bool skip_evicted) {
  const ProjectHold held = HoldOf(unit, project, [&](const Holding& h) {
    return skip_evicted && evicted.contains(h.pod_id) ? kNoProject : ProjectOfPod(state, h.pod_id);
  });
  return QuotaCharge(offering, unit, held.holdings, held.amount);
}

// The project's usage of `offering` once `evicted` are gone.
int64_t EffectiveUsage(const ClusterState& state, ProjectId project, const Offering& offering,
                       const Evictions& evicted) {
  if (project == kNoProject) return 0;
  int64_t usage = state.Usage(project, offering.id);
  if (evicted.empty()) return usage;
  absl::flat_hash_set<const Unit*> seen;  // two victims may share a unit
  for (const std::string& id : evicted) {
    const PodRecord* rec = state.FindPodById(id);
    if (rec == nullptr || rec->assignment.offering != offering.id) continue;
    const NodeState* node = state.FindNode(rec->assignment.node);
    if (node == nullptr) continue;
    const NodeOffering* no = node->Find(offering.id);
    if (no == nullptr) continue;
    for (int32_t index : rec->assignment.units) {
      if (index < 0 || static_cast<size_t>(index) >= no->units.size()) continue;
      const Unit& unit = no->units[static_cast<size_t>(index)];
      if (!seen.insert(&unit).second) continue;
      usage -= ChargeOnUnit(state, unit, offering, project, evicted, /*skip_evicted=*/false) -
               ChargeOnUnit(state, unit, offering, project, evicted, /*skip_evicted=*/true);
    }
  }
  return std::max<int64_t>(usage, 0);
}

// What the project may still take of the offering once `evicted` are gone.
struct Headroom {
  Sharing sharing = Sharing::kExclusive;
  int64_t quota = -1;  // -1: unlimited
  int64_t usage = 0;   // may stand above quota (quota lowered below usage)
  // `more`: the charge to add; for time-sliced any positive value (a new slice).
  bool Allows(int64_t more) const { return QuotaAllows(sharing, quota, usage, more); }
};

Headroom QuotaHeadroom(const ClusterState& state, ProjectId project, const Offering& offering,
                       const Evictions& evicted) {
  // A project never seen has no ResourceQuota: MirrorOptions decides.
  const int64_t quota = project == kNoProject
                            ? (state.options().unlimited_without_quota ? -1 : 0)
                            : state.Quota(project, offering.id);
  Headroom h;
  h.sharing = offering.sharing;
  if (quota < 0) return h;
  h.quota = quota;
  h.usage = EffectiveUsage(state, project, offering, evicted);
  return h;
}

FitReason ReasonOf(Availability availability) {
  switch (availability) {
    case Availability::kOpen: return FitReason::kFits;
    case Availability::kNodeUnknown: return FitReason::kNodeUnknown;
    case Availability::kNotOnNode: return FitReason::kOfferingNotOnNode;
    case Availability::kUnusable: return FitReason::kOfferingUnusable;
    case Availability::kNotSelected: return FitReason::kNodeSelector;
    case Availability::kAgentStale: return FitReason::kAgentStale;
  }
  return FitReason::kNodeUnknown;
}

// Checks that do not depend on holders: node known, offering there, usable, selected — as
// the node's room row states them (ClusterState::AvailabilityOf is their one statement). A
// node that advertises no units of the offering (any units left are held, draining) can take
// no new holder whatever is evicted: unresolvable, not a capacity shortage. Sets *no_out when
// the offering passes them.
FitReason StaticCheck(const ClusterState& state, const Offering& offering,
                      const NodeState* node, const NodeOffering** no_out) {
  if (node == nullptr) return FitReason::kNodeUnknown;
  const FitReason reason = ReasonOf(state.RoomRows(offering.id)[node->slot].availability);
  if (reason == FitReason::kFits) *no_out = node->Find(offering.id);
  return reason;
}

// What the placement rules need to know about one node offering for one project.
struct Room {
  int32_t empty_units = 0;          // empty units a new holder may take whole
  bool owned_with_ticket = false;   // time-sliced: a unit the project owns has a free ticket
  int32_t max_admissible_free = 0;  // most tickets/shares one unit admitting the project has
};

// From the mirror's summary: O(1) for project ids below 64. Only valid without evictions.
Room RoomFromSummary(const OfferingSummary& summary, const Offering& offering,
                     ProjectId project) {
  Room room;
  room.empty_units = summary.empty_units;
  room.owned_with_ticket = summary.OwnsWithRoom(project);  // usually from bits alone
  if (offering.sharing == Sharing::kMps && !offering.mps_single_project) {
    room.max_admissible_free = summary.max_free;  // every unit admits every project
  } else {
    room.max_admissible_free = summary.max_free_empty;
    // Exclusive units admit no second holder; the others admit their owner project (I2).
    // (Time-sliced requests need no more than owned_with_ticket.)
    if (offering.sharing == Sharing::kMps) {
      if (const OwnedUnits* owned = summary.Owned(project)) {
        room.max_admissible_free = std::max(room.max_admissible_free, owned->max_free);
      }
    }
  }
  return room;
}

// From the node's row in the room table, when the row can tell: not for a project whose id
// is 64 or more on a node with such owners, nor for single-project MPS (whose owned units'
// free shares only the summary keeps). Only valid without evictions.
std::optional<Room> RoomFromRow(const RoomRow& row, const Offering& offering,
                                ProjectId project) {
  if (!row.Tells(project)) return std::nullopt;
  if (offering.sharing == Sharing::kMps && offering.mps_single_project) return std::nullopt;
  Room room;
  room.empty_units = row.empty_units;
  room.owned_with_ticket = row.OwnsWithRoom(project);
  room.max_admissible_free =
      offering.sharing == Sharing::kMps ? row.max_free : row.max_free_empty;
  return room;
}


// From the units with the evictions overlaid: the same facts, one scan.
Room RoomFromUnits(const ClusterState& state, const NodeOffering& no, const Offering& offering,
                   ProjectId project, const Evictions& evicted) {
  Room room;
  for (const Unit& unit : no.units) {
    const UnitView v = ViewUnit(state, unit, evicted);
    if (v.empty && v.free >= 1) ++room.empty_units;
    if (!AdmitsProject(v, offering, project)) continue;
    room.max_admissible_free = std::max(room.max_admissible_free, v.free);
    if (!v.empty && v.free >= 1 && offering.sharing == Sharing::kTimeSliced) {
      room.owned_with_ticket = true;
    }
  }
  return room;
}

struct Verdict {
  FitReason reason = FitReason::kFits;
  // Time-sliced: fits through a unit the project already owns (no new unit, no quota).
  bool via_owned_unit = false;
};

// DESIGN.md placement rules for an offering that may take new holders on the node, from
// what the node has room for. Capacity is checked before quota, so that kQuotaExhausted
// (unresolvable) is reported only when quota is the one obstacle; when capacity is short too,
// the capacity reason leaves preemption its chance (evicting the project's own pods frees
// both).
Verdict Decide(const Offering& offering, const PodRequest& request, const Room& room,
               const Headroom& headroom) {
  Verdict verdict;
  int64_t new_usage = request.amount;
  switch (offering.sharing) {
    case Sharing::kExclusive:
      if (room.empty_units < request.amount) {
        verdict.reason = FitReason::kNoFreeUnit;
        return verdict;
      }
      break;
    case Sharing::kTimeSliced:
      if (room.owned_with_ticket) {
        verdict.via_owned_unit = true;  // a ticket on an owned unit costs no quota
        return verdict;
      }
      if (room.empty_units < 1) {
        verdict.reason = FitReason::kNoFreeTicket;
        return verdict;
      }
      new_usage = 1;  // one more owned slice (its size does not matter: quota_charge.h)
      break;
    case Sharing::kMps:
      if (room.max_admissible_free < request.amount) {
        verdict.reason = FitReason::kNoUnitWithShares;
        return verdict;
      }
      break;
  }
  if (!headroom.Allows(new_usage)) verdict.reason = FitReason::kQuotaExhausted;
  return verdict;
}

// A verdict that does not depend on the node: the request's own problems.
std::optional<Verdict> RequestVerdict(const ClusterState& state, const PodRequest& request) {
  Verdict verdict;
  if (!request.interested()) return verdict;  // I6
  if (!request.unresolvable.empty()) {
    verdict.reason = FitReason::kPodUnresolvable;
    return verdict;
  }
  if (request.offering < 0 || static_cast<size_t>(request.offering) >= state.catalog().size()) {
    verdict.reason = FitReason::kOfferingNotOnNode;  // resolved against another catalog
    return verdict;
  }
  return std::nullopt;
}

// On a node whose agent gate is closed for the offering (RoomRow::agent_gate): the request
// fits only by joining the waiting group (ClusterState::AgentGateOf, kept in the summary as
// agent_join_unit), i.e. its unit has room for the request's amount and admits the project;
// the quota rule is Decide's, with the group's unit as the only room.
Verdict DecideGated(const Offering& offering, const PodRequest& request, ProjectId project,
                    const NodeOffering& no, const Headroom& headroom) {
  Verdict waiting;
  waiting.reason = FitReason::kWaitingForAgent;
  const int32_t join = no.summary.agent_join_unit;
  if (join < 0 || static_cast<size_t>(join) >= no.units.size()) return waiting;
  const int32_t amount = offering.sharing == Sharing::kMps ? static_cast<int32_t>(request.amount) : 1;
  if (no.summary.agent_join_amount != amount) return waiting;
  const Unit& unit = no.units[static_cast<size_t>(join)];
  if (!UnitAdmitsProject(unit, offering, project) || unit.Free() < amount) return waiting;
  Room room;
  room.owned_with_ticket = offering.sharing == Sharing::kTimeSliced;  // the project's unit
  room.max_admissible_free = unit.Free();
  return Decide(offering, request, room, headroom);
}

// The whole rule for one node. `project` is the request's project as the mirror knows it
// (kNoProject if never seen); `headroom`, when given, its QuotaHeadroom for the request's
// offering under `evicted` (the same for every node: FilterNodes computes it once).
Verdict Assess(const ClusterState& state, const PodRequest& request, ProjectId project,
               const NodeState* node, const Evictions& evicted,
               const Headroom* headroom = nullptr) {
  if (std::optional<Verdict> v = RequestVerdict(state, request)) return *v;
  const Offering& offering = state.catalog().Get(request.offering);
  const NodeOffering* no = nullptr;
  Verdict verdict;
  verdict.reason = StaticCheck(state, offering, node, &no);
  if (verdict.reason != FitReason::kFits) return verdict;
  if (no->summary.agent_waiting > 0 && node->agent) {
    return DecideGated(offering, request, project, *no,
                       headroom != nullptr ? *headroom
                                           : QuotaHeadroom(state, project, offering, evicted));
  }
  // Without evictions the mirror's summary says it all; preemption overlays the victims.
  const Room room = evicted.empty() ? RoomFromSummary(no->summary, offering, project)
                                    : RoomFromUnits(state, *no, offering, project, evicted);
  return Decide(offering, request, room,
                headroom != nullptr ? *headroom
                                    : QuotaHeadroom(state, project, offering, evicted));
}

// Whether the project owns a unit with a free ticket on any node it could use, candidate or
// not (the mirror's per-project index counts exactly those).
bool OwnsFreeTicketAnywhere(const ClusterState& state, const Offering& offering,
                            ProjectId project) {
  return project != kNoProject && state.OwnedUnitsWithRoom(project, offering.id) > 0;
}


}  // namespace

bool UnitAdmitsProject(const Unit& unit, const Offering& offering, ProjectId project) {
  return UnitAdmits(offering, unit.Empty(), unit.owner, project);
}

FitReason DraPredictedVerdict(const ClusterState& state, const Offering& offering,
                              ProjectId project, const NodeState* node,
                              std::string* no_prediction) {
  const NodeOffering* no = node != nullptr ? node->Find(offering.id) : nullptr;
  if (no == nullptr || !no->dra) return FitReason::kFits;
  // The pick derived with the node's units (NodeOffering::dra_pick): read on every candidate
  // of every filter, so it is not predicted again here unless none was kept.
  DraPick now;
  const DraPick* pick = &no->dra_pick;
  if (pick->kind == DraPick::kNotDerived) {
    now = state.DraPickNow(*node, *no);
    pick = &now;
  }
  switch (pick->kind) {
    case DraPick::kNotDerived:  // never (DraPickNow derives)
    case DraPick::kNoPrediction:
      // No prediction (the walk is not deterministic or not modelled): not guessed; the node
      // passes and bind checks the device the allocator really picked.
      if (no_prediction != nullptr) *no_prediction = pick->reason;
      return FitReason::kFits;
    case DraPick::kNoDevice:
      return FitReason::kNoFreeUnit;
    case DraPick::kUnits:
      break;
  }
  // Whether any predicted unit has `property` (a pick names one device: no list is built on
  // this per-candidate path).
  auto any_picked = [&](auto property) {
    for (const int32_t i : pick->units) {
      if (static_cast<size_t>(i) < no->units.size() && property(no->units[static_cast<size_t>(i)])) {
        return true;
      }
    }
    return false;
  };
  // A user-made claim's device (Unit::user_claimed).
  if (any_picked([](const Unit& u) { return u.user_claimed; })) {
    return FitReason::kDraDeviceOfOtherProject;
  }
  // The device the allocator picks (free in the API) has no room in the mirror: a bound pod
  // whose claim was deleted (kube-scheduler's Unreserve after an unknown bind) still holds
  // it. Bind would refuse every retry on this node.
  if (any_picked([](const Unit& u) { return u.Free() < 1; })) return FitReason::kNoFreeUnit;
  // Holders of another project or of several (owner kNoProject with holders).
  if (any_picked([&](const Unit& u) { return !u.Empty() && u.owner != project; })) {
    return FitReason::kDraDeviceOfOtherProject;
  }
  return FitReason::kFits;
}

FitReason DraRowVerdict(int32_t dra, ProjectId project) {
  switch (dra) {
    case kDraRowNone:
    case kDraRowFree:
      return FitReason::kFits;
    case kDraRowTaken:
      return FitReason::kDraDeviceOfOtherProject;
    case kDraRowNoDevice:
      return FitReason::kNoFreeUnit;
    default:  // the one owner of the predicted units
      return dra == project ? FitReason::kFits : FitReason::kDraDeviceOfOtherProject;
  }
}

NodeFit CheckNode(const ClusterState& state, const PodRequest& request, const NodeState* node,
                  const Evictions& evicted) {
  NodeFit fit;
  fit.reason = Assess(state, request, state.FindProject(request.project), node, evicted).reason;
  return fit;
}

FilterOutcome FilterNodes(const ClusterState& state, const PodRequest& request,
                          const std::vector<const NodeState*>& nodes) {
  return FilterNodes(state, request, nodes, [](size_t) {});
}

FilterOutcome FilterNodes(const ClusterState& state, const PodRequest& request,
                          const std::vector<const NodeState*>& nodes,
                          absl::FunctionRef<void(size_t)> on_fit) {
  return FilterNodes(state, request, nodes, SlotsOf(nodes), on_fit);
}

std::vector<uint32_t> SlotsOf(const std::vector<const NodeState*>& nodes) {
  std::vector<uint32_t> slots(nodes.size(), ClusterState::kUnknownSlot);
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i] != nullptr) slots[i] = nodes[i]->slot;
  }
  return slots;
}

FilterOutcome FilterNodes(const ClusterState& state, const PodRequest& request,
                          const std::vector<const NodeState*>& nodes,
                          const std::vector<uint32_t>& slots,
                          absl::FunctionRef<void(size_t)> on_fit) {
  FilterOutcome out;
  out.fits.resize(nodes.size());
  if (std::optional<Verdict> same = RequestVerdict(state, request)) {
    for (size_t i = 0; i < nodes.size(); ++i) {
      out.fits[i].reason = same->reason;
      if (same->reason == FitReason::kFits) on_fit(i);
    }
    return out;
  }
  const Offering& offering = state.catalog().Get(request.offering);
  const ProjectId project = state.FindProject(request.project);
  const Headroom headroom = QuotaHeadroom(state, project, offering, Evictions{});
  // The rows tell most verdicts (RoomFromRow); the node itself is read only when they cannot.
  const RoomRow* rows = state.RoomRows(offering.id);
  std::vector<bool> via_owned(nodes.size(), false);
  // DRA mode: passing DRA nodes are checked against the allocator's predicted pick, from the
  // room row (DraRowVerdict) unless only the node can tell (DraPredictedVerdict: no pick
  // kept, or no prediction and why). Without DRA mode nothing more is read per node.
  const bool dra_mode = state.options().dra;
  bool owned_on_candidate = false;
  bool any_fits = false;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const RoomRow& row = rows[slots[i]];
    Verdict v;
    if (row.availability != Availability::kOpen) {
      v.reason = ReasonOf(row.availability);
    } else if (row.agent_gate) {
      v = Assess(state, request, project, nodes[i], Evictions{}, &headroom);
    } else if (std::optional<Room> room = RoomFromRow(row, offering, project)) {
      v = Decide(offering, request, *room, headroom);
    } else {
      v = Assess(state, request, project, nodes[i], Evictions{}, &headroom);
    }
    if (dra_mode && v.reason == FitReason::kFits && row.dra != kDraRowNone) {
      if (row.dra == kDraRowReadNode) {
        std::string why;
        v.reason = DraPredictedVerdict(state, offering, project, nodes[i], &why);
        if (!why.empty()) out.dra_unpredicted.emplace_back(i, std::move(why));
      } else {
        v.reason = DraRowVerdict(row.dra, project);
      }
      // The allocator, not the unit choice, decides which device the pod gets there: it
      // joins its project's unit only when the predicted pick is that unit. Otherwise this
      // node must not keep the other candidates from opening one (I3 below), or a project
      // whose own unit the allocator never picks would find no node at all.
      v.via_owned_unit = v.via_owned_unit && v.reason == FitReason::kFits && row.dra == project;
    }
    if (v.reason == FitReason::kFits) on_fit(i);
    out.fits[i].reason = v.reason;
    via_owned[i] = v.via_owned_unit;
    owned_on_candidate = owned_on_candidate || v.via_owned_unit;
    any_fits = any_fits || v.reason == FitReason::kFits;
  }
  if (offering.sharing != Sharing::kTimeSliced) return out;

  if (owned_on_candidate) {
    // I3: while the project's own unit has room on a candidate, no candidate opens a new unit.
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (out.fits[i].fits() && !via_owned[i]) out.fits[i].reason = FitReason::kAffinityElsewhere;
    }
  } else if (any_fits) {
    // Every passing node opens a new unit; it is a spill when the project's own units still
    // have room on nodes kube-scheduler did not find feasible.
    out.spill_outside_candidates = OwnsFreeTicketAnywhere(state, offering, project);
  }
  return out;
}

}  // namespace gse
