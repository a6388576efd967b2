// ClusterState, DRA mode (docs/dra.md): the mirrored DeviceClasses, ResourceSlices and
// ResourceClaims (DraState, under the state's own lock like everything else in it), and what
// they change in the rest of the state:
//  * nodes: a DRA object may change which offerings of a node are DRA-backed and their units
//    (node_units.cc derives them), so the nodes it may affect are derived again from their
//    last Node objects: a class change touches every node, a node-local slice its node (before
//    and after an update), a cluster-wide slice every node, a claim the nodes whose slices
//    hold its devices (before and after);
//  * pods: a pod bound without our annotation (charged) on a DRA-backed offering is charged
//    the devices its allocated claims hold, as soon as the mirror has those claims (the claim
//    and pod watches are separate streams: either may come first).
// Everything is a no-op unless MirrorOptions::dra.
#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "state/cluster_state.h"

namespace gse {

void ClusterState::ApplyDeviceClass(DraDeviceClass c) {
  if (!options_.dra) return;
  dra_.UpsertDeviceClass(std::move(c));
  RefreshDraDrift();
  RederiveDraNodes("");
}

void ClusterState::RemoveDeviceClass(absl::string_view name) {
  if (!options_.dra || !dra_.RemoveDeviceClass(name)) return;
  RefreshDraDrift();
  RederiveDraNodes("");
}

namespace {
// The node a slice's devices serve, "" when it may serve any node (allNodes, node selectors).
std::string SliceNode(const DraResourceSlice* s) {
  if (s == nullptr || s->all_nodes || s->node_selector || s->per_device_node_selection) return "";
  return s->node_name;
}
}  // namespace

void ClusterState::ApplyResourceSlice(DraResourceSlice s) {
  if (!options_.dra) return;
  // A node-local slice changes its node only (and the node it named before, when an update
  // moves it); the others (node selectors, all nodes) may change any node.
  const DraResourceSlice* before = dra_.ResourceSlice(s.name);
  const std::string old_node = before != nullptr ? SliceNode(before) : SliceNode(&s);
  const std::string node = SliceNode(&s);
  dra_.UpsertResourceSlice(std::move(s));
  if (node.empty() || old_node.empty()) {
    RederiveDraNodes("");
    return;
  }
  RederiveDraNodes(node);
  if (old_node != node) RederiveDraNodes(old_node);
}

void ClusterState::RemoveResourceSlice(absl::string_view name) {
  if (!options_.dra) return;
  const DraResourceSlice* s = dra_.ResourceSlice(name);
  if (s == nullptr) return;
  const std::string node = SliceNode(s);
  dra_.RemoveResourceSlice(name);
  RederiveDraNodes(node);  // "" (a cluster-wide slice): every node
}

namespace {

// The offering's unit indexes whose device is `device` (DRA units are named by device).
void AddUnitsOfDevice(const NodeOffering& no, const std::string& device, std::vector<int32_t>* out) {
  for (size_t i = 0; i < no.unit_devices.size(); ++i) {
    if (no.unit_devices[i] == device) out->push_back(static_cast<int32_t>(i));
  }
}

std::vector<int32_t> SortedUnique(std::vector<int32_t> units) {
  std::sort(units.begin(), units.end());
  units.erase(std::unique(units.begin(), units.end()), units.end());
  return units;
}
}  // namespace

void ClusterState::ApplyResourceClaim(DraResourceClaim c) {
  if (!options_.dra) return;
  // Before and after: a user-made claim's devices take no new holders (node_units.cc), a pod's
  // claim moves its charge (RechargeDraPods). A pending claim (most user claims at first)
  // changes nothing.
  // The nodes whose units or charged pods it may change: those whose slices hold the devices
  // it held and holds (DraState::NodesOfClaim), whatever node its allocation names.
  std::vector<std::string> nodes;
  if (const DraResourceClaim* before = dra_.ResourceClaim(c.Key()); before != nullptr) {
    nodes = dra_.NodesOfClaim(*before);
  }
  for (std::string& n : dra_.NodesOfClaim(c)) nodes.push_back(std::move(n));
  dra_.UpsertResourceClaim(std::move(c));
  std::sort(nodes.begin(), nodes.end());
  nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
  if (!nodes.empty() && nodes.front().empty()) {
    RederiveDraNodes("");
    return;
  }
  for (const std::string& n : nodes) RederiveDraNodes(n);
}

void ClusterState::RemoveResourceClaim(absl::string_view key) {
  if (!options_.dra) return;
  const DraResourceClaim* c = dra_.ResourceClaim(key);
  if (c == nullptr) return;
  const std::vector<std::string> nodes = dra_.NodesOfClaim(*c);
  dra_.RemoveResourceClaim(key);
  if (!nodes.empty() && nodes.front().empty()) {
    RederiveDraNodes("");
    return;
  }
  for (const std::string& n : nodes) RederiveDraNodes(n);
}

void ClusterState::ReplaceDra(const DraObjectBatch& batch) {
  if (!options_.dra) return;
  DraState fresh;
  for (const DraDeviceClass& c : batch.device_classes) fresh.UpsertDeviceClass(c);
  for (const DraResourceSlice& s : batch.resource_slices) fresh.UpsertResourceSlice(s);
  for (const DraResourceClaim& c : batch.resource_claims) fresh.UpsertResourceClaim(c);
  ReplaceDra(std::move(fresh));
}

void ClusterState::ReplaceDra(DraState dra) {
  if (!options_.dra) return;
  dra_ = std::move(dra);
  RefreshDraDrift();
  RederiveDraNodes("");
}

DraNodeKind ClusterState::KindOf(const NodeState& node, OfferingId offering) {
  const NodeOffering* no = node.Find(offering);
  if (no == nullptr || no->advertised_name.empty()) return DraNodeKind::kNone;
  return no->dra ? DraNodeKind::kDra : DraNodeKind::kDevicePlugin;
}

DraPick ClusterState::DraPickOf(const DraPrediction& p,
                                const std::vector<std::string>& unit_devices) {
  DraPick out;
  switch (p.kind) {
    case DraPrediction::kNoPrediction:
      out.kind = DraPick::kNoPrediction;
      out.reason = p.reason;
      return out;
    case DraPrediction::kNoDevice:
      out.kind = DraPick::kNoDevice;
      return out;
    case DraPrediction::kDevices:
      break;
  }
  out.kind = DraPick::kUnits;
  for (const DraDeviceId& id : p.devices) {
    const std::string device = id.ToString();
    for (size_t i = 0; i < unit_devices.size(); ++i) {
      if (unit_devices[i] == device) out.units.push_back(static_cast<int32_t>(i));
    }
  }
  return out;
}

DraPick ClusterState::DraPickNow(const NodeState& node, const NodeOffering& no) const {
  const std::string& resource = catalog_->Get(no.offering).resource;
  const DraDeviceClass* cls = dra_.ClassForResource(resource);
  if (cls == nullptr) {
    DraPick out;
    out.kind = DraPick::kNoPrediction;
    out.reason = absl::StrCat("no DeviceClass maps ", resource);
    return out;
  }
  return DraPickOf(dra_.PredictExtendedResourcePick(cls->name, node.name, 1, DraPredictOptions{}),
                   no.unit_devices);
}

std::vector<int32_t> ClusterState::DraChargedUnits(const NodeOffering& no,
                                                   absl::string_view node,
                                                   absl::string_view pod_uid,
                                                   absl::string_view claim_key) const {
  std::vector<int32_t> out;
  if (!no.dra || pod_uid.empty()) return out;
  if (!claim_key.empty()) {
    const DraResourceClaim* c = dra_.ResourceClaim(claim_key);
    if (c == nullptr || c->terminating || c->owner_pod_uid != pod_uid) return out;
    return DraUnitsOfClaim(no, node, claim_key);
  }
  // HoldersOn reads the node's claims (DraState's per-node indexes): called for pods bound on
  // DRA-backed offerings and once per bind there. A terminating claim (a failed attempt's,
  // being deleted) holds nothing of the pod's.
  for (const DraHolder& h : dra_.HoldersOn(node)) {
    if (h.pod_uid != pod_uid) continue;
    const DraResourceClaim* c = dra_.ResourceClaim(h.claim_key);
    if (c == nullptr || c->terminating) continue;
    AddUnitsOfDevice(no, h.device.ToString(), &out);
  }
  return SortedUnique(std::move(out));
}

std::vector<int32_t> ClusterState::DraUnitsOfClaim(const NodeOffering& no,
                                                   absl::string_view node,
                                                   absl::string_view claim_key) const {
  std::vector<int32_t> out;
  if (!no.dra) return out;
  for (const DraHolder& h : dra_.HoldersOn(node)) {
    if (h.claim_key != claim_key) continue;
    AddUnitsOfDevice(no, h.device.ToString(), &out);
  }
  return SortedUnique(std::move(out));
}

std::vector<int32_t> ClusterState::DraUnitsOfResults(
    const NodeOffering& no, const std::vector<DraAllocationResult>& results) {
  std::vector<int32_t> out;
  if (!no.dra) return out;
  for (const DraAllocationResult& r : results) {
    if (r.admin_access) continue;
    AddUnitsOfDevice(no, DraDeviceId{r.driver, r.pool, r.device}.ToString(), &out);
  }
  return SortedUnique(std::move(out));
}

std::string ClusterState::DraExtendedClaimOf(absl::string_view node, absl::string_view pod_uid,
                                             absl::string_view claim_key) const {
  if (pod_uid.empty()) return "";
  if (!claim_key.empty()) {
    const DraResourceClaim* c = dra_.ResourceClaim(claim_key);
    if (c == nullptr || c->terminating || !c->allocated || !c->IsExtendedResourceClaim() ||
        c->owner_pod_uid != pod_uid) {
      return "";
    }
    for (const DraHolder& h : dra_.HoldersOn(node)) {
      if (h.claim_key == claim_key) return std::string(claim_key);
    }
    return "";
  }
  // A failed bind's claim is deleted (Unreserve) and the retry makes a new one: the old one
  // is terminating first (its delete-protection finalizer), and the claim watch delivers that
  // before the new claim. Two live claims of one pod: not decided until one goes.
  std::string found;
  for (const DraHolder& h : dra_.HoldersOn(node)) {
    if (!h.extended || h.pod_uid != pod_uid || h.claim_key == found) continue;
    const DraResourceClaim* c = dra_.ResourceClaim(h.claim_key);
    if (c == nullptr || c->terminating) continue;
    if (!found.empty()) return "";
    found = h.claim_key;
  }
  return found;
}

void ClusterState::RederiveDraNodes(absl::string_view node) {
  if (!options_.dra) return;
  if (!node.empty()) {
    auto it = dra_node_objects_.find(node);
    if (it != dra_node_objects_.end()) {
      const NodeObject object = it->second;  // ApplyNode stores it again
      ApplyNode(object);
    }
  } else {
    std::vector<std::string> names;
    names.reserve(dra_node_objects_.size());
    for (const auto& [name, object] : dra_node_objects_) names.push_back(name);
    for (const std::string& name : names) {
      const NodeObject object = dra_node_objects_.find(name)->second;
      ApplyNode(object);
    }
  }
  RechargeDraPods(node);
}

void ClusterState::RechargeDraPods(absl::string_view node) {
  // Bound pods whose claims name other units than they hold (claims seen after the pod, or
  // units re-derived in another order): move them onto exactly those devices. Reservations of
  // binds in flight stay as reserved (their bind compares them). For one node, only the
  // holders of its DRA-backed units are read (a pod with no unit there has nothing to move).
  std::vector<const std::pair<const std::string, PodRecord>*> candidates;
  if (node.empty()) {
    for (const auto& entry : pods_) candidates.push_back(&entry);
  } else if (const NodeState* n = FindNode(node); n != nullptr) {
    std::set<absl::string_view> seen;
    for (const NodeOffering& no : n->offerings) {
      if (!no.dra) continue;
      for (const Unit& u : no.units) {
        for (const Holding& h : u.holders) {
          if (!seen.insert(h.pod_id).second) continue;
          auto it = pods_.find(h.pod_id);
          if (it != pods_.end()) candidates.push_back(&*it);
        }
      }
    }
  }
  std::vector<std::pair<std::string, std::vector<int32_t>>> moves;
  for (const auto* entry : candidates) {
    const std::string& id = entry->first;
    const PodRecord& rec = entry->second;
    if (rec.source == HoldingSource::kReserved) continue;
    if (!node.empty() && rec.assignment.node != node) continue;
    const NodeState* n = FindNode(rec.assignment.node);
    const NodeOffering* no = n != nullptr ? n->Find(rec.assignment.offering) : nullptr;
    if (no == nullptr || !no->dra) continue;
    std::vector<int32_t> real = DraChargedUnits(*no, rec.assignment.node, rec.uid, rec.dra_claim);
    if (real.size() != rec.assignment.units.size() || real == rec.assignment.units) continue;
    moves.emplace_back(id, std::move(real));
  }
  for (auto& [id, units] : moves) {
    PodRecord rec = pods_.find(id)->second;
    Release(id);
    rec.assignment.units = std::move(units);
    if (rec.source == HoldingSource::kCharged) rec.assignment.amount_per_unit = 1;
    AddPodRecord(std::move(rec));
  }
}

}  // namespace gse
