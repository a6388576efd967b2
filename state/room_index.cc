// ClusterState, derived indexes: what filter and prioritize read instead of units.
//
// OfferingSummary (per node offering), the room tables (one RoomRow per node slot and
// offering) and the per-project index of owned units with room are recomputed from the units
// by Reindex after every change of a node's units, never patched; Audit() checks all three
// against a recount.
#include "state/cluster_state.h"

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "state/cluster_state_internal.h"

namespace gse {
namespace {
bool LowBit(uint64_t bits, ProjectId project) {
  return ((bits >> static_cast<uint32_t>(project)) & 1) != 0;
}
}  // namespace

bool OfferingSummary::Owns(ProjectId project) const {
  if (project < 0) return false;
  if (project < 64) return LowBit(low_owners, project);
  return high_owners && Owned(project) != nullptr;
}

bool OfferingSummary::OwnsWithRoom(ProjectId project) const {
  if (project < 0) return false;
  if (project < 64) return LowBit(low_with_room, project);
  const OwnedUnits* o = high_owners ? Owned(project) : nullptr;
  return o != nullptr && o->with_room > 0;
}

bool RoomRow::Owns(ProjectId project) const {
  return project >= 0 && project < 64 && LowBit(low_owners, project);
}

bool RoomRow::OwnsWithRoom(ProjectId project) const {
  return project >= 0 && project < 64 && LowBit(low_with_room, project);
}

const OwnedUnits* OfferingSummary::Owned(ProjectId project) const {
  if (project < 0 || (project < 64 ? !LowBit(low_owners, project) : !high_owners)) {
    return nullptr;
  }
  // Sorted by project: a node of 7 slices x 4 tickets may have a dozen owners.
  auto it = std::lower_bound(owned.begin(), owned.end(), project,
                             [](const OwnedUnits& o, ProjectId p) { return o.project < p; });
  return it != owned.end() && it->project == project ? &*it : nullptr;
}

bool OfferingSummary::operator==(const OfferingSummary& o) const {
  return open == o.open && live_units == o.live_units && live_capacity == o.live_capacity &&
         empty_units == o.empty_units && max_free == o.max_free &&
         max_free_empty == o.max_free_empty && held_units == o.held_units && owned == o.owned &&
         low_owners == o.low_owners && low_with_room == o.low_with_room &&
         high_owners == o.high_owners && agent_waiting == o.agent_waiting &&
         agent_join_unit == o.agent_join_unit && agent_join_amount == o.agent_join_amount;
}

Availability ClusterState::AvailabilityOf(const NodeState& node, const NodeOffering& no) const {
  if (node.removed) return Availability::kNodeUnknown;
  if (no.advertised_units == 0) return Availability::kNotOnNode;  // draining held units only
  if (!no.unusable_reason.empty()) return Availability::kUnusable;
  if (!OfferingSelectsNode(catalog_->Get(no.offering), node)) return Availability::kNotSelected;
  // Last: the node is fine by itself, its agent is not (and may come back).
  if (node.agent && node.agent_stale) return Availability::kAgentStale;
  return Availability::kOpen;
}

std::vector<RoomRow> ClusterState::RoomRowsOf(const NodeState& node) const {
  std::vector<RoomRow> rows(catalog_->size());
  if (node.removed) return rows;  // kNodeUnknown everywhere
  for (RoomRow& row : rows) row.availability = Availability::kNotOnNode;
  for (const NodeOffering& no : node.offerings) {
    RoomRow& row = rows[static_cast<size_t>(no.offering)];
    row.availability = AvailabilityOf(node, no);
    row.high_owners = no.summary.high_owners;
    row.node_busy = node.held_units > 0;
    row.agent_gate = no.summary.agent_waiting > 0;
    row.empty_units = no.summary.empty_units;
    row.max_free = no.summary.max_free;
    row.max_free_empty = no.summary.max_free_empty;
    row.live_units = no.summary.live_units;
    row.low_owners = no.summary.low_owners;
    row.low_with_room = no.summary.low_with_room;
    row.dra = DraRowOf(no);
  }
  return rows;
}

// A filter reads one row per candidate (RoomRow): RoomRow::dra sits in what was padding.
static_assert(sizeof(RoomRow) <= 40, "RoomRow grew past 40 bytes");

int32_t DraRowOf(const NodeOffering& no) {
  if (!no.dra) return kDraRowNone;
  switch (no.dra_pick.kind) {
    case DraPick::kNotDerived:
    case DraPick::kNoPrediction:
      return kDraRowReadNode;
    case DraPick::kNoDevice:
      return kDraRowNoDevice;
    case DraPick::kUnits:
      break;
  }
  // As DraPredictedVerdict reads the units: taken by a user-made claim for anyone; by holders
  // for every project but their owner (kNoProject with holders of several: the one owner
  // kNoProject, as the unit says); no room in the mirror for anyone.
  // In that order of precedence, as DraPredictedVerdict.
  int32_t owner = kDraRowFree;
  bool full = false;
  bool several = false;
  for (const int32_t i : no.dra_pick.units) {
    if (static_cast<size_t>(i) >= no.units.size()) continue;
    const Unit& unit = no.units[static_cast<size_t>(i)];
    if (unit.user_claimed) return kDraRowTaken;
    // Full while the allocator would still pick it: its claims free it in the API, but the
    // mirror holds it (a bound pod whose claim kube-scheduler's Unreserve deleted).
    full = full || unit.Free() < 1;
    if (unit.Empty()) continue;
    if (owner == kDraRowFree) {
      owner = unit.owner;
    } else if (owner != unit.owner) {
      several = true;
    }
  }
  if (full) return kDraRowNoDevice;
  return several ? kDraRowTaken : owner;
}

uint32_t ClusterState::AllocateSlot() {
  if (!free_slots_.empty()) {
    const uint32_t slot = free_slots_.back();
    free_slots_.pop_back();
    return slot;
  }
  for (std::vector<RoomRow>& table : room_rows_) table.emplace_back();
  slot_versions_.push_back(0);
  return slot_count_++;
}

void ClusterState::FreeSlot(uint32_t slot) {
  for (std::vector<RoomRow>& table : room_rows_) table[slot] = RoomRow{};
  slot_versions_[slot] = 0;
  free_slots_.push_back(slot);
}

OfferingSummary ClusterState::Summarise(const NodeState& node, const NodeOffering& no) const {
  OfferingSummary s;
  s.open = AvailabilityOf(node, no) == Availability::kOpen;
  cluster_state_internal::AgentWaitingGroup waiting(catalog_->Get(no.offering).shared());
  // On a DRA-backed offering the allocator, not the extender, picks the device: only its
  // predicted pick can take the project's next pod (OwnedUnits::reachable_with_room). No
  // prediction: none is counted, so an unpredictable node never binds a project to itself.
  auto reachable = [&no](size_t i) {
    if (!no.dra) return true;
    return no.dra_pick.kind == DraPick::kUnits &&
           std::find(no.dra_pick.units.begin(), no.dra_pick.units.end(),
                     static_cast<int32_t>(i)) != no.dra_pick.units.end();
  };
  for (size_t i = 0; i < no.units.size(); ++i) {
    const Unit& unit = no.units[i];
    const int32_t free = unit.Free();
    s.max_free = std::max(s.max_free, free);
    if (!unit.TakesNoNewHolders()) {
      ++s.live_units;
      s.live_capacity += unit.capacity;
    }
    if (unit.Empty()) {
      if (free >= 1) ++s.empty_units;
      s.max_free_empty = std::max(s.max_free_empty, free);
      continue;
    }
    ++s.held_units;
    if (node.agent) {
      for (const Holding& h : unit.holders) {
        auto rec = pods_.find(h.pod_id);
        if (rec == pods_.end() || !rec->second.awaiting_agent) continue;
        ++s.agent_waiting;
        waiting.Add(rec->second);
      }
    }
    if (unit.owner == kNoProject) continue;
    auto pos = std::lower_bound(s.owned.begin(), s.owned.end(), unit.owner,
                                [](const OwnedUnits& o, ProjectId p) { return o.project < p; });
    if (pos == s.owned.end() || pos->project != unit.owner) {
      OwnedUnits fresh;
      fresh.project = unit.owner;
      pos = s.owned.insert(pos, fresh);
    }
    ++pos->units;
    if (free >= 1) ++pos->with_room;
    if (free >= 1 && reachable(i)) ++pos->reachable_with_room;
    if (unit.owner < 64) {
      const uint64_t bit = uint64_t{1} << static_cast<uint32_t>(unit.owner);
      s.low_owners |= bit;
      if (free >= 1) s.low_with_room |= bit;
    } else {
      s.high_owners = true;
    }
    pos->max_free = std::max(pos->max_free, free);
  }
  if (waiting.first != nullptr && waiting.one_group && waiting.first->assignment.units.size() == 1) {
    s.agent_join_unit = waiting.first->assignment.units.front();
    s.agent_join_amount = waiting.first->assignment.amount_per_unit;
  }
  return s;
}

void ClusterState::AddToIndex(const NodeOffering& no, int32_t sign) {
  if (!no.summary.open) return;
  open_units_[static_cast<size_t>(no.offering)] += sign * no.summary.live_units;
  for (const OwnedUnits& o : no.summary.owned) {
    if (o.reachable_with_room == 0) continue;
    auto key = std::make_pair(o.project, no.offering);
    int32_t& count = owned_with_room_[key];
    count += sign * o.reachable_with_room;
    if (count == 0) owned_with_room_.erase(key);
  }
}

void ClusterState::Unindex(NodeState& node) {
  for (NodeOffering& no : node.offerings) {
    AddToIndex(no, -1);
    no.summary = OfferingSummary{};
  }
  node.held_units = 0;
}

void ClusterState::Reindex(absl::string_view node_name) {
  auto it = nodes_.find(node_name);
  if (it == nodes_.end()) return;
  NodeState& node = *it->second;
  node.held_units = 0;
  for (NodeOffering& no : node.offerings) {
    AddToIndex(no, -1);
    no.summary = Summarise(node, no);
    AddToIndex(no, +1);
    node.held_units += no.summary.held_units;
  }
  const std::vector<RoomRow> rows = RoomRowsOf(node);
  for (size_t o = 0; o < rows.size(); ++o) room_rows_[o][node.slot] = rows[o];
  // Every change of the node's units, offerings, labels or liveness ends here.
  TouchNode(node);
}

int32_t ClusterState::OwnedUnitsWithRoom(ProjectId project, OfferingId offering) const {
  auto it = owned_with_room_.find(std::make_pair(project, offering));
  return it == owned_with_room_.end() ? 0 : it->second;
}

}  // namespace gse
