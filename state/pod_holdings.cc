// ClusterState, pods: which pods hold which units, and what that adds to owners and usage.
//
//  * Holdings are indexed twice: by pod (pods_, the record) and by unit (Unit::holders,
//    Unit::used, Unit::owner) plus per-project usage. The unit side and usage are updated
//    incrementally in AddHolding/RemoveHolding; Audit() recounts them from pods_.
//  * A bound pod without (a readable) assignment annotation is charged whole units, free ones
//    first; when the node has too little free capacity the rest is charged over capacity, so
//    Audit names the unit and the pods and nothing is handed out twice.
//  * A bound pod's project is the one its gpu.themelio.io/project annotation records, else the
//    one it was first recorded with: relabelling a namespace moves quotas at once, usage of
//    running pods stays, also across relists and restarts.
#include "state/cluster_state.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "state/cluster_state_internal.h"
#include "state/quota_charge.h"
#include "state/unit_rules.h"

namespace gse {
namespace {

// What a pod asks of the catalog (PodCatalogDemand), as one offering and a whole amount.
struct CatalogRequest {
  OfferingId offering = kNoOffering;
  int64_t amount = 0;  // whole units, tickets or shares
};

CatalogRequest ResolveCatalogRequest(const Catalog& catalog, const PodObject& pod) {
  CatalogRequest r;
  for (const auto& [id, milli] : PodCatalogDemand(catalog, pod)) {
    if (milli <= 0) continue;
    // A pod naming two offerings cannot be placed by us; if something else bound it, the
    // lowest offering id is charged (one PodRecord holds one assignment).
    r.offering = id;
    r.amount = milli / 1000 + (milli % 1000 != 0 ? 1 : 0);
    break;
  }
  return r;
}

}  // namespace

using cluster_state_internal::EnsureUnit;
using cluster_state_internal::TrimNode;

void ClusterState::RecomputeOwner(Unit& unit, const Offering& offering) {
  if (unit.holders.empty()) {
    unit.owner = kNoProject;
    return;
  }
  auto project_of = [&](const Holding& h) {
    auto it = pods_.find(h.pod_id);
    return it == pods_.end() ? kNoProject : it->second.project;
  };
  const ProjectId first = project_of(unit.holders.front());
  if (offering.sharing == Sharing::kMps) {
    for (const Holding& h : unit.holders) {
      if (project_of(h) != first) {
        unit.owner = kNoProject;
        return;
      }
    }
  }
  // Exclusive and time-sliced: the holders' project. Should API facts put two projects on one
  // unit (Audit reports it), the first holder's project stays the owner.
  unit.owner = first;
}

// What the project of `pod` has on `unit` besides `pod` itself: holders and their amount.
std::pair<int64_t, int64_t> ClusterState::ProjectOnUnit(const Unit& unit,
                                                        const PodRecord& pod) const {
  std::pair<int64_t, int64_t> held{0, 0};
  for (const Holding& h : unit.holders) {
    if (h.pod_id == pod.id) continue;
    auto it = pods_.find(h.pod_id);
    if (it == pods_.end() || it->second.project != pod.project) continue;
    ++held.first;
    held.second += h.amount;
  }
  return held;
}

void ClusterState::AddUsage(ProjectId project, OfferingId offering, int64_t delta) {
  if (delta == 0 || project < 0 || static_cast<size_t>(project) >= projects_.size()) return;
  auto& usage = projects_[static_cast<size_t>(project)].usage;
  auto it = usage.try_emplace(offering, 0).first;
  if ((it->second += delta) == 0) usage.erase(it);
}

void ClusterState::ChargeHoldings(const NodeOffering& no, int sign) {
  const Offering& offering = catalog_->Get(no.offering);
  for (const Unit& unit : no.units) {
    // Per project on this unit: holders and amount (one project, but for API facts).
    absl::InlinedVector<std::pair<ProjectId, std::pair<int64_t, int64_t>>, 2> per_project;
    for (const Holding& h : unit.holders) {
      auto it = pods_.find(h.pod_id);
      if (it == pods_.end()) continue;
      auto p = std::find_if(per_project.begin(), per_project.end(),
                            [&](const auto& e) { return e.first == it->second.project; });
      if (p == per_project.end()) p = per_project.insert(per_project.end(), {it->second.project, {0, 0}});
      ++p->second.first;
      p->second.second += h.amount;
    }
    for (const auto& [project, held] : per_project) {
      AddUsage(project, no.offering, sign * QuotaCharge(offering, unit, held.first, held.second));
    }
  }
}

void ClusterState::AddHolding(const PodRecord& pod) {
  const Assignment& a = pod.assignment;
  const Offering& offering = catalog_->Get(a.offering);
  for (int32_t index : a.units) {
    const size_t nodes_before = nodes_.size();
    Unit& unit = EnsureUnit(nodes_, *catalog_, a.node, a.offering, index);
    if (nodes_.size() != nodes_before) {  // a node created for the fact
      nodes_.find(a.node)->second->slot = AllocateSlot();
      BumpNodeSetVersion();
    }
    const auto [holdings, amount] = ProjectOnUnit(unit, pod);
    unit.holders.push_back(Holding{pod.id, a.amount_per_unit});
    unit.used += a.amount_per_unit;
    AddUsage(pod.project, a.offering,
             QuotaCharge(offering, unit, holdings + 1, amount + a.amount_per_unit) -
                 QuotaCharge(offering, unit, holdings, amount));
    RecomputeOwner(unit, offering);
  }
  Reindex(a.node);
}

void ClusterState::RemoveHolding(const PodRecord& pod) {
  const Assignment& a = pod.assignment;
  auto node_it = nodes_.find(a.node);
  if (node_it == nodes_.end()) return;
  NodeOffering* no = node_it->second->Find(a.offering);
  if (no == nullptr) return;
  const Offering& offering = catalog_->Get(a.offering);
  for (int32_t index : a.units) {
    if (index < 0 || static_cast<size_t>(index) >= no->units.size()) continue;
    Unit& unit = no->units[static_cast<size_t>(index)];
    auto h = std::find_if(unit.holders.begin(), unit.holders.end(),
                          [&](const Holding& x) { return x.pod_id == pod.id; });
    if (h == unit.holders.end()) continue;
    const int32_t amount = h->amount;
    unit.holders.erase(h);
    unit.used -= amount;
    const auto [holdings, others] = ProjectOnUnit(unit, pod);
    AddUsage(pod.project, a.offering,
             QuotaCharge(offering, unit, holdings, others) -
                 QuotaCharge(offering, unit, holdings + 1, others + amount));
    RecomputeOwner(unit, offering);
  }
  // Trimming drops only free draining units and empty offerings, which the index does not
  // count; a node it erases had nothing indexed.
  const size_t nodes_before = nodes_.size();
  const uint32_t slot = node_it->second->slot;
  TrimNode(nodes_, a.node);
  if (nodes_.size() != nodes_before) {  // a removed node left
    FreeSlot(slot);
    BumpNodeSetVersion();
  }
  Reindex(a.node);
}

void ClusterState::ApplyPod(const PodObject& pod) {
  const std::string key = pod.Key();
  // Only this pod's own record (its UID) is touched: a recreated pod of the same name is
  // another pod, and the old one's record leaves with its own deletion (or a relist).
  const std::string id = PodIdOf(pod.uid, key);
  auto it = pods_.find(id);
  PodRecord* existing = it == pods_.end() ? nullptr : &it->second;
  // A pending event of a pod whose bind is in flight (our reservation) keeps the reservation's
  // host count, as it keeps its units below.
  const bool in_flight = existing != nullptr && existing->source == HoldingSource::kReserved &&
                         pod.node_name.empty() && !pod.terminating && !pod.Terminal();
  if (!in_flight) CountHostPod(id, pod);
  if (pod.Terminal()) {
    if (existing != nullptr) Release(id);
    return;
  }
  if (pod.node_name.empty()) {
    // Pending: our reservation is a bind in flight; anything else is stale.
    if (existing != nullptr && existing->source == HoldingSource::kReserved && !pod.terminating) {
      return;
    }
    if (existing != nullptr) Release(id);
    return;
  }

  // A bound pod's project is the one its gpu.themelio.io/project annotation records (the
  // project it was bound for: authoritative across relists and restarts, which rebuild from
  // the API's objects), else the one it was first recorded with, else its namespace's now.
  // Relabelling a namespace so moves new pods only.
  ProjectId project = existing != nullptr ? existing->project : kNoProject;
  if (absl::StatusOr<std::string> annotated = ParseProjectAnnotation(pod.annotations);
      annotated.ok()) {
    project = InternProject(*annotated);
  }
  // The per-node gate (agent_gate.cc): a pod bound with our annotation to a node with an agent
  // awaits it until the agent confirms it; a wait that expired stays over for this pod.
  const absl::Time now = absl::Now();
  const bool expired = existing != nullptr && existing->agent_wait_expired;
  const NodeState* node = FindNode(pod.node_name);
  const bool may_wait =
      !pod.terminating && pod.annotations.count(std::string(kAnnotationAllocated)) == 0;
  const bool awaiting = node != nullptr && node->agent && !expired && may_wait;
  // A wait counts from the binding (PodRecord::agent_wait_from), not from when this process
  // first saw the pod: a restart must not give a pod whose agent never confirmed it a fresh
  // timeout. The API server's clock may be ahead of ours: never later than now.
  const absl::Time bound_from =
      existing != nullptr && existing->agent_wait_from != absl::InfinitePast()
          ? existing->agent_wait_from
          : pod.scheduled_at != absl::InfinitePast() ? std::min(now, pod.scheduled_at) : now;
  const absl::Time since = existing != nullptr && existing->awaiting_agent
                               ? existing->awaiting_agent_since
                               : bound_from;
  // DRA: the claim the pod's status names, else the one our bind verified (PodRecord::dra_claim).
  const std::string dra_claim =
      !pod.extended_resource_claim.empty()
          ? absl::StrCat(pod.namespace_name, "/", pod.extended_resource_claim)
          : existing != nullptr ? existing->dra_claim : std::string();
  auto record = [&](Assignment a, HoldingSource source) {
    if (project == kNoProject) project = InternProject(ProjectOfNamespace(pod.namespace_name));
    PodRecord rec;
    rec.id = id;
    rec.key = key;
    rec.uid = pod.uid;
    rec.namespace_name = pod.namespace_name;
    rec.dra_claim = dra_claim;
    rec.project = project;
    rec.assignment = std::move(a);
    rec.source = source;
    rec.agent_wait_expired = expired;
    rec.agent_wait_from = bound_from;
    rec.agent_may_wait = source != HoldingSource::kCharged && may_wait;
    if (source != HoldingSource::kCharged && awaiting) {
      rec.awaiting_agent = true;
      rec.awaiting_agent_since = since;
    }
    AddPodRecord(std::move(rec));
  };

  absl::StatusOr<Assignment> parsed =
      ParseAssignmentAnnotations(pod.annotations, pod.node_name, *catalog_);
  if (parsed.ok() && node != nullptr) {
    // DRA: unit indices follow the slices' walk order, which a republished slice may change;
    // the pod's claim names the device it really holds, and wins.
    const NodeOffering* no = node->Find(parsed->offering);
    if (no != nullptr && no->dra) {
      std::vector<int32_t> real = DraChargedUnits(*no, pod.node_name, pod.uid, dra_claim);
      if (real.size() == parsed->units.size()) parsed->units = std::move(real);
    }
  }
  if (parsed.ok()) {
    if (existing != nullptr && existing->assignment == *parsed && existing->project == project) {
      existing->source = HoldingSource::kConfirmed;
      existing->dra_claim = dra_claim;
      existing->agent_may_wait = may_wait;
      existing->agent_wait_from = bound_from;
      SetAwaitingAgent(*existing, awaiting, since);
      return;
    }
    if (existing != nullptr) Release(id);
    record(*std::move(parsed), HoldingSource::kConfirmed);
    return;
  }

  // Bound without (a readable) assignment: by another scheduler, by hand, or before us.
  const CatalogRequest request = ResolveCatalogRequest(*catalog_, pod);
  if (request.offering == kNoOffering) {
    if (existing != nullptr) Release(id);  // I6: nothing of ours
    return;
  }
  const Offering& offering = catalog_->Get(request.offering);
  const size_t need =
      offering.sharing == Sharing::kExclusive
          ? static_cast<size_t>(std::min<int64_t>(request.amount, kMaxUnitsPerPod))
          : 1;
  if (existing != nullptr && existing->source == HoldingSource::kCharged &&
      existing->project == project && existing->assignment.node == pod.node_name &&
      existing->assignment.offering == request.offering &&
      existing->assignment.units.size() == need) {
    // Already charged; status updates must not move the charge around, unless (DRA) the
    // pod's claims now name the devices it really holds.
    const NodeOffering* no = node != nullptr ? node->Find(request.offering) : nullptr;
    const std::vector<int32_t> real =
        no != nullptr && no->dra ? DraChargedUnits(*no, pod.node_name, pod.uid, dra_claim)
                                 : std::vector<int32_t>();
    if (real.size() != need || real == existing->assignment.units) return;
  }
  if (existing != nullptr) Release(id);
  if (project == kNoProject) project = InternProject(ProjectOfNamespace(pod.namespace_name));

  record(ChargedUnits(pod.node_name, request.offering, need, project, pod.uid, dra_claim),
         HoldingSource::kCharged);
}

// Charge conservatively: which device the pod got is unknown, so whole units are charged,
// free ones first (lowest index). If the node has too little free capacity the rest is
// charged anyway, over capacity (the pod does run there): Audit reports those units and they
// stay full until the facts clear up, instead of being handed out twice.
Assignment ClusterState::ChargedUnits(const std::string& node_name, OfferingId offering_id,
                                      size_t need, ProjectId project,
                                      absl::string_view pod_uid,
                                      absl::string_view claim_key) const {
  const Offering& offering = catalog_->Get(offering_id);
  Assignment a;
  a.node = node_name;
  a.offering = offering_id;
  const NodeState* node = FindNode(node_name);
  const NodeOffering* no = node != nullptr ? node->Find(offering_id) : nullptr;
  int32_t replicas = offering.shared() ? std::max(1, offering.replicas) : 1;
  if (no != nullptr && no->dra) {
    // DRA: the allocator's claim says which devices the pod got; charge exactly those.
    std::vector<int32_t> real = DraChargedUnits(*no, node_name, pod_uid, claim_key);
    if (real.size() == need) {
      a.units = std::move(real);
      // One share of a shared device: the claim holds one allocation of it (no capacity
      // requests in an extended-resource claim, fact sheet section 2).
      a.amount_per_unit = 1;
      return a;
    }
  }
  if (no != nullptr) {
    replicas = no->replicas;
    // rank: 0 free, 1 held by the same project, 2 held by others, 3 draining
    std::vector<std::pair<int, int32_t>> ranked;
    ranked.reserve(no->units.size());
    for (const Unit& u : no->units) {
      int rank = u.TakesNoNewHolders() ? 3 : u.Empty() ? 0 : u.owner == project ? 1 : 2;
      ranked.emplace_back(rank, u.index);
    }
    std::sort(ranked.begin(), ranked.end());
    for (size_t i = 0; i < ranked.size() && a.units.size() < need; ++i) {
      a.units.push_back(ranked[i].second);
    }
  }
  // Not even that many units known: charge placeholder units beyond the known ones.
  int32_t next = no != nullptr ? static_cast<int32_t>(no->units.size()) : 0;
  while (a.units.size() < need) a.units.push_back(next++);
  std::sort(a.units.begin(), a.units.end());
  a.amount_per_unit = offering.sharing == Sharing::kExclusive ? 1 : replicas;
  return a;
}

void ClusterState::RemovePod(absl::string_view uid, absl::string_view key) {
  const std::string id = PodIdOf(uid, key);
  UncountHostPod(id);
  Release(id);
}

void ClusterState::CarryOver(const PodRecord& rec, absl::string_view project,
                             const ClusterState& from) {
  if (auto h = from.host_pods_.find(rec.id);
      h != from.host_pods_.end() && host_pods_.find(rec.id) == host_pods_.end()) {
    CountHost(rec.id, h->second.node->first, h->second.request);
    // The relist keeps the old window (InheritRecentHostDemand), so the index stays valid.
    host_pods_.find(rec.id)->second.reserved_arrival = h->second.reserved_arrival;
  }
  PodRecord copy = rec;
  copy.project = InternProject(project);  // project ids are per state
  AddPodRecord(std::move(copy));
}

void ClusterState::AddPodRecord(PodRecord rec) {
  ids_by_key_[rec.key].push_back(rec.id);
  if (rec.awaiting_agent) agent_waiting_.insert(rec.id);
  auto [pos, inserted] = pods_.insert_or_assign(rec.id, std::move(rec));
  AddHolding(pos->second);
}

bool ClusterState::Release(absl::string_view pod_id) {
  auto it = pods_.find(pod_id);
  if (it == pods_.end()) return false;
  RemoveHolding(it->second);
  agent_waiting_.erase(it->second.id);
  auto ids = ids_by_key_.find(it->second.key);
  if (ids != ids_by_key_.end()) {
    auto& v = ids->second;
    v.erase(std::remove(v.begin(), v.end(), it->second.id), v.end());
    if (v.empty()) ids_by_key_.erase(ids);
  }
  pods_.erase(it);
  return true;
}

const PodRecord* ClusterState::FindPod(absl::string_view key) const {
  auto ids = ids_by_key_.find(key);
  return ids == ids_by_key_.end() || ids->second.empty() ? nullptr : FindPodById(ids->second.back());
}

const PodRecord* ClusterState::FindPodById(absl::string_view id) const {
  auto it = pods_.find(id);
  return it == pods_.end() ? nullptr : &it->second;
}

const PodRecord* ClusterState::FindPodByUid(absl::string_view uid) const {
  return uid.empty() ? nullptr : FindPodById(uid);
}

std::string PodIdOf(absl::string_view uid, absl::string_view key) {
  return uid.empty() ? absl::StrCat("\x01", key) : std::string(uid);
}

}  // namespace gse
