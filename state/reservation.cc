// ClusterState, the commit point: Reserve is the only way capacity is handed out; Confirm
// ends a reservation that became a binding (Release, pod_holdings.cc, ends any holding).
#include "state/cluster_state.h"

#include <cstdint>
#include <string>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "state/quota_charge.h"
#include "state/unit_rules.h"

namespace gse {

int64_t ClusterState::UsageDelta(const Offering& offering, const NodeOffering& no,
                                 const Assignment& a, ProjectId project) const {
  auto project_of = [&](const Holding& h) {
    auto it = pods_.find(h.pod_id);
    return it == pods_.end() ? kNoProject : it->second.project;
  };
  int64_t delta = 0;
  for (int32_t index : a.units) {
    const Unit& unit = no.units[static_cast<size_t>(index)];
    delta += JoinCharge(offering, unit, HoldOf(unit, project, project_of), a.amount_per_unit);
  }
  return delta;
}

absl::Status ClusterState::Reserve(const PodClaim& claim, const Assignment& a,
                                   HoldingSource source, std::optional<HostRequest> host) {
  if (claim.key.empty()) return absl::InvalidArgumentError("reserve: pod key is empty");
  const std::string id = PodIdOf(claim.uid, claim.key);
  if (auto it = pods_.find(id); it != pods_.end()) {
    if (it->second.assignment == a) {  // a retried bind (or one running at the same time)
      if (source == HoldingSource::kReserved && it->second.source == HoldingSource::kReserved) {
        ++it->second.binds_in_flight;
      }
      return absl::OkStatus();
    }
    return absl::AlreadyExistsError(
        absl::StrCat("pod ", claim.key, " already holds units on node ", it->second.assignment.node));
  }
  const std::string project_name =
      claim.project.empty() ? ProjectOfNamespace(claim.namespace_name) : claim.project;
  if (project_name.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("reserve ", claim.key, ": no project and no namespace"));
  }
  if (absl::Status s = CheckUnitsExist(claim, a); !s.ok()) return s;
  if (absl::Status s = CheckAgentGate(claim, a); !s.ok()) return s;
  if (absl::Status s = CheckRoom(claim, project_name, a); !s.ok()) return s;

  // Every check passed: commit (nothing below can fail).
  PodRecord rec;
  rec.id = id;
  rec.key = claim.key;
  rec.uid = claim.uid;
  rec.namespace_name = claim.namespace_name;
  rec.dra_claim = claim.dra_claim;
  rec.project = InternProject(project_name);
  rec.assignment = a;
  rec.source = source;
  rec.binds_in_flight = source == HoldingSource::kReserved ? 1 : 0;
  // The pod is bound with our annotation now: the node's agent (if any) has to confirm it.
  rec.awaiting_agent = FindNode(a.node)->agent;  // CheckUnitsExist found the node
  rec.agent_may_wait = true;
  rec.agent_wait_from = absl::Now();
  rec.awaiting_agent_since = rec.agent_wait_from;
  AddPodRecord(std::move(rec));
  // The host view counts the bind from here (cluster_state.h "the host view").
  if (host.has_value()) {
    const bool arrives = !host_pods_.contains(id);
    const int64_t arrival = arrives ? NoteHostArrival(*host, /*asks_for_units=*/true) : -1;
    CountHost(id, a.node, *host);
    if (arrives) host_pods_.find(id)->second.reserved_arrival = arrival;
  }
  return absl::OkStatus();
}

namespace {

template <typename... Parts>
absl::Status ReserveFailed(const PodClaim& claim, const Parts&... parts) {
  return absl::FailedPreconditionError(absl::StrCat("reserve ", claim.key, ": ", parts...));
}

}  // namespace

absl::Status ClusterState::CheckUnitsExist(const PodClaim& claim, const Assignment& a) const {
  auto fail = [&](const auto&... parts) { return ReserveFailed(claim, parts...); };
  const NodeState* node = FindNode(a.node);
  if (node == nullptr || node->removed) return fail("node ", a.node, " unknown");
  if (a.offering < 0 || static_cast<size_t>(a.offering) >= catalog_->size()) {
    return fail("offering ", a.offering, " not in the catalog");
  }
  const Offering& offering = catalog_->Get(a.offering);
  const NodeOffering* no = node->Find(a.offering);
  if (no == nullptr || no->advertised_name.empty()) {
    return fail("offering ", offering.resource, " not on node ", a.node);
  }
  if (!no->unusable_reason.empty()) {
    return fail("offering ", offering.resource, " unusable on node ", a.node, ": ",
                no->unusable_reason);
  }
  if (a.units.empty()) return fail("no unit index given");
  if (a.units.size() > static_cast<size_t>(kMaxUnitsPerPod)) {
    return fail(a.units.size(), " units, at most ", kMaxUnitsPerPod);
  }
  for (size_t i = 0; i < a.units.size(); ++i) {
    const int32_t index = a.units[i];
    if (index < 0 || static_cast<size_t>(index) >= no->units.size()) {
      return fail("unit index ", index, " out of range on node ", a.node, " (",
                  no->advertised_units, " units of ", offering.resource, ")");
    }
    if (i > 0 && index <= a.units[i - 1]) return fail("unit indices not sorted and distinct");
  }
  for (int32_t index : a.units) {
    if (no->units[static_cast<size_t>(index)].draining) {
      return fail("unit ", UnitId(a.node, offering.resource, index), " is draining");
    }
    if (no->units[static_cast<size_t>(index)].user_claimed) {
      return fail("unit ", UnitId(a.node, offering.resource, index),
                  " is held by a user-made ResourceClaim (DRA)");
    }
    if (no->units[static_cast<size_t>(index)].unhealthy) {
      return fail("unit ", UnitId(a.node, offering.resource, index),
                  " is unhealthy (the node agent's inventory says so)");
    }
  }
  switch (offering.sharing) {
    case Sharing::kExclusive:
      if (a.amount_per_unit != 1) return fail("exclusive units take amount 1");
      break;
    case Sharing::kTimeSliced:
      if (a.amount_per_unit != 1 || a.units.size() != 1) {
        return fail("time-sliced takes one ticket of one unit");
      }
      break;
    case Sharing::kMps:
      if (a.units.size() != 1) return fail("mps takes shares of one unit");
      if (a.amount_per_unit < 1 || a.amount_per_unit > no->replicas) {
        return fail("mps amount ", a.amount_per_unit, " outside 1..", no->replicas);
      }
      break;
  }
  return absl::OkStatus();
}

absl::Status ClusterState::CheckRoom(const PodClaim& claim, const std::string& project_name,
                                     const Assignment& a) const {
  auto fail = [&](const auto&... parts) { return ReserveFailed(claim, parts...); };
  const Offering& offering = catalog_->Get(a.offering);
  const NodeOffering* no = FindNode(a.node)->Find(a.offering);  // CheckUnitsExist found it
  for (int32_t index : a.units) {
    const Unit& unit = no->units[static_cast<size_t>(index)];
    if (unit.Free() < a.amount_per_unit) {
      return fail("not enough free capacity on unit ", UnitId(a.node, offering.resource, index),
                  " (", unit.Free(), " free, ", a.amount_per_unit, " wanted)");
    }
  }
  const ProjectId project = FindProject(project_name);
  // (An exclusive unit that is not empty failed on capacity above.)
  for (int32_t index : a.units) {
    const Unit& unit = no->units[static_cast<size_t>(index)];
    if (!UnitAdmits(offering, unit.Empty(), unit.owner, project)) {
      return fail("unit ", UnitId(a.node, offering.resource, index),
                  " is owned by another project");
    }
  }
  const int64_t delta = UsageDelta(offering, *no, a, project);
  const int64_t quota = Quota(project, a.offering);
  const int64_t usage = Usage(project, a.offering);
  // Only new usage is checked: joining a unit the project already owns adds none, and stays
  // allowed even after the quota was lowered below what the project holds (the filter's rule).
  if (!QuotaAllows(offering.sharing, quota, usage, delta)) {
    if (offering.sharing == Sharing::kTimeSliced) {
      return fail("quota of project ", project_name, " for ", offering.resource,
                  " exceeded (its slices hold ", usage, " tickets, quota ", quota,
                  " tickets: no new slice)");
    }
    return fail("quota of project ", project_name, " for ", offering.resource, " exceeded (",
                usage, " used + ", delta, " > ", quota, ")");
  }
  return absl::OkStatus();
}

absl::Status ClusterState::Confirm(absl::string_view pod_id, absl::Time bound_at) {
  auto it = pods_.find(pod_id);
  if (it == pods_.end()) {
    return absl::NotFoundError(absl::StrCat("confirm: pod ", absl::CHexEscape(pod_id), " holds nothing"));
  }
  if (it->second.source == HoldingSource::kReserved) {
    it->second.source = HoldingSource::kConfirmed;
    it->second.bound_by_us_at = bound_at;
    it->second.unconfirmed_since = absl::InfinitePast();
    it->second.binds_in_flight = 0;  // the others' outcomes find it bound: nothing to undo
  }
  return absl::OkStatus();
}

bool ClusterState::ReleaseReservation(absl::string_view pod_id, const Assignment& a) {
  auto it = pods_.find(pod_id);
  if (it == pods_.end() || it->second.source != HoldingSource::kReserved ||
      !(it->second.assignment == a)) {
    return false;
  }
  PodRecord& rec = it->second;
  if (rec.binds_in_flight > 0) --rec.binds_in_flight;
  // Another bind of the same pod still out, or one that may have committed: the units stay
  // until that outcome (or the API's objects) settles them.
  if (rec.binds_in_flight > 0 || rec.unconfirmed_since != absl::InfinitePast()) return false;
  // Still kReserved: the watch has not shown the pod bound, so its host count is ours, and so
  // is its arrival in the window of recent host demand (the next reservation counts it).
  if (auto h = host_pods_.find(pod_id); h != host_pods_.end()) {
    ForgetReservedArrival(h->second.request, h->second.reserved_arrival);
  }
  UncountHostPod(pod_id);
  return Release(pod_id);
}

void ClusterState::MarkUnconfirmed(absl::string_view pod_id, absl::Time since) {
  auto it = pods_.find(pod_id);
  if (it == pods_.end() || it->second.source != HoldingSource::kReserved) return;
  if (it->second.binds_in_flight > 0) --it->second.binds_in_flight;
  if (it->second.unconfirmed_since == absl::InfinitePast()) it->second.unconfirmed_since = since;
}

}  // namespace gse
